"""A user's patches of torch's C op namespaces (`torch._C._nn.silu = ...`) and of `torch.relu`, seen by graphs
that hold torch Python functions whole (`F.silu`, `F.relu`) as eager sees them, before and after the trace
(NOTE [Patched torch functions while lowering] in backends/torch_methods.py, NOTE [Names read by whole torch
functions] in capture/function_reads.py). onnxrt lowers the graphs; each program is compared with eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import assert_same

NN = torch._C._nn
GELU, SILU, RELU = NN.gelu, NN.silu, torch.relu


@pytest.fixture(autouse=True)
def _restore():
    yield
    NN.gelu, NN.silu, torch.relu = GELU, SILU, RELU


def _swap_names(step):
    NN.gelu, NN.silu = SILU, GELU


def _patch_silu_later(step):
    NN.silu = SILU if step < 2 or step == 4 else (lambda t: SILU(t) + 100)


def _silu_is_gelu_every_other_call(step):
    NN.silu = GELU if step % 2 else SILU


def _patch_relu_later(step):
    torch.relu = RELU if step == 0 else (lambda t: RELU(t) * 3)


PROGRAMS = {
    # revC C3: F.gelu (bound at import) + the builtin now named gelu (silu) + F.silu (reads _nn.silu: gelu)
    "swap": (lambda x: F.gelu(x) + torch._C._nn.gelu(x) * 2 + F.silu(x), _swap_names),
    "later_patch": (lambda x: F.silu(x) + 1, _patch_silu_later),
    "toggled": (lambda x: F.silu(x) * 2, _silu_is_gelu_every_other_call),
    "torch_relu": (lambda x: F.relu(x) - 1, _patch_relu_later),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_patched_names_follow_eager(name, dynamic):
    fn, patch = PROGRAMS[name]
    framejit.reset()
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for step, n in enumerate([3, 5, 7, 4, 6]):
        x = torch.linspace(-2, 2, n)
        patch(step)
        try:
            expected = fn(x)
            actual = compiled(x)
        finally:
            NN.gelu, NN.silu, torch.relu = GELU, SILU, RELU
        assert_same(actual, expected)
