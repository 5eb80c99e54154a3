"""A compiled graph whose autograd node gets no gradient hands none on, as eager's backward, which never
reaches it (NOTE [A joint no gradient reaches] in framejit/backends/joint_unreached.py), on the eager,
onnxrt and triton backends.

`a, b = heads(x, trunk(x))` with b using only trunk's output, then `a.backward()`: eager never reaches trunk,
so its weight keeps `.grad` None and AdamW skips it; the joint of heads handed trunk's node an undefined
gradient, autograd.Function materialised zeros, and trunk's weight got a zero gradient (weight decay then
moved it) and its hooks ran. Each program runs eagerly and compiled from the same weights and data, with
changing sizes (the first call of a signature runs AOT autograd's callable, the later ones framejit's lean
Function); grads (None included), parameters and the hooks' calls are compared."""
from __future__ import annotations

import pytest
import torch

from tests.backends.training_observe import assert_same, grad_copy, run_observed

BACKENDS = ["eager", "onnxrt", "triton"]


def _trunk_no_loss_reaches(compile_fn, observed):
    """The upstream graph's weight stays None and AdamW with weight decay leaves it alone; hooks on it are not
    called while no loss reaches it, and run with gradients once one does."""
    w1, w2 = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    calls = []
    w2.register_hook(lambda g: calls.append(("hook", g is None)))
    w2.register_post_accumulate_grad_hook(lambda p: calls.append(("post", p.grad is None)))
    opt = torch.optim.AdamW([w1, w2], lr=0.1, weight_decay=0.1)
    trunk = compile_fn(lambda x: (x * w2).tanh())
    heads = compile_fn(lambda x, z: ((x * w1).sum(), (z * 3).sum()))
    for n, both in ((2, False), (2, False), (3, False), (3, True)):
        x = torch.randn(n, 3)
        a, b = heads(x, trunk(x))
        (a + b if both else a).backward()
        observed += [[grad_copy(w1.grad), grad_copy(w2.grad)], list(calls)]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([w1.detach().clone(), w2.detach().clone()])


def _hooked_activation_into_the_trunk(compile_fn, observed):
    """A hooked activation passed into the upstream graph: its hook is not called, as in eager."""
    w0, w1, w2 = (torch.randn(3, requires_grad=True) for _ in range(3))
    calls = []
    trunk = compile_fn(lambda h: (h * w2).sin())
    heads = compile_fn(lambda x, z: ((x * w1).sum(), (z * 3).sum()))
    for n in (2, 2, 3):
        x = torch.randn(n, 3)
        h = x * w0
        h.register_hook(lambda g: calls.append(g is None))
        a, b = heads(x, trunk(h))
        a.backward()
        observed += [[grad_copy(w0.grad), grad_copy(w1.grad), grad_copy(w2.grad)], list(calls)]
        calls.clear()
        w0.grad = w1.grad = w2.grad = None


def _eager_body_no_loss_reaches(compile_fn, observed):
    """An eager body feeding the compiled heads' output no loss reaches: the body's weights keep None and their
    tensor and post-accumulate-grad hooks are not called (eager never reaches them)."""
    body, w, head = torch.nn.Linear(3, 3), torch.randn(3, requires_grad=True), torch.nn.Linear(3, 2)
    weights = [*body.parameters(), w, *head.parameters()]
    calls = []
    for p in body.parameters():
        p.register_hook(lambda g: calls.append(("hook", g is None)))
    body.weight.register_post_accumulate_grad_hook(lambda p: calls.append(("post", p.grad is None)))
    heads = compile_fn(lambda x, z: ((x * w).sum(), head(z)))
    for n, both in ((2, False), (2, False), (3, False), (3, True)):
        x = torch.randn(n, 3)
        a, b = heads(x, body(x).relu())
        (a + b.sum() if both else a).backward()
        observed += [[grad_copy(p.grad) for p in weights], list(calls)]
        calls.clear()
        for p in weights:
            p.grad = None


def _heads_one_after_the_other(compile_fn, observed):
    """`a.backward(); b.backward()` without retain_graph: the first backward does not free the upstream graph's
    saved tensors (eager never reaches it), so the second trains it; autograd.grad of a with respect to the
    upstream weight alone raises eager's "not used" error and frees nothing either."""
    w1, w2 = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    trunk = compile_fn(lambda x: (x * w2).tanh())
    heads = compile_fn(lambda x, z: ((x * w1).sum(), (z * 3).sum()))
    for n in (2, 2, 3):
        x = torch.randn(n, 3)
        a, b = heads(x, trunk(x))
        a.backward()
        observed.append([grad_copy(w1.grad), grad_copy(w2.grad)])
        b.backward()
        observed.append([grad_copy(w1.grad), grad_copy(w2.grad)])
        w1.grad = w2.grad = None
        a, b = heads(x, trunk(x))
        with pytest.raises(RuntimeError, match="appears to not have been used"):
            torch.autograd.grad(a, [w2])
        observed.append(list(torch.autograd.grad(b, [w1, w2], allow_unused=True)))


def _two_outputs_one_reached(compile_fn, observed):
    """An upstream graph with two outputs, one reached: the other's gradient is made zeros, as before."""
    w1, w2, w3 = (torch.randn(3, requires_grad=True) for _ in range(3))
    trunk = compile_fn(lambda x: ((x * w2).tanh(), (x * w3).sin()))
    heads = compile_fn(lambda x, z, u: ((x * w1 * u).sum(), (z * 3).sum()))
    for n in (2, 2, 3):
        x = torch.randn(n, 3)
        a, b = heads(x, *trunk(x))
        a.backward()
        observed.append([grad_copy(w1.grad), grad_copy(w2.grad), grad_copy(w3.grad)])
        w1.grad = w2.grad = w3.grad = None


class _NoGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        return None


def _custom_function_returns_none(compile_fn, observed):
    """A custom Function below the graph returns None: eager reaches the graph's nodes with None and calls the
    weight's hook with None; so does the joint."""
    w, v = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    calls = []
    w.register_hook(lambda g: calls.append(g is None))
    f = compile_fn(lambda x: (x * w).tanh())
    for n in (2, 2, 3):
        loss = _NoGradient.apply(f(torch.randn(n, 3))).sum() + (v * 2).sum()
        loss.backward()
        observed += [[grad_copy(w.grad), grad_copy(v.grad)], list(calls)]
        calls.clear()
        w.grad = v.grad = None


# (program, backwards through joints): with a custom Function returning None only the first call's backward
# (AOT autograd's callable, which compiles the backward half then) runs a backward half
PROGRAMS = [pytest.param(program, backwards, id=program.__name__.strip("_")) for program, backwards in (
    (_trunk_no_loss_reaches, 3), (_hooked_activation_into_the_trunk, 3), (_eager_body_no_loss_reaches, 3),
    (_heads_one_after_the_other, 3),
    (_two_outputs_one_reached, 3),
    (_custom_function_returns_none, 1))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program, backwards", PROGRAMS)
def test_a_joint_no_gradient_reaches_hands_none_on(program, backwards, backend):
    eager, compiled = run_observed(program, backend, joint_calls=3, backwards=backwards, lean=True)
    assert_same(eager, compiled)
