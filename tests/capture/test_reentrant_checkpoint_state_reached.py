"""A captured reentrant checkpoint whose function reaches state the compiled frame writes around the call other
than through a plain attribute, global or closure read (NOTE [State the frame writes around a reentrant call],
NOTE [Containers reached inside what the region loads] in capture/reentrant_reads.py; review revAN H1-H5).

Eager's `checkpoint(fn, x, use_reentrant=True)` calls `fn` again in the backward with the state of that moment:
the attribute the frame restored, read through the instance dict (`b.__dict__["k"]`, `vars(b)`); the buffer,
parameter or submodule the frame put into a module's table and took out again (`register_buffer`, `_buffers`,
`_parameters`, `_modules`); an inner list of an outside list read whole by a handler (`torch.tensor(s.nested)`);
a made inner list written after the call; a made dict the frame leaves on the module and the caller changes
before the backward. The region traced with the call's state ran instead: silently other gradients. Each program
runs 3 calls, eager against framejit, with the state and the shapes changing between calls, and compares the
output, x.grad and every parameter's grad.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as ckpt

import framejit
import framejit.capture.reentrant_recall as reentrant_recall
from tests.helpers import CountingBackend, assert_same, assert_same_grads, logged_breaks


class _Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("w", torch.ones(4))
        self.k = 1.0

    def forward(self, t):
        return self.lin(t) * self.w


class _Inner(nn.Module):
    def __init__(self, k: float) -> None:
        super().__init__()
        self.lin, self.k = nn.Linear(4, 4), k

    def forward(self, t):
        return self.lin(t) * self.k


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Inner(2.0)

    def forward(self, t):
        return self.inner(t)


class _Model(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case, self.lin, self.b, self.o, self.alt = case, nn.Linear(4, 4), _Buffered(), _Outer(), _Inner(5.0)
        self.nested = [[1.0]]

    def forward(self, x):  # noqa: C901 - one program per case
        c, b = self.case, self.b
        if c in ("instance_dict_read", "vars_read"):
            old = b.k
            b.k = 3.0 * old
            if c == "vars_read":
                y = ckpt.checkpoint(lambda t: self.lin(t) * vars(b)["k"], x, use_reentrant=True)
            else:
                y = ckpt.checkpoint(lambda t: self.lin(t) * b.__dict__["k"], x, use_reentrant=True)
            b.k = old
            return y
        if c in ("register_buffer", "buffers_dict"):
            old = b.w
            if c == "register_buffer":
                b.register_buffer("w", old * 3)
            else:
                b._buffers["w"] = old * 3
            y = ckpt.checkpoint(b, x, use_reentrant=True)
            if c == "register_buffer":
                b.register_buffer("w", old)
            else:
                b._buffers["w"] = old
            return y
        if c == "parameters_dict":
            old = b.lin.weight
            b.lin._parameters["weight"] = nn.Parameter(old.detach() * 3)
            y = ckpt.checkpoint(b, x, use_reentrant=True)
            b.lin._parameters["weight"] = old
            return y
        if c == "modules_dict":
            old = self.o._modules["inner"]
            self.o._modules["inner"] = self.alt
            y = ckpt.checkpoint(self.o, x, use_reentrant=True)
            self.o._modules["inner"] = old
            return y
        if c == "nested_outside_list":
            old = self.nested[0][0]
            self.nested[0][0] = 3.0 * old
            y = ckpt.checkpoint(lambda t: self.lin(t) * torch.tensor(self.nested)[0, 0], x, use_reentrant=True)
            self.nested[0][0] = old
            return y
        if c == "nested_made_list_written_after":
            lst = [[2.0]]
            y = ckpt.checkpoint(lambda t: self.lin(t) * torch.tensor(lst)[0, 0], x, use_reentrant=True)
            lst[0][0] = 5.0
            return y
        cfg = {"k": 2.0}  # "made_dict_changed_by_the_caller" and the ones reached through a made object
        if c == "made_dict_changed_by_the_caller":
            self.cfg = cfg
        else:  # the object holding it kept as a set element, a dict key, in a frozenset (revBC HIGH-1)
            holder = _Holder(cfg)
            self.kept = {"in_a_set": {holder}, "as_a_dict_key": {holder: 1}, "in_a_frozenset": frozenset([holder])}[
                c.rsplit("made_dict_", 1)[-1]]
        return ckpt.checkpoint(lambda t: self.lin(t) * cfg["k"], x, use_reentrant=True)


class _Holder:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg


_CAPTURED = ["instance_dict_read", "vars_read", "register_buffer", "buffers_dict", "parameters_dict", "modules_dict",
             "nested_outside_list"]
_BREAKS = ["nested_made_list_written_after", "made_dict_changed_by_the_caller", "made_dict_in_a_set",
           "made_dict_as_a_dict_key", "made_dict_in_a_frozenset"]


def _steps(model, case: str) -> list:
    steps = []
    for k in range(3):
        model.b.k, model.nested[0][0], model.alt.k = 1.0 + k, 1.0 + 2 * k, 5.0 + k
        x = torch.randn(2 + k % 2, 4, generator=torch.Generator().manual_seed(k)).requires_grad_()
        out = model(x)
        if case == "made_dict_changed_by_the_caller":
            model.cfg["k"] = 5.0 + k  # eager's recomputation reads it
        elif case.startswith("made_dict_"):
            next(iter(model.kept)).cfg["k"] = 5.0 + k
        out.pow(2).sum().backward()
        steps.append((out.detach(), x.grad, {n: p.grad for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    return steps


@pytest.mark.parametrize("case", _CAPTURED + _BREAKS)
def test_state_reached_other_than_by_a_plain_read_is_read_by_the_recomputation_as_in_eager(case):
    """At the parent each case recomputed with the state of the call: x.grad off by 6.8 (instance dict, vars,
    nested lists, the made dict), 7.9 (buffers), 9.9 (parameters), 59.8 (the swapped submodule). The made dict
    reached through a set element, a dict key or a frozenset was still wrong at b8ad1a6 (6.8, revBC HIGH-1)."""
    torch.manual_seed(0)
    model = _Model(case)
    twin = copy.deepcopy(model)
    want = _steps(model, case)
    backend = CountingBackend()
    with logged_breaks() as records:
        got = _steps(framejit.compile(twin, backend=backend), case)
    for (out, xg, grads), (w_out, w_xg, w_grads) in zip(got, want):
        assert_same(out, w_out)
        torch.testing.assert_close(xg, w_xg, atol=1e-6, rtol=1e-5)
        assert_same_grads(grads, w_grads)
    breaks = [r for r in records if "graph break" in r]
    if case in _BREAKS:  # the recipe holds the made value as it was at the call: torch's checkpoint runs at a break
        assert breaks and all("use_reentrant=True" in r for r in breaks), records
    else:  # captured; every recomputation runs `fn` (stale) or checks what it read
        assert not breaks, records
        recalls = [n.target.recall for gm in backend.graphs for n in gm.graph.nodes
                   if type(n.target).__name__ == "ReentrantCall"]
        assert recalls and all(r.stale is not None or r.checks for r in recalls)


class _Sized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.n = nn.Linear(4, 4), 1

    def forward(self, t):
        return self.lin(t) * self.n


class _SizeModel(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case, self.b = case, _Sized()

    def forward(self, x):
        if self.case == "restored":
            old = self.b.n
            self.b.n = x.shape[0]
            y = ckpt.checkpoint(self.b, x, use_reentrant=True)
            self.b.n = old
            return y
        self.b.n = x.shape[0]
        return ckpt.checkpoint(self.b, x, use_reentrant=True)


@pytest.mark.parametrize("case", ["kept", "changed_by_the_caller", "restored"])
def test_a_stored_size_is_checked_against_the_value_of_the_call(case, monkeypatch):
    """revAN R2: `self.b.n = x.shape[0]` read by the region made every recomputation run `fn` eagerly once the size
    was symbolic (3 of 4 backwards at the parent); the check now compares the stored attribute with the size the
    graph call had: the region recomputes where it holds, `fn` runs (as eager's) where the caller or the frame
    changed it."""
    torch.manual_seed(0)
    model = _SizeModel(case)
    twin = copy.deepcopy(model)

    def steps(target, m):
        result = []
        for k in range(4):
            x = torch.randn(2 + k, 4, generator=torch.Generator().manual_seed(k)).requires_grad_()
            out = target(x)
            if case == "changed_by_the_caller":
                m.b.n = 7 + k
            out.pow(2).sum().backward()
            result.append((out.detach(), x.grad, {n: p.grad for n, p in m.named_parameters()}))
            m.zero_grad(set_to_none=True)
        return result
    want = steps(model, model)
    runs = []
    eager = reentrant_recall.Recall.eager
    monkeypatch.setattr(reentrant_recall.Recall, "eager", lambda self, *a: runs.append(1) or eager(self, *a))
    backend = CountingBackend()
    with logged_breaks() as records:
        got = steps(framejit.compile(twin, backend=backend), twin)
    for (out, xg, grads), (w_out, w_xg, w_grads) in zip(got, want):
        assert_same(out, w_out)
        torch.testing.assert_close(xg, w_xg, atol=1e-6, rtol=1e-5)
        assert_same_grads(grads, w_grads)
    assert not [r for r in records if "graph break" in r], records
    assert backend.graph_count == 2
    assert len(runs) == (0 if case == "kept" else 4)
