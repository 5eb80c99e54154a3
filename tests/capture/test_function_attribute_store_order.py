"""Stores on a function from outside, replayed after the graph (NOTE [Attributes stored on functions from
outside] in framejit/capture/side_effects.py), against the other ways the same call reaches that function:
its `__dict__` read or written afterwards (review revX HIGH-1)."""
from __future__ import annotations

import functools

import pytest
import torch

import framejit


def through_vars(x):
    through_vars.calls += 1
    return x + vars(through_vars)["calls"]


def counted_keys(x):
    counted_keys.new = 1
    return x + len(counted_keys.__dict__)


def dict_store_after(x):
    dict_store_after.calls = dict_store_after.calls + 5
    dict_store_after.__dict__["calls"] = dict_store_after.calls + 2  # eager: this store wins
    return x + dict_store_after.calls


def dict_update_after(x):
    dict_update_after.calls = 5
    dict_update_after.__dict__.update(calls=x.shape[0] + 9)
    return x + dict_update_after.calls


def dict_get_after(x):
    dict_get_after.calls += 1
    return x + dict_get_after.__dict__.get("calls", -1)


def base(y):
    return y


def wraps_after(x):
    base.calls += 1

    @functools.wraps(base)  # update_wrapper copies base.__dict__
    def wrapper(y):
        return base(y)
    return x + wrapper.calls


def _run(fn, call, target):
    """Three calls over changing sizes: each result and `target`'s attributes after it."""
    target.__dict__.clear()
    target.calls = 0
    out = []
    for n in (2, 3, 2):
        result = call(torch.arange(float(n)))
        out.append((result, dict(target.__dict__)))
    return out


@pytest.mark.parametrize("fn", [through_vars, counted_keys, dict_store_after, dict_update_after, dict_get_after,
                                wraps_after], ids=lambda f: f.__name__)
def test_function_dict_after_a_store_on_the_function(fn):
    target = base if fn is wraps_after else fn
    expected = _run(fn, fn, target)
    actual = _run(fn, framejit.compile(fn), target)
    for (out, state), (out_e, state_e) in zip(actual, expected):
        torch.testing.assert_close(out, out_e)
        assert state == state_e
