"""NOTE [Iterators of their own type] (capture/values/containers.py): `iter()` of a tuple, range, str or
bytes is an iterator of that container's own type; the trace answers `type(it)` with it, and an iterator
that outlives the graph (returned or stored) is rebuilt as one of the same type at the same position.
Before, every such iterator was a list_iterator, in the trace and after it. At a graph break it is still
passed on as a list iterator (the resume function reads those), and no frame runs eagerly for it."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _returned(x, k):
    its = [iter((1, 2, 3)), iter(range(2, 11, 3)), iter("abc"), iter("ab\u00e9"), iter(b"xyz"), iter((x, x + 1))]
    for it in its[:k]:
        next(it)
    done = iter(range(2))
    list(done)
    return x * 2, its + [done]


def _type_names(x, k):
    names = [type(iter(c)).__name__ for c in ((1, 2), range(k), "s", "\u00e9", b"b", (x,), [x])]
    return x + len(names), names


def _live_at_break(x, k):
    it = iter(range(k, k + 6))
    kind = type(it).__name__
    first = next(it)
    print("break", first)  # the iterator is live across the break
    rest = [v for v in it]
    return x + first + sum(rest), kind, type(it).__name__  # after the break still a range_iterator


def _loop_then_next(x, k):
    it = iter(range(k, k + 6))
    kind = type(it).__name__
    for v in it:
        print("step", v)  # a break inside the loop: the loop and `it` must stay one iterator
        if v == k + 2:
            break
    return x + next(it), kind, list(it)


def _tail(it):
    return type(it).__name__, list(it)


@pytest.mark.parametrize("fn", [_returned, _type_names, _live_at_break, _loop_then_next], ids=lambda f: f.__name__.strip("_"))
def test_iterators_keep_their_type_and_position(fn, capsys):
    eager_before = framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend=CountingBackend())
    for call, k in enumerate((1, 2, 4)):
        x = torch.randn(3)
        want, got = fn(x, k), compiled(x, k)
        torch.testing.assert_close(got[0], want[0])
        if fn is _returned:
            assert [_tail(it) for it in got[1][:-1]][:5] == [_tail(it) for it in want[1][:-1]][:5]
            g, w = got[1][5], want[1][5]
            assert type(g) is type(w)
            for a, b in zip(g, w):
                torch.testing.assert_close(a, b)
            assert _tail(got[1][-1]) == _tail(want[1][-1])
        else:
            assert got[1] == want[1], (call, got[1], want[1])
    assert framejit.stats()["eager_frames"] == eager_before  # an iterator live at a break is read by the resume
    out = capsys.readouterr().out
    assert fn is not _live_at_break or out.count("break") == 6
    assert fn is not _loop_then_next or out.count("step") == 18
