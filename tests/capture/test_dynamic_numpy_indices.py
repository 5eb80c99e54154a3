"""NumPy integer scalars used as indices, sizes and range() bounds follow the dynamic-int rules of Python
ints (NOTE [Dynamic NumPy scalars]): symbolic after a change (or from the first call under dynamic=True),
not one entry per value.

Each program runs eagerly and compiled over 8 values of a NumPy scalar (results compared, dtypes and
exceptions included), and the number of traces is asserted equal to the same program's with Python ints
in place of the NumPy scalars (at most 2 under automatic dynamic, 1 or 2 under dynamic=True). Before,
`x[i]`, `x[:, i]`, `torch.arange(i)`, `torch.zeros(i)`, `torch.full((2,), y)` and `range(i)` compiled
once per value (or broke and recompiled their resume functions per value): 3 to 9 traces.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import framejit


def _index(x, i):
    return x[i] * 2


def _index_in_tuple(x, i):
    return x.view(3, 4)[:, i]


def _arange(x, i):
    return x[:3] + torch.arange(i).sum()


def _zeros(x, i):
    return torch.zeros(i) + x.sum()


def _arange_step(x, i):
    return torch.arange(0, 20, i, dtype=torch.float64)


def _full(x, y):
    return torch.full((2,), y) + x[:2]


def _range_loop(x, i):
    t = x
    for _ in range(i):
        t = t + 1
    return t


def _int_of_float_index(x, y):
    return x[int(y)] + 1


def _tensor_of(x, y):
    return torch.tensor(y), x * 2


_PROGRAMS = [
    (_index, lambda k: np.int64(k)),
    (_index, lambda k: np.uint8(k + 1)),
    (_index, lambda k: np.int32(k + 2)),
    (_index_in_tuple, lambda k: np.int64(k % 4)),
    (_arange, lambda k: np.int64(k + 1)),
    (_zeros, lambda k: np.int16(k + 2)),
    (_arange_step, lambda k: np.int64(k + 1)),
    (_full, lambda k: np.int64(k)),
    (_full, lambda k: np.float32(k + 0.1)),
    (_range_loop, lambda k: np.int64(k + 2)),
    (_int_of_float_index, lambda k: np.float64(k + 0.25)),
]


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_a_tensor_of_a_numpy_scalar_keeps_its_dtype(dynamic):
    compiled = framejit.compile(_tensor_of, dynamic=dynamic)
    for k in range(4):  # float64 in eager; the constant of the first call made a float32 tensor before
        x, y = torch.randn(3), np.float64(k + 0.5)
        want, got = _tensor_of(x, y), compiled(x, y)
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)), (k, got, want)


def _outcome(fn, x, v):
    try:
        return "value", fn(x, v)
    except Exception as e:  # noqa: BLE001 (compared with eager's)
        return "raised", type(e)


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    x, y = a[1], b[1]
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    return x == y


def _traces(fn, make, dynamic) -> int:
    framejit.reset()
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, dynamic=dynamic)
    for k in range(8):
        x = torch.randn(12)
        want, got = _outcome(fn, x, make(k)), _outcome(compiled, x, make(k))
        assert _same(want, got), (k, want, got)
    return sum(f["cache"] == "miss" for f in framejit.stats()["frames"][before:])


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn,make", _PROGRAMS, ids=[f"{fn.__name__.strip('_')}-{type(make(0)).__name__}"
                                                    for fn, make in _PROGRAMS])
def test_numpy_scalars_recompile_as_python_ints_do(fn, make, dynamic):
    numpy_traces = _traces(fn, make, dynamic)
    python_traces = _traces(fn, lambda k: make(k).item(), dynamic)
    assert numpy_traces == python_traces, (numpy_traces, python_traces)
    # the loop over range(i) breaks into a resume function (a frame of its own): one more trace each
    assert numpy_traces <= (2 if dynamic is None else 1) + (fn is _range_loop)
