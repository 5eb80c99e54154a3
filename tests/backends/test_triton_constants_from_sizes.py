"""NOTE [Constants made from sizes] (backends/triton/dynamic.py): a tensor the lowering makes from a size (`y[0] =
x.size(1)`: aten.scalar_tensor of the size) is a constant of each probe's graph; the size-generic module served the
first probe's constant at every size (review revB #5). Constants that differ between probes make the graph
specialise, so every size gets eager's value."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

import framejit


def store_a_size(x):
    y = x.clone()
    y[0] = x.size(1)
    return y


def store_a_size_sum(x):
    y = torch.zeros_like(x)
    y[1] = x.size(0) + x.size(1)
    return y * 2


def fill_a_row(x):  # fill_ takes the size as a Scalar argument: it was right before, and stays size-generic
    y = x.clone()
    y[0].fill_(x.size(1))
    return y


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [store_a_size, store_a_size_sum, fill_a_row], ids=lambda f: f.__name__)
def test_values_made_from_sizes_follow_every_size(fn, dynamic):
    framejit.reset()
    compiled = framejit.compile(fn, backend="triton", dynamic=dynamic)
    for shape in [(2, 5), (3, 3), (4, 2), (2, 9)]:
        x = torch.ones(*shape)
        torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
