"""A functools.lru_cache call that raised while tracing (NOTE [Cached calls that raised] in
capture/cached_calls.py): exceptions are never cached, so a later call may answer; the compiled function must
then answer too (review revT HIGH: the entry kept raising, 0.0 where eager 7.0)."""
from __future__ import annotations

import functools

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

_STATE = [1]


@functools.lru_cache
def _scale(n):
    if _STATE[0] == 2:
        raise ValueError("boom")
    return n * _STATE[0]


def _guarded(x):
    try:
        v = _scale(2)
    except ValueError:
        v = -1
    return x + v


def _bare(x):
    return x * _scale(3)


def test_a_cached_call_that_raised_answers_again_after_cache_clear():
    for fn in (_guarded, _bare):
        compiled = framejit.compile(fn, backend=CountingBackend())
        _STATE[0] = 1
        _scale.cache_clear()
        for i in range(6):
            if i in (2, 4):
                _scale.cache_clear()
                _STATE[0] += 1
            x = torch.full((2,), float(i))
            expected = exc = None
            try:
                expected = fn(x)
            except ValueError as e:
                exc = e
            if exc is None:
                assert_same(compiled(x), expected)
            else:
                try:
                    compiled(x)
                except ValueError as e:
                    assert str(e) == str(exc)
                else:
                    raise AssertionError("no ValueError")
