"""A captured `torch.vmap` (NOTE [vmap regions] in framejit/capture/vmap_capture.py) on the lowering backends:
onnxrt and triton trace the VmapCall node with make_fx into batched aten ops. Differential, two calls with
changing values and shapes."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same


def lambda_with_none_dim(x, y):
    return torch.vmap(lambda a, b: (a * b).sin() + 1, in_dims=(0, None))(x, y) * 2


def nested(x, y):
    return torch.vmap(torch.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(None, 0))(x, y)


def weighted(x, w):
    return torch.vmap(lambda a: (a * w).tanh().sum())(x)


CASES = [
    (lambda_with_none_dim, lambda s: (torch.randn(4 + s, 3), torch.randn(3))),
    (nested, lambda s: (torch.randn(3), torch.randn(5 + s))),
]


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("fn,make_args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_a_captured_vmap_runs_on_a_lowering_backend(backend, fn, make_args):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for seed in range(2):
        args = make_args(seed)
        assert_same(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_gradients_of_a_captured_vmap_on_a_lowering_backend(backend):
    framejit.reset()
    compiled = framejit.compile(weighted, backend=backend, fullgraph=True)
    for seed in range(2):
        x, w = torch.randn(4 + seed, 3, requires_grad=True), torch.randn(3, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        expected, actual = weighted(x, w), compiled(x2, w2)
        assert_same(actual, expected, rtol=1e-5, atol=1e-5)
        expected.sum().backward()
        actual.sum().backward()
        assert_same(x2.grad, x.grad, rtol=1e-5, atol=1e-5)
        assert_same(w2.grad, w.grad, rtol=1e-5, atol=1e-5)
