"""A captured reentrant checkpoint whose function reads state the compiled frame itself writes around the call
(NOTE [State the frame writes around a reentrant call] in capture/reentrant_reads.py).

Eager's `checkpoint(fn, x, use_reentrant=True)` calls `fn` again in the backward, reading the state of that moment:
after the frame restored what it set for the call (`self.b.scale = 3 * old` ... `self.b.scale = old`,
`b.eval()` ... `b.train()`, a context manager's flag, a hook registered and removed), or wrote after it. The recall's check compared only the
frame's guards, which describe the state at entry and so held again once the frame restored it: the backward ran
the region traced with the state of the call, with silently different gradients (issue 12/14). Each program runs
3 calls, eager against framejit, with the state changed between calls and the shapes changing, and compares the
output, x.grad and every parameter's grad. A frame that writes state its checkpointed function does not read, or
stores a flag it reads and restores it as it was (transformers' CompileableContextVar around every layer), stays
one graph whose regions recompute in the backward.
"""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as ckpt

import framejit
import framejit.capture.reentrant_recall as reentrant_recall
from tests.helpers import CountingBackend, assert_same, assert_same_grads, logged_breaks

_CONFIG = {"on": False}
_SCALE = 1.0


@contextlib.contextmanager
def _flag(value):
    old = _CONFIG["on"]
    _CONFIG["on"] = value
    try:
        yield
    finally:
        _CONFIG["on"] = old


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.scale = nn.Linear(4, 4), 1.0

    def forward(self, t):
        return self.lin(t) * self.scale


class _ByMode(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, t):
        return self.lin(t) * (2 if self.training else 3)


def _cell_setter():
    k = 1.0

    def run(lin, x):
        nonlocal k
        k = 3.0
        y = ckpt.checkpoint(lambda t: lin(t) * k, x, use_reentrant=True)
        k = 1.0
        return y
    return run


_CELL_RUN = _cell_setter()


class _Model(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case, self.b, self.m, self.lin = case, _Scaled(), _ByMode(), nn.Linear(4, 4)

    def forward(self, x):  # noqa: C901 - one program per case
        global _SCALE
        c = self.case
        if c == "set_and_restore":
            old = self.b.scale
            self.b.scale = 3 * old
            y = ckpt.checkpoint(self.b, x, use_reentrant=True)
            self.b.scale = old
            return y
        if c == "eval_then_train":
            self.m.eval()
            y = ckpt.checkpoint(self.m, x, use_reentrant=True)
            self.m.train()
            return y
        if c == "context_manager_flag":
            with _flag(True):
                return ckpt.checkpoint(lambda t: self.lin(t) * (5 if _CONFIG["on"] else 7), x, use_reentrant=True)
        if c == "dict_made_written_after":
            cfg = {"k": 2}
            y = ckpt.checkpoint(lambda t: self.lin(t) * cfg["k"], x, use_reentrant=True)
            cfg["k"] = 5
            return y
        if c == "stored_then_changed_by_the_caller":
            self.b.scale = 2.0
            return ckpt.checkpoint(self.b, x, use_reentrant=True)
        if c == "global_set_and_restored":
            _SCALE = 3.0
            y = ckpt.checkpoint(lambda t: self.lin(t) * _SCALE, x, use_reentrant=True)
            _SCALE = 1.0
            return y
        if c == "forward_hook_registered_and_removed":
            handle = self.b.register_forward_hook(lambda m, i, o: o * 2)
            y = ckpt.checkpoint(self.b, x, use_reentrant=True)
            handle.remove()
            return y
        if c == "pre_hook_registered_and_removed":
            handle = self.b.register_forward_pre_hook(lambda m, i: (i[0] * 3,))
            y = ckpt.checkpoint(self.b, x, use_reentrant=True)
            handle.remove()
            return y
        return _CELL_RUN(self.lin, x)  # "closure_cell_set_and_restored"


_CASES = ["set_and_restore", "eval_then_train", "context_manager_flag", "dict_made_written_after",
          "stored_then_changed_by_the_caller", "global_set_and_restored", "closure_cell_set_and_restored",
          "forward_hook_registered_and_removed", "pre_hook_registered_and_removed"]


def _steps(model, case: str) -> list:
    steps = []
    for k in range(3):
        model.b.scale = 1.0 + k
        x = torch.randn(2 + k % 2, 4, generator=torch.Generator().manual_seed(k)).requires_grad_()
        out = model(x)
        if case == "stored_then_changed_by_the_caller":
            model.b.scale = 5.0 + k  # eager's recomputation reads it
        out.pow(2).sum().backward()
        steps.append((out.detach(), x.grad, {n: p.grad for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    return steps


def _assert_steps_equal(got: list, want: list) -> None:
    for (out, xg, grads), (w_out, w_xg, w_grads) in zip(got, want):
        assert_same(out, w_out)
        torch.testing.assert_close(xg, w_xg, atol=1e-6, rtol=1e-5)
        assert_same_grads(grads, w_grads)


def _recalls(backend: CountingBackend) -> list:
    return [n.target.recall for gm in backend.graphs for n in gm.graph.nodes
            if type(n.target).__name__ == "ReentrantCall"]


@pytest.mark.parametrize("case", _CASES)
def test_state_the_frame_writes_around_the_call_is_read_by_the_recomputation_as_in_eager(case):
    """At the parent every case recomputed with the state of the call: x.grad off by up to 6.8 (set_and_restore,
    stored_then_changed_by_the_caller), 4.0 (eval_then_train), 22.0 (context_manager_flag), 13.2 (dict, global,
    cell); the hook cases ran the hook in the backward, which eager's recomputation no longer calls."""
    torch.manual_seed(0)
    model = _Model(case)
    twin = copy.deepcopy(model)
    _CONFIG["on"] = False
    want = _steps(model, case)
    backend = CountingBackend()
    with logged_breaks() as records:
        got = _steps(framejit.compile(twin, backend=backend), case)
    _assert_steps_equal(got, want)
    breaks = [r for r in records if "graph break" in r]
    if case == "dict_made_written_after":  # no guard describes the dict: the call is a break, torch's checkpoint runs
        assert breaks and all("is written after the call" in r for r in breaks), records
    else:  # captured, in one graph per shape (static, then dynamic)
        assert not breaks, records
        assert backend.graph_count == 2
        recalls = _recalls(backend)
        assert len(recalls) == 2 and all(r.stale is not None or r.checks for r in recalls)


class _FlagVar:
    """transformers/kernels' CompileableContextVar: set and reset around every layer's forward (in the region)."""

    def __init__(self) -> None:
        self.global_var, self.uses_global_var = None, False

    def get(self):
        return self.global_var if self.uses_global_var else None

    def set(self, value):
        previous, self.global_var, self.uses_global_var = self.global_var, value, True
        return previous

    def reset(self, token):
        self.global_var, self.uses_global_var = token, token is not None


_VAR = _FlagVar()


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, t):
        token = _VAR.set(2.0)
        try:
            scale = _VAR.get()
        finally:
            _VAR.reset(token)
        return self.lin(t) * scale


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(), _Layer(), _Layer()])

    def forward(self, x):
        self.compiling = True  # written on every call, read by no layer
        for layer in self.layers:
            layer.uses_cache = False
            x = ckpt.checkpoint(layer, x, use_reentrant=True)
        self.compiling = False
        return x


def test_writes_the_region_does_not_read_or_leaves_as_they_were_keep_one_graph(monkeypatch):
    """transformers' frames store flags on every call: those are one graph, and every layer's recomputation is its
    region (the later layers read the flags the first one set and reset, which the backward finds as they were).
    Not a failure at the parent: it keeps the fix from breaking at (or recomputing eagerly) such calls."""
    torch.manual_seed(0)
    model = _Stack()
    twin = copy.deepcopy(model)
    xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(k)).requires_grad_() for k in range(3)]

    def steps(target, m):
        result = []
        for x in xs:
            x.grad = None
            out = target(x)
            out.pow(2).sum().backward()
            result.append((out.detach(), x.grad, {n: p.grad for n, p in m.named_parameters()}))
            m.zero_grad(set_to_none=True)
        return result
    want = steps(model, model)
    eager_runs = []
    eager = reentrant_recall.Recall.eager
    monkeypatch.setattr(reentrant_recall.Recall, "eager", lambda self, *a: eager_runs.append(1) or eager(self, *a))
    backend = CountingBackend()
    with logged_breaks() as records:
        got = steps(framejit.compile(twin, backend=backend), twin)
    _assert_steps_equal(got, want)
    assert not [r for r in records if "graph break" in r], records
    assert backend.graph_count == 1
    recalls = _recalls(backend)
    assert len(recalls) == 3 and all(getattr(r, "stale", None) is None for r in recalls)
    assert not eager_runs
