"""An exception leaving many nested compiled calls is cleaned once per entry, not once per entry per level
(NOTE [Tracebacks cleaned level by level] in capture/user_tracebacks.py), and the cleaning keeps nothing of it
alive."""
from __future__ import annotations

import gc
import sys
import traceback
import weakref

import torch

import framejit
from framejit.capture import user_tracebacks


_CALLEE = []  # the function r calls: r itself (eager) or its compiled form


def _r(x, n):
    if n == 0:
        raise ValueError("bottom")
    y = x + 1
    return _CALLEE[0](y, n - 1)


def _entries(fn, *args):
    try:
        fn(*args)
    except ValueError as e:
        return [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__)][1:]
    raise AssertionError("no exception")


class _Level:
    """One level of C-stack use: a call of an object with a Python `__call__`, as a FrameHook's."""
    def __call__(self, n, then=None):
        if then is not None and n == 0:
            return then()
        try:
            return self(n + 1 if then is None else n - 1, then)
        except RecursionError:
            if then is not None:
                raise
            return n


def _levels_left() -> int:
    """How many such calls fit on the stack here (3.12 and 3.13 bound them by the C recursion limit, which
    sys.setrecursionlimit does not raise; the full suite's pytest stack left fewer than when run alone)."""
    return _Level()(0)


def _compiled_levels_that_fit(compiled, x, most: int) -> int:
    """The deepest compiled recursion of _r, up to `most`, that reaches its bottom from here."""
    _CALLEE[:] = [compiled]
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        try:
            compiled(x, mid)
        except ValueError:
            low = mid
        except RecursionError:
            high = mid - 1
    return low


def test_deep_recursion_is_cleaned_in_linear_work(monkeypatch):
    looked = []
    real = user_tracebacks._hidden
    monkeypatch.setattr(user_tracebacks, "_hidden", lambda code: looked.append(1) or real(code))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    compiled = framejit.compile(_r, backend="eager")
    try:
        x = torch.ones(2)
        # 3.12 bounds a compiled recursion by its C recursion limit (sys.setrecursionlimit does not raise it):
        # about 490 levels fit under pytest alone, 288 in the full suite's CI run; 150 levels still tell linear
        # cleaning (at most 12 * 152 looks) from rewriting the chain at every level (150**2 / 2)
        deep = _compiled_levels_that_fit(compiled, x, 300) - 10
        assert deep >= 150, deep
        for depth in (3, 40, deep):
            _CALLEE[:] = [_r]
            eager = _entries(_r, x, depth)  # every level of _r, in order
            _CALLEE[:] = [compiled]
            del looked[:]
            assert _entries(compiled, x, depth) == eager
            # each entry is looked at a few times; rewriting the whole chain at every level looked depth**2 / 2
            assert len(looked) <= 12 * (depth + 2), (depth, len(looked))
    finally:
        sys.setrecursionlimit(limit)


def test_a_caught_exception_frees_the_frames_it_passed(own_objects):
    def f(x, keep):
        big = x * 2
        keep.append(weakref.ref(big))
        print("", end="")  # a break: the raise is in a resume function, under two hooks
        if x.sum() > -1:
            raise RuntimeError("out of memory")
        return big

    compiled = framejit.compile(f, backend="eager")
    for n in (3,):
        keep = []
        try:
            compiled(torch.ones(n), keep)
        except RuntimeError as e:
            assert "out of memory" in str(e)
        gc.collect()
        assert keep[0]() is None  # nothing of framejit holds the exception, its traceback or their frames


def test_the_signal_handler_check_at_the_recursion_limit_raises_nothing_of_its_own():
    # the 3.12 CI's failure: a graph's RecursionError 288 compiled levels deep, then this check's own RecursionError
    # (in signal.valid_signals()'s enum calls) replaced it, at every level above
    from framejit.signal_handlers import from_signal_handler, reraise_if_from_signal_handler
    try:
        raise ValueError("the user's")
    except ValueError as e:
        error = e
    left = _levels_left()
    for k in range(2, 12):  # the check runs with k levels of stack left
        assert _Level()(left - k, lambda: from_signal_handler(error)) in (True, False)
        assert _Level()(left - k, lambda: reraise_if_from_signal_handler(error)) is None
