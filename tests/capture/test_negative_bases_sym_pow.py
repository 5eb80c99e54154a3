"""NOTE [Negative bases to symbolic powers] (capture/sym_arith.py; review revD D2): an int base that may be
negative to the power of a size is eager's value at every size, with automatic dynamic and dynamic=True."""
from __future__ import annotations

import pytest
import torch

import framejit


def alternating(x):
    return x + (-1) ** x.size(0)


def doubling(x):
    return x * (-2) ** x.size(0) + 3 ** x.size(1)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [alternating, doubling])
def test_negative_base_to_a_size(fn, dynamic):
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for rows, cols in [(4, 2), (6, 3), (3, 2), (2, 4), (5, 1)]:
        x = torch.randn(rows, cols)
        assert torch.equal(compiled(x), fn(x))
