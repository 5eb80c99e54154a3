"""Dynamic shapes (issue 13, hhuntD HIGH-2 and LOW-4): a call whose trace breaks a mark_dynamic contract.

- `x + y` with x's dim 0 marked and y's not, both of the same varying size: y's static size specialises x's marked
  dim, so the first call raises ConstraintViolationError, as stock torch.compile's does. Stock's failed trace still
  recorded the call's sizes, so its next call traces y's changed dim symbolic and works; framejit's recorded
  nothing and raised on every call (NOTE [A failed trace records its sizes] in capture/dynamic_misses.py).
- A size outside a marker's [min, max] raised only after the backend had compiled the trace's graph: the check
  runs before the backend is called now.

Stock numbers: torch.compile(backend=CompileCounter) over the same calls; its counts include the graph its raising
trace compiled (framejit's raising trace compiles none).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames


def _add(x, y):
    return x + y


def _scaled_sum(x):
    return (x * 2).sum(0) + x.shape[0]


_MARKERS = {"torch": torch._dynamo.mark_dynamic, "framejit": framejit.mark_dynamic}


def _calls(fn, backend, sizes, mark):
    """Eager and compiled on the same inputs; 'raised' or the graph count after each call."""
    compiled = framejit.compile(fn, backend=backend)
    seen = []
    for n in sizes:
        args = tuple(torch.randn(n, 3) for _ in range(fn.__code__.co_argcount))
        mark(args[0], n)
        try:
            result = compiled(*args)
        except framejit.ConstraintViolationError:
            seen.append("raised")
            continue
        assert_same(result, fn(*args))
        seen.append(backend.graph_count)
    return seen


@pytest.mark.parametrize("marker", sorted(_MARKERS))
def test_one_marked_side_of_a_broadcast_raises_once_then_works(marker):
    """Stock: raised, then 2 graphs from the 2nd call on (1 of them its raising trace's). Was: raised on every call."""
    backend, before = CountingBackend(), eager_frames()
    seen = _calls(_add, backend, [3, 5, 7, 2, 9, 4], lambda t, n: _MARKERS[marker](t, 0))
    assert seen == ["raised", 1, 1, 1, 1, 1]
    assert eager_frames() == before


def test_the_same_size_again_raises_again_as_in_stock():
    """Stock: raised, raised (nothing changed: y traced static again), then works from a new size."""
    backend = CountingBackend()
    seen = _calls(_add, backend, [3, 3, 5, 6], lambda t, n: torch._dynamo.mark_dynamic(t, 0))
    assert seen == ["raised", "raised", 1, 1]


def test_marked_after_a_static_entry():
    """Sizes 3, 3 unmarked (a static entry), then marked 5, 6, 7: no error; stock 2 graphs."""
    backend = CountingBackend()
    seen = _calls(_add, backend, [3, 3, 5, 6, 7], lambda t, n: n > 3 and torch._dynamo.mark_dynamic(t, 0))
    assert seen == [1, 1, 2, 2, 2]


def test_a_size_outside_the_marked_range_raises_before_compiling():
    """min=2, max=8: 9 and 1 raise (as stock's) with no backend compilation (stock compiled one for the 1);
    the other sizes are served by the one entry (stock 2 graphs)."""
    backend = CountingBackend()
    seen = _calls(_scaled_sum, backend, [3, 5, 7, 2, 9, 1, 4, 6],
                  lambda t, n: torch._dynamo.mark_dynamic(t, 0, min=2, max=8))
    assert seen == [1, 1, 1, 1, "raised", "raised", 1, 1]


def test_a_first_call_outside_the_range_compiles_nothing():
    """The first call already outside [2, 8]: raised with no backend call (was 1 graph before the error)."""
    backend = CountingBackend()
    seen = _calls(_scaled_sum, backend, [9, 3, 4], lambda t, n: torch._dynamo.mark_dynamic(t, 0, min=2, max=8))
    assert seen == ["raised", 1, 1]
