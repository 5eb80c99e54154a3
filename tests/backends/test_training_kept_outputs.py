"""Outputs of one compiled call backwarded one after the other, without retain_graph, train as in eager, and
raise eager's errors where eager's backwards share a freed node (NOTE [Saved tensors kept for the other
outputs] in framejit/backends/joint_kept.py), on the eager, onnxrt and triton backends.

Before, `a, b = cf(x, y); a.backward(); b.backward()` raised "Trying to backward through the graph a second
time" on onnxrt and triton even where a's and b's eager graphs share no node (the joint is one node, freed by
the first backward). Each program runs eagerly and compiled from the same weights and data, 3 calls with fresh
inputs and changing sizes (the first call runs AOT autograd's callable, the later ones framejit's lean
Function); grads (None included), parameters and error messages are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import assert_same, grad_copy, run_observed

BACKENDS = ["eager", "onnxrt", "triton"]


def _backward(t, observed, **kwargs) -> None:
    try:
        t.backward(**kwargs)
    except RuntimeError as exc:
        observed.append(str(exc))


def _disjoint_outputs(compile_fn, observed):
    """No node of eager's graph is shared: both orders train both, as do later backwards of the first."""
    fn = compile_fn(lambda x, y: ((x * x).sin().sum(), (y * y).cos().sum()))
    for n in (3, 3, 4):
        for first in (0, 1):
            x, y = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
            outs = fn(x, y)
            _backward(outs[first], observed)
            observed.append([grad_copy(x.grad), grad_copy(y.grad)])
            _backward(outs[first], observed)  # eager: its sin/cos node was freed
            _backward(outs[1 - first], observed)
            observed.append([grad_copy(x.grad), grad_copy(y.grad)])


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.h1, self.h2 = nn.Linear(4, 2), nn.Linear(4, 3)

    def forward(self, x, y):
        return self.h1(x).tanh().sum(), self.h2(y).sin().pow(2).mean()


def _two_losses_adamw(compile_fn, observed):
    model = TwoHeads()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    fn = compile_fn(model)
    for n in (2, 2, 5):
        a, b = fn(torch.randn(n, 4), torch.randn(n, 4))
        _backward(a, observed)
        _backward(b, observed)
        observed.append([grad_copy(p.grad) for p in model.parameters()])
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in model.parameters()])


def _shared_node(compile_fn, observed):
    """Both outputs go through tanh's node, which saved its result: eager's second backward raises, unless the
    first retained the graph."""
    def shared(x, y):
        z = (x * y).tanh()
        return (z * 2).sum(), (z * 3).sum()
    fn = compile_fn(shared)
    for n in (2, 2, 3):
        for retain in (False, True):
            x, y = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
            a, b = fn(x, y)
            _backward(a, observed, retain_graph=retain)
            _backward(b, observed)
            observed.append([grad_copy(x.grad), grad_copy(y.grad)])


def _input_changed_between(compile_fn, observed):
    """x, saved by eager for b's gradient, is changed between the two backwards: eager's version error."""
    fn = compile_fn(lambda x, y: ((x * x).sum(), (y * x).sum()))
    for n in (2, 2, 3):
        for change in (False, True):
            x, y = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
            a, b = fn(x, y)
            _backward(a, observed)
            if change:
                with torch.no_grad():
                    x.add_(1)
            _backward(b, observed)
            observed.append([grad_copy(x.grad), grad_copy(y.grad)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_disjoint_outputs, _two_losses_adamw, _shared_node, _input_changed_between])
def test_outputs_backwarded_one_after_the_other_train_as_in_eager(backend, program):
    eager, compiled = run_observed(program, backend, joint_calls=3, backwards=3, lean=True)
    assert_same(eager, compiled)
    assert any(isinstance(o, list) for o in eager)
