"""Constants made from int arguments or sizes on triton, issue 13 (h13dyn3): `y[:, :n] = n` with n an int
argument, eager vs triton over several values, with the generated modules counted.

The fill value becomes a 0-d constant tensor of each probe's value when lowered (NOTE [Constants made from
sizes], dynamic.py), so the graph compiled one module per value of n (with dynamic=True: 6 modules over 6
values; stock torch.compile 1 graph). Such a constant is now fitted over the symbols and made per call
(NOTE [Constants fitted to sizes], backends/triton/size_constants.py), as eager converts the int.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import RecordingBackend, assert_same


def _fill_prefix(x, n):
    y = x.clone()
    y[:, :2] = n
    return y * 2


def _fill_long(x, n):
    y = x.long()
    y[:, 1:] = n // 3 - 1
    return y + 1


def _fill_size(x):
    y = x.clone()
    y[0] = x.size(1)  # review revB #5 (NOTE [Constants made from sizes]): eager 5, 3, 2, 9
    return y


def _run(fn, calls):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    for args in calls:
        assert_same(compiled(*args), fn(*args), rtol=0, atol=0)
    return backend.graph_count


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


_INTS = [(_r(3, 5, seed=n), n) for n in (4, 7, -3, 10, 0, 5)]


@pytest.mark.parametrize("fn", [_fill_prefix, _fill_long])
def test_a_fill_of_an_int_argument_is_one_module(fn, triton_modules):
    assert _run(fn, _INTS) == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: one per value (6)


def test_a_fill_of_a_size_is_one_module(triton_modules):
    calls = [(_r(2, w, seed=w),) for w in (5, 3, 2, 9)]
    assert _run(_fill_size, calls) == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: 4
