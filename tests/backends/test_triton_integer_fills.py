"""NOTE [Integer fills of floats] (backends/triton/lowering_pointwise.py; review revD D4): a fill of an integer
tensor with a float holds the value torch converts it to (truncated toward zero; bool: nonzero), also in the
arithmetic the kernel fuses after it. Eager vs triton (TRITON_INTERPRET=1) over changing inputs, exact."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

import framejit


def full_like_times(x):
    return torch.full_like(x, 2.5, dtype=torch.int64) * 3 + x.long()


def full_like_negative(x):
    return torch.full_like(x, -0.6, dtype=torch.int64) + x.long()


def fill_in_place(x):
    return x.long().fill_(0.6) + x.long()


def new_full_of_a_size(x):
    return x.new_full((2,), x.size(0) / 2, dtype=torch.int32) * 3


def bool_fill(x):
    return torch.full_like(x, 0.25, dtype=torch.bool) & (x > 0)


def one_element_scalar(x):
    return torch.scalar_tensor(1.75, dtype=torch.int64) + x.long()


@pytest.mark.parametrize("fn", [full_like_times, full_like_negative, fill_in_place, new_full_of_a_size, bool_fill,
                                one_element_scalar], ids=lambda f: f.__name__)
def test_integer_fills_of_floats_are_converted_as_torch_converts_them(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="triton", dynamic=False)
    for rows in (3, 1, 5):
        x = torch.linspace(-1.5, 1.5, rows)
        want, got = fn(x.clone()), compiled(x.clone())
        assert got.dtype == want.dtype and torch.equal(got, want)
