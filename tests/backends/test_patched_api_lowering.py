"""A torch C function patched at its name after the first call (`torch._C._nn.gelu = patch`, which eager's
`F.gelu`, bound at import, never reads) does not reach what a backend lowers later for a new shape or for
training (NOTE [Patched torch functions while lowering] in backends/torch_methods.py). Differential over
calls of changing length; the patch is undone at the end of each test."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit


def _gelu_plus_one(x):
    return F.gelu(x) + 1


@pytest.fixture
def patch_gelu():
    original = torch._C._nn.gelu

    def patch():
        torch._C._nn.gelu = lambda t, approximate="none": original(t, approximate=approximate) + 100
    yield patch
    torch._C._nn.gelu = original


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_a_new_shape_after_the_patch_is_lowered_with_torchs_gelu(backend, patch_gelu):
    # before: onnxrt gave gelu(x) + 301 at lengths 5 and 7 (the patch traced under each lowering mode),
    # triton gelu(x) + 201
    compiled = framejit.compile(_gelu_plus_one, backend=backend)
    for call, n in enumerate((3, 3, 5, 7)):
        if call == 1:
            patch_gelu()
        x = torch.linspace(-2, 2, n)
        torch.testing.assert_close(compiled(x), _gelu_plus_one(x))


def _loss(x, w):
    return (F.gelu(x * w) + 1).sum()


def test_a_training_graph_after_the_patch_is_lowered_with_torchs_gelu(patch_gelu):
    # before: the joint graph for length 5 gave the loss + 1000 (5 elements x 2 modes x 100)
    compiled = framejit.compile(_loss, backend="onnxrt")
    for call, n in enumerate((3, 3, 5)):
        if call == 1:
            patch_gelu()
        x = torch.linspace(-2, 2, n)
        w_eager, w_compiled = torch.ones(n, requires_grad=True), torch.ones(n, requires_grad=True)
        want, got = _loss(x, w_eager), compiled(x, w_compiled)
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(w_compiled.grad, w_eager.grad)
