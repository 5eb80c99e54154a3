"""Hooks on the inputs and outputs of a compiled function that a backward does not reach are not called, as in
eager (NOTE [Hooks of inputs no backward reaches], NOTE [Hooks of outputs no backward reaches] in
framejit/backends/joint_unreached.py), on the eager, onnxrt and triton backends.

A joint is one autograd node for all its outputs: before, a backward of one output called the tensor hooks of
the other outputs with None (a user's hook failed on None.clone()), and an input only the other outputs reach
kept a zero gradient whenever it had a hook (grad clipping by hooks on a two-head model: AdamW's weight decay
moved the head no loss reached; eager leaves its .grad None and skips it). Each program runs eagerly and
compiled from the same weights and data, 3 steps with fresh inputs and changing sizes (the first call runs
AOT autograd's callable, the later ones framejit's lean Function); grads (None included), parameters and
the hooks' calls are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import assert_same, grad_copy, run_observed

BACKENDS = ["eager", "onnxrt", "triton"]


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.h1, self.h2 = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 3)

    def forward(self, x):
        z = self.body(x).relu()
        return self.h1(z), self.h2(z)


def _clipping_hooks_adamw(compile_fn, observed):
    """Grad clipping by tensor hooks and AdamW with weight decay; only the first head's loss is backwarded."""
    model = TwoHeads()
    calls = []
    for k, p in enumerate(model.parameters()):
        p.register_hook(lambda g, k=k: calls.append(k) or g.clamp(-0.05, 0.05))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    fn = compile_fn(model)
    for n in (2, 2, 3):
        a, b = fn(torch.randn(n, 4))
        (a * 3).sum().backward()
        observed.append([grad_copy(p.grad) for p in model.parameters()])
        observed.append(sorted(calls))
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in model.parameters()])


def _post_accumulate_hooks(compile_fn, observed):
    """Post-accumulate-grad hooks (an SGD step per parameter, with weight decay) on both heads."""
    model = TwoHeads()
    opts, stepped = {}, []

    def step(p, k):
        stepped.append(k)
        opts[p].step()
        opts[p].zero_grad()
    for k, p in enumerate(model.parameters()):
        opts[p] = torch.optim.SGD([p], lr=0.1, weight_decay=0.1)
        p.register_post_accumulate_grad_hook(lambda p, k=k: step(p, k))
    fn = compile_fn(model)
    for n in (2, 2, 3):
        a, b = fn(torch.randn(n, 4))
        (b.sin().sum() if n == 3 else a.sum()).backward()
        observed.append(sorted(stepped))
        stepped.clear()
        observed.append([p.detach().clone() for p in model.parameters()])


def _input_hooks_and_outside_use(compile_fn, observed):
    """Hooks on inputs (a leaf, an activation passed in); y is also used outside the graph, so its hook gets
    that gradient (once) even where the backwarded output does not reach it inside."""
    fn = compile_fn(lambda x, y, h: ((x * y.cos()).sum(), (y * 3).tanh().sum() + (h * h).sum()))
    for n in (3, 3, 4):
        x, y, w = (torch.randn(n, requires_grad=True) for _ in range(3))
        h = w * 2
        seen = []
        for name, t in (("x", x), ("y", y), ("h", h)):
            t.register_hook(lambda g, name=name: seen.append((name, g.clone())))
        a, b = fn(x, y, h)
        (a + (y * 5).sum()).backward(retain_graph=True)  # b.backward() below needs the graph
        observed.append([grad_copy(x.grad), grad_copy(y.grad), grad_copy(w.grad)])
        observed.append([name for name, _ in seen])
        observed.extend(g for _, g in seen)
        b.backward()
        observed.append([grad_copy(x.grad), grad_copy(y.grad), grad_copy(w.grad)])
        observed.append([name for name, _ in seen])


def _output_hooks(compile_fn, observed):
    """Hooks and retain_grad() on the outputs: only the backwarded output's run, and its hook's result is the
    gradient that flows on and that retain_grad() keeps."""
    fn = compile_fn(lambda x, y: ((x * 2).sin().sum(), (y * 3).sum(), (x * y).sum()))
    for n in (2, 2, 3):
        x, y = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
        seen = []
        a, b, c = fn(x, y)
        b.register_hook(lambda g: seen.append(("b", g.clone())))
        c.register_hook(lambda g: seen.append(("c", g.clone())))
        a.register_hook(lambda g: seen.append(("a", g.clone())) or g * 4)
        a.retain_grad()
        a.backward(retain_graph=True)
        observed.append([grad_copy(x.grad), grad_copy(y.grad), grad_copy(a.grad)])
        observed.append([name for name, _ in seen])
        observed.extend(g for _, g in seen)
        (b + c).backward()
        observed.append([grad_copy(x.grad), grad_copy(y.grad)])
        observed.append([name for name, _ in seen])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_clipping_hooks_adamw, _post_accumulate_hooks, _input_hooks_and_outside_use,
                                     _output_hooks])
def test_hooks_no_backward_reaches_are_not_called(backend, program):
    eager, compiled = run_observed(program, backend, joint_calls=3, backwards=3, lean=True)
    assert_same(eager, compiled)
