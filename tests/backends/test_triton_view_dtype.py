"""`x.view(dtype)` on the triton backend reinterprets the bits as eager does (review revE HIGH-2: the lowering of
aten.view relabelled the values, so `x.view(torch.int32)` of a float32 x held x's values converted)."""
import os

import pytest
import torch

import framejit

os.environ.setdefault("TRITON_INTERPRET", "1")


def bits_plus_one(x):
    return x.view(torch.int32) + 1


def doubled_bits(x):
    return (x * 2).view(torch.int32)


def half_bits(x):
    return x.half().view(torch.int16) - 3


@pytest.mark.parametrize("fn", [bits_plus_one, doubled_bits, half_bits])
@pytest.mark.parametrize("backend", ["eager", "triton"])
def test_view_as_another_dtype_keeps_the_bits(fn, backend):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    for n in (4, 4, 6):
        x = torch.randn(2, n)
        got, want = compiled(x), fn(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
