"""Fill values computed from int arguments and sizes on triton with symbolic sizes, eager vs compiled (issue 13;
review revF F2 of c67ee3c, reverted).

c67ee3c fitted a 0-d constant that differs between the probe sizes as a formula of the symbols and made it per
call; the fit is only right where the probes' formula holds, so `abs(n)` fitted as `n` at the positive probes
and one module served every n with wrong values (n = -3: eager 6, framejit -6; n % 4096 at 4099: eager 6,
framejit 8198; x.size(0) % 1024 at 1030 rows: eager 12, framejit 2060). Such constants keep the graph per value
again (NOTE [Constants made from sizes], dynamic.py).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same


def _abs_fill(x, n):
    y = x.clone()
    y[:, :2] = abs(n)
    return y * 2


def _mod_fill(x, n):
    y = x.clone()
    y[:, :2] = n % 4096
    return y * 2


def _bits_fill(x, n):
    y = x.clone()
    y[:, 0] = n & 0xFFFF
    return y + 1


def _abs_times_size(x, n):
    y = x.clone()
    y[0] = abs(-n) * x.size(1)
    return y


def _size_mod_fill(x):
    y = x.clone()
    y[:, 0] = x.size(0) % 1024
    return y


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("fn", [_abs_fill, _mod_fill, _bits_fill, _abs_times_size])
def test_fills_of_int_arguments_equal_eager(fn, dynamic):
    compiled = framejit.compile(fn, backend="triton", dynamic=dynamic)
    for n in (4, 7, -3, 10, -8, 4099):
        x = _r(3, 5, seed=n % 17)
        assert_same(compiled(x, n), fn(x, n), rtol=0, atol=0)


@pytest.mark.parametrize("dynamic", [True, None])
def test_fills_of_sizes_equal_eager(dynamic):
    compiled = framejit.compile(_size_mod_fill, backend="triton", dynamic=dynamic)
    for rows in (3, 5, 1030, 7):
        x = _r(rows, 2, seed=rows)
        assert_same(compiled(x), _size_mod_fill(x), rtol=0, atol=0)
