"""Extrema of sizes on triton, issue 13 (h13dyn3): `max(x.size(0), y.size(0))` / `min(...)` used as a size,
eager vs triton over several shapes, with graphs and generated modules counted.

A sym_max/sym_min of sizes made the graph compile one module per shape (NOTE [Extrema of sizes are not
fitted], dynamic.py: the probes, where every size is large, could fit `max(step, 6)` as `step`). Such an int
is now computed per call by the size-floats prefix and passed in as an int input that the backend makes a
symbol of its own, defined as the extremum (NOTE [Extrema of sizes as inputs], size_floats.py): one module
serves every shape the graph serves. Where every probe takes one branch (`max(x.size(1), 3)`: every probe
is above 3) the module serves the calls on that branch (its size check tests it) and the others compile per
shape, with eager's values.
Stock torch.compile (reference): 1 graph for each program here with dynamic=True, 2 with dynamic=None.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import RecordingBackend, assert_same


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _padded_sum(x, y):
    n = max(x.size(0), y.size(0))
    return F.pad(x, (0, 0, 0, n - x.size(0))) + F.pad(y, (0, 0, 0, n - y.size(0)))


def _common_rows(x, y):
    n = min(x.size(0), y.size(0))
    return x[:n] * y[:n]


def _nested(x, y):
    m = min(max(x.size(0), y.size(0)), y.size(0) + 2)
    return F.pad(x, (0, 0, 0, m - x.size(0))).sum(1) * m


def _cat_common(x, y):
    n = min(x.size(0), y.size(0))
    return torch.cat([x[:n], y[:n]], 1).reshape(n, 2, -1).sum(1)


# both orders of the two sizes, and equal sizes (sizes of 2 and more: one graph with dynamic=True)
_PAIRS = [(3, 5), (6, 2), (4, 4), (7, 3), (2, 8), (5, 6)]
_CALLS = [(_r(a, 4, seed=a), _r(b, 4, seed=b + 9)) for a, b in _PAIRS]


def _run(fn, calls, dynamic):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    eager = framejit.stats()["eager_frames"]
    for args in calls:
        assert_same(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
    assert framejit.stats()["eager_frames"] == eager
    return backend.graph_count


@pytest.mark.parametrize("fn", [_padded_sum, _common_rows, _nested, _cat_common])
def test_an_extremum_of_sizes_is_one_module(fn, triton_modules):
    assert _run(fn, _CALLS, True) == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: one per shape (6)


def test_automatic_dynamic_extremum(triton_modules):
    # the first call static, then one size-generic module (before: 1 + one per later shape)
    assert _run(_padded_sum, _CALLS, None) == 2
    assert sum(triton_modules.values()) == 2, triton_modules


def test_an_extremum_with_an_int_argument(triton_modules):
    def clipped(x, n):
        return x[: min(x.size(0), n)] * 2

    calls = [(_r(a, 4, seed=a), n) for a, n in [(3, 5), (6, 2), (4, 4), (7, 3), (2, 8)]]
    assert _run(clipped, calls, True) == 1
    assert sum(triton_modules.values()) == 1, triton_modules


def test_an_extremum_the_probes_take_one_branch_of_serves_that_branch(triton_modules):
    # every probe is above 3, where max(s, 3) is s: a module fitted there, used at s = 2, returned a (2, 2)
    # result for eager's (2, 3); now s = 2 fails its size check and compiles for its shape (once)
    def floor3(x):
        return F.pad(x, (0, max(x.size(1), 3) - x.size(1)))

    calls = [(_r(2, w, seed=w),) for w in (5, 2, 7, 3, 2, 9)]
    assert _run(floor3, calls, True) == 1
    assert sum(triton_modules.values()) == 2, triton_modules  # before: one per width (5)
