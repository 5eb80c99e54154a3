"""Dynamic shapes, issue 13 (hhuntM MED-4/MED-6/MED-7, helper hfixSym): sorting and picking by symbolic keys
(NOTE [Sorting by symbolic keys] in capture/sym_arith.py).

`sorted(xs, key=lambda t: t.shape[0])`, `max(xs, key=...)`, `sorted([n, m])`, `ks.index(max(ks))` over a
symbolic size, and `max(x.tolist())` (floats that are graph inputs), compiled once per value, then ran the
frame eagerly (stock torch.compile 2-3 graphs). The counting tests grow one size over 8 calls (the order stays
the same): values equal, 2 compilations, no eager frame. The soundness tests change the sizes so that the
order flips, ties appear and go (stability, the first of equal maxima), and feed NaN to max(): every call
equals eager.
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import assert_same

BACKENDS = ["eager", "onnxrt"]


def _stats() -> tuple[int, int]:
    st = framejit.stats()
    return st["graphs"], st["eager_frames"]


def _compiled_by(fn, calls, backend="eager") -> tuple[int, int]:
    """Runs eager then compiled on each call's arguments, compares; (graphs, eager frames) it added."""
    graphs, eager = _stats()
    compiled = framejit.compile(fn, backend=backend)
    for args in calls:
        expected = _outcome(fn, args)
        actual = _outcome(compiled, args)
        if isinstance(expected, tuple) and len(expected) == 2 and expected[0] is ValueError:
            assert actual == expected
        else:
            assert_same(actual, expected)
    after = _stats()
    return after[0] - graphs, after[1] - eager


def _outcome(fn, args):
    try:
        return fn(*args)
    except ValueError as e:
        return ValueError, str(e)


def _by_sorted(xs):
    s = sorted(xs, key=lambda t: t.shape[0])
    return s[-1] * 2, s[0] + 1


def _by_max(xs):
    return max(xs, key=lambda t: t.shape[0]) * 2


def _by_min_index(xs):
    ks = [t.shape[0] for t in xs]
    return xs[ks.index(max(ks))] * 2, xs[ks.index(min(ks))]


def _sorted_sizes(xs):
    return xs[0].new_zeros(sorted([t.shape[0] for t in xs])[1])


def _list_sort_by_key(xs):
    ys = list(xs)
    ys.sort(key=lambda t: -t.shape[0])
    return ys[0] - 1


def _growing(n):
    return ([torch.randn(2), torch.randn(n), torch.randn(3)],)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_by_sorted, _by_max, _by_min_index, _sorted_sizes, _list_sort_by_key])
def test_picking_by_a_growing_size_compiles_once_for_every_size(fn, backend):
    assert _compiled_by(fn, [_growing(n) for n in range(4, 12)], backend) == (2, 0)


def _max_of_floats(x):
    vals = x.tolist()
    return x * max(vals), min(vals[0], vals[1], vals[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_of_changing_floats_compiles_twice(backend):
    torch.manual_seed(0)
    assert _compiled_by(_max_of_floats, [(torch.randn(3),) for _ in range(10)], backend) == (2, 0)


def _everything(xs):
    by_key = sorted(xs, key=lambda t: t.shape[0])
    backwards = sorted(xs, key=lambda t: t.shape[0], reverse=True)
    ks = [t.shape[0] for t in xs]
    return (tuple(by_key), tuple(backwards), max(xs, key=lambda t: t.shape[0]), min(xs, key=lambda t: t.shape[0]),
            ks.index(max(ks)), sorted(ks), max(ks), (sorted(ks) == ks), by_key[0] * backwards[0].shape[0])


_FLIPS = [(4, 5, 6), (6, 5, 4), (5, 5, 4), (4, 5, 5), (5, 4, 5), (6, 5, 4), (4, 4, 4), (7, 2, 9), (4, 5, 6)]


def test_orders_that_flip_between_calls_follow_eager():
    calls = [([torch.randn(a), torch.randn(b), torch.randn(c)],) for a, b, c in _FLIPS]
    _compiled_by(_everything, calls)


def _index_of(x, y):
    return x * [x.shape[0], y.shape[0], 3].index(5)


def test_index_of_a_value_that_comes_and_goes_raises_as_eager():
    sizes = [(5, 4), (4, 5), (4, 6), (6, 5), (7, 8), (5, 5), (8, 9)]
    _compiled_by(_index_of, [(torch.randn(a), torch.randn(b)) for a, b in sizes])


def _floats_picked(x):
    vals = x.tolist()
    return max(vals), min(vals), vals.index(max(vals)), sorted(vals)[0], x * max(vals)


def test_max_of_floats_with_nan_and_ties_follows_eager():
    nan = math.nan
    rows = [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [2.0, 2.0, -1.0], [nan, 1.0, 2.0], [0.0, -0.0, -1.0], [-0.0, 0.0, -1.0],
            [1.0, 1.0, 1.0], [1.0, nan, 0.5]]
    _compiled_by(_floats_picked, [(torch.tensor(r),) for r in rows])


def _tensor_of_floats(x):
    vals = x.tolist()
    s = sum(v * v for v in vals)
    return torch.tensor([s, max(vals)]) + x[:2], torch.tensor([[min(vals), 1.5]], dtype=torch.float64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_of_changing_floats_compiles_twice(backend):
    """NOTE [Tensors of dynamic floats]: each float a scalar_tensor node, rounded to the dtype as torch.tensor
    rounds it (float32 by default, float64 asked); inf and NaN among them as eager gives them."""
    torch.manual_seed(0)
    calls = [(torch.randn(4),) for _ in range(8)] + [(torch.tensor([1.0, math.inf, -2.0, 0.1]),),
                                                      (torch.tensor([math.nan, 1.0, 2.0, 3.0]),)]
    graphs, eager = _compiled_by(_tensor_of_floats, calls[:8], backend)
    assert (graphs, eager) == (2, 0)
    _compiled_by(_tensor_of_floats, calls[8:], backend)
