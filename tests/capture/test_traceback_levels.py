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


def test_deep_recursion_is_cleaned_in_linear_work(monkeypatch):
    looked = []
    real = user_tracebacks._hidden
    monkeypatch.setattr(user_tracebacks, "_hidden", lambda code: looked.append(1) or real(code))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    compiled = framejit.compile(_r, backend="eager")
    try:
        x = torch.ones(2)
        for depth in (3, 40, 300):
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
