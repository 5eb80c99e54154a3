"""A backward of some outputs of a compiled function leaves `.grad` None on the inputs only other outputs
depend on, as eager (NOTE [Inputs no backward reaches] in framejit/backends/joint_unreached.py), on onnxrt and
triton: before, the joint's node handed them a zero gradient computed from the missing outputs' zero tangents.

Each program runs eagerly and compiled from the same weights and data, 3 calls with changing sizes (the first
call runs AOT autograd's callable, the later ones framejit's lean Function); grads (None included), values
and optimizer steps are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import TOL, grad_copy, run_observed

BACKENDS = ["onnxrt", "triton"]


def _observed(program, backend, lean: bool, backwards: int = 2) -> tuple[list, list]:
    """run_observed with this file's proof: two joint calls, `backwards` backwards, lean calls where `lean`."""
    return run_observed(program, backend, joint_calls=2, backwards=backwards, lean=lean)


def _two_losses(compile_fn, observed):
    fn = compile_fn(lambda x, y, z: ((x * z).sum(), (y * 3).tanh().sum()))
    for n in (3, 3, 4):
        x, y, z = (torch.randn(n, requires_grad=True) for _ in range(3))
        a, b = fn(x, y, z)
        a.backward(retain_graph=True)
        observed.append([grad_copy(t.grad) for t in (x, y, z)])
        b.backward()
        observed.append([grad_copy(t.grad) for t in (x, y, z)])
        x, y, z = (torch.randn(n, requires_grad=True) for _ in range(3))
        a, b = fn(x, y, z)
        b.backward()
        observed.append([grad_copy(t.grad) for t in (x, y, z)])


def _two_heads_sgd(compile_fn, observed):
    """The head no loss reached keeps grad None, so SGD with weight decay and momentum leaves it as it is."""
    trunk, head1, head2 = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(4, 2)
    params = [*trunk.parameters(), *head1.parameters(), *head2.parameters()]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1)

    def heads(x):
        h = trunk(x).relu()
        return head1(h).pow(2).sum(), head2(h).pow(2).sum()
    fn = compile_fn(heads)
    for n in (2, 2, 5):
        opt.zero_grad()
        a, b = fn(torch.randn(n, 3))
        a.backward()
        observed.append([grad_copy(p.grad) for p in params])
        opt.step()
        observed.append([p.detach().clone() for p in params])


def _grad_allow_unused(compile_fn, observed):
    fn = compile_fn(lambda x, y, z: ((x * z).sum(), (y * z).sum()))
    for n in (3, 3, 4):
        x, y, z = (torch.randn(n, requires_grad=True) for _ in range(3))
        a, b = fn(x, y, z)
        observed.append(list(torch.autograd.grad(a, (x, y, z), allow_unused=True, retain_graph=True)))
        try:
            torch.autograd.grad(b, (x, y))
        except RuntimeError as exc:
            observed.append(str(exc))


def _written_input(compile_fn, observed):
    """An activation the graph writes with grad on: its later use sends a gradient into the joint's node."""
    def fn(h, w, v):
        h.mul_(w)
        return (h * 2).sum(), (v * 3).sum()
    fn = compile_fn(fn)
    for n in (3, 3, 4):
        for use_h, pick in ((True, 0), (True, 1), (False, 1)):
            raw, w, v = (torch.randn(n, requires_grad=True) for _ in range(3))
            h = raw * 1
            out = fn(h, w, v)[pick]
            (out + (h * h).sum() if use_h else out).backward()
            observed.append([grad_copy(t.grad) for t in (raw, w, v)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program, lean", [(_two_losses, True), (_two_heads_sgd, True), (_grad_allow_unused, True),
                                           (_written_input, False)])  # AOT autograd's callable on every call
def test_inputs_no_backward_reaches_keep_grad_none(backend, program, lean):
    eager, compiled = _observed(program, backend, lean)
    assert any(isinstance(o, list) and None in o for o in eager)  # the program does leave some grad None
    assert len(compiled) == len(eager)
    for e, c in zip(eager, compiled):
        if isinstance(e, list):
            assert [x is None for x in c] == [x is None for x in e]
            for x, y in zip(e, c):
                if x is not None:
                    torch.testing.assert_close(y, x, **TOL)
        else:
            assert c == e


# NOTE [Hooks added to a written input after the call] (joint_unreached.py): eager's hook sees the gradient of
# the written input's new value, which the joint computes inside its backward: not reproduced, so the backward
# raises framejit's error instead of skipping the hook silently; hooks registered before the call run as eager.
def _written(h, w):
    h.mul_(w)
    return h.sin().sum() + (h * w).sum()


def _hooked(compile_fn, observed, after: bool, retain: bool, later: bool = False):
    fn = compile_fn(_written)
    for n in (3, 3, 4):
        raw, w = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
        h = raw * 1
        seen: list = []
        if not after:
            h.retain_grad() if retain else h.register_hook(lambda g: seen.append(g.clone()))
        loss = fn(h, w)
        if after:
            h.retain_grad() if retain else h.register_hook(lambda g: seen.append(g.clone()))
        try:
            (h * 5).sum().backward() if later else loss.backward()
        except RuntimeError as exc:
            observed.append(str(exc))
            continue
        observed.append([grad_copy(raw.grad), grad_copy(w.grad), grad_copy(h.grad) if retain else None, *seen])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("retain", [False, True])
def test_a_hook_added_after_the_call_on_a_written_input_raises(backend, retain):
    eager, compiled = _observed(lambda c, o: _hooked(c, o, True, retain), backend, False, 0)
    assert all(isinstance(o, list) for o in eager)
    assert all(isinstance(o, str) and "framejit: a " + ("retain_grad()" if retain else "tensor hook") +
               " was added after the call" in o and 'backend="eager"' in o for o in compiled)
    assert len(compiled) == len(eager) == 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("retain", [False, True])
def test_a_hook_added_after_the_call_on_a_written_input_sees_a_later_use_as_in_eager(backend, retain):
    # only a later use of h is backwarded, not the graph's output: the gradient comes in through h's new
    # value alone, which the hook sees as in eager (before, the joint's node raised on any backward)
    eager, compiled = _observed(lambda c, o: _hooked(c, o, True, retain, later=True), backend, False)
    assert all(len(o) == 4 - retain and (o[2] is not None) == retain for o in eager)  # the hook / .grad got it
    _same(eager, compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hook_added_before_the_call_on_a_written_input_runs_as_in_eager(backend):
    eager, compiled = _observed(lambda c, o: _hooked(c, o, False, False), backend, False)
    _same(eager, compiled)


def _same(eager: list, compiled: list) -> None:
    assert len(compiled) == len(eager) == 3 and all(isinstance(o, list) for o in compiled)
    for e, c in zip(eager, compiled):
        assert [x is None for x in c] == [x is None for x in e]
        for x, y in zip(e, c):
            if x is not None:
                torch.testing.assert_close(y, x, **TOL)
