"""Errors that are the user's, raised where eager raises them, not internal errors that send the frame to
eager (hhuntG4 LOW-5, LOW-6): `sorted()` of keys that do not compare raises CPython's TypeError in the trace
(the user's except runs after a break there); `a + n` with a dynamic float `a` and an int `n` too large for a
float (10**400) leaves `n` symbolic, so the add raises eager's OverflowError. Each program runs eagerly and
compiled over several calls with the data changed between them; no call runs as an eager frame.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend

TABLE = {1: "a", "b": 2}


def _sorted_keys(x, log):
    try:
        log.append("before")
        return x + 1, sorted(TABLE)
    except TypeError as e:
        log.append(str(e))
        return x - 1, None


def _add_big_int(x, a, n, log):
    try:
        log.append(n)
        return x, a + n
    except OverflowError as e:
        return "caught", str(e)


def _same(fn, calls):
    compiled = framejit.compile(fn, backend=CountingBackend())
    before = framejit.stats()["eager_frames"]
    for args in calls:
        want_log, got_log = [], []
        want, got = fn(*args(), want_log), compiled(*args(), got_log)
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w) if isinstance(w, torch.Tensor) else None
            assert isinstance(w, torch.Tensor) or g == w
        assert got_log == want_log
    assert framejit.stats()["eager_frames"] == before


def test_sorted_of_keys_that_do_not_compare(monkeypatch):
    def switch(keys):
        def args():
            monkeypatch.setitem(globals(), "TABLE", keys)
            return (torch.ones(2),)
        return args
    _same(_sorted_keys, [switch({1: "a", "b": 2}), switch({1: 0, 2: 0}), switch({"a": 0, 3: 1})])


def test_float_plus_int_too_large_for_a_float():
    calls = [(1.5, 2), (2.5, 3), (3.5, 10 ** 400), (1.0, 4), (2.0, -10 ** 401)]
    _same(_add_big_int, [lambda a=a, n=n: (torch.ones(1), a, n) for a, n in calls])
