"""Dynamic shapes, issue 13: list, set and dict comprehensions over a range whose length is symbolic (a size,
an int argument that changes) run as Python instead of unrolling (NOTE [Comprehension calls over symbolic
ranges] in python_loops.py for 3.11's comprehension functions; 3.12+ inline them: NOTE [Breaks inside inlined
comprehensions]). Unrolled, the comprehension specialised the length, so the frame compiled once per size until
the recompile limit ran it eagerly; stock torch.compile makes 2 frames (no graph) for `range_sym` and
`dict_squares`. Differential: eager vs compiled on fresh inputs of changing sizes; trace counts asserted."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same

SIZES = [3, 5, 7, 4, 9, 6, 11, 2, 8, 10]  # more sizes than the recompile limit (8)


def _frames(before: int, name: str) -> int:
    return sum(1 for row in framejit.stats()["frames"][before:] if row["function"].split(".")[0] == name)


def range_sym(x, n):
    return [i * 2 for i in range(x.size(0) // 2, x.size(0))]


def dict_squares(x, n):
    return {i: i * i for i in range(x.size(0))}


def rows_by_int(x, n):
    return [x[j] for j in range(n)]


def closure_and_after(x, n):
    w = n + 1
    ys = [i * w for i in range(1, x.size(0))]
    return x * len(ys), ys, sum(ys)


def set_in_call(x, n):
    return sorted({i % 3 for i in range(1, x.size(0))}), x * 2


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", [range_sym, dict_squares, rows_by_int, set_in_call],
                         ids=lambda f: f.__name__)
def test_a_comprehension_over_a_symbolic_range_compiles_a_bounded_number_of_times(fn, dynamic):
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for size in SIZES:
        torch.manual_seed(size)
        x = torch.randn(size, 3)
        assert_same(compiled(x, size - 1), fn(x, size - 1))
    # before: one entry per size (the range unrolled, the size guarded by value) until the recompile limit
    # ran the frame eagerly (8 traces). Now: the owner frame static (automatic only) and symbolic, plus the
    # function after the comprehension (and, for a set of changing size sorted after it, its recompiles)
    limit = 3 if fn is not set_in_call else 5
    assert _frames(before, fn.__name__) <= (limit if dynamic is None else limit - 1)
    assert framejit.stats()["eager_frames"] == eager


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_a_comprehension_whose_result_is_read_after_it_equals_eager(dynamic):
    # the owner frame serves every size; the function after the comprehension takes the list as opaque from
    # its first trace (NOTE [Comprehension results of changing length]; more in
    # test_dynamic_comprehension_results.py)
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(closure_and_after, backend="eager", dynamic=dynamic)
    for size in SIZES:
        x = torch.randn(size, 3)
        assert_same(compiled(x, size - 1), closure_and_after(x, size - 1))
    assert sum(1 for row in framejit.stats()["frames"][before:] if row["function"] == "closure_and_after") <= \
        (2 if dynamic is None else 1)


def test_a_comprehension_in_a_try_block_still_equals_eager():
    def f(x):
        try:
            return [i + 1 for i in range(x.size(0))]
        except ValueError:
            return None
    compiled = framejit.compile(f, backend="eager", dynamic=True)
    for size in SIZES[:4]:
        x = torch.randn(size)
        assert compiled(x) == f(x)
