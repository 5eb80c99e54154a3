"""Frames whose parameters are `*args` followed by keyword-only ones (`def f(*items, flag)`), differential
(eager vs compiled on fresh inputs, tests/helpers.run_differential). Found while measuring issue 11
(test_ctx_manager.py): `warnings.simplefilter(a)` compiled appended its filter at the end of
`warnings.filters` where eager inserts it first, because `warnings._add_filter(*item, append)` was traced
with `item` and `append` swapped.

The code object names its locals positional, keyword-only, `*args`, `**kwargs`; a signature binds them
positional, `*args`, keyword-only, `**kwargs` (convert._root_translator pairs them by name now).
"""
from __future__ import annotations

import warnings

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def signed(*xs, negative, **extra):
    sign = -1.0 if negative else 1.0  # nothing here raises whatever `negative` is bound to
    if extra:
        sign = sign * 10
    return torch.ones(2) * sign


def test_root_frame_with_varargs_then_keyword_only_parameters():
    # before: the trace bound `negative` to the tuple of positional arguments (truthy: +1 where eager gives -1)
    for negative, extra in ((False, {}), (True, {}), (False, {"k": 1}), (True, {"k": 1})):
        run_differential(lambda a, b: signed(a, b, negative=negative, **extra),
                         lambda seed: (torch.randn(3), torch.randn(3)))
        compiled = framejit.compile(signed, backend=CountingBackend())
        torch.testing.assert_close(compiled(torch.ones(1), negative=negative, **extra),
                                   signed(torch.ones(1), negative=negative, **extra))


LOG: list = []


def record(*items, flag):
    LOG.append("on" if flag else "off")
    print("a break inside the callee")
    return items


def calls_record(x, flag):
    y = x + 1
    return record(y, 3, flag=flag)[1] * y


def test_callee_entered_at_a_break_binds_varargs_and_keyword_only():
    # before: the callee's trace took its `flag` from the tuple of items: LOG ['on'] where eager has ['off']
    for flag in (False, True, False):
        LOG.clear()
        expected = calls_record(torch.ones(2), flag)
        eager_log = list(LOG)
        LOG.clear()
        actual = framejit.compile(calls_record)(torch.ones(2), flag)
        assert LOG == eager_log
        torch.testing.assert_close(actual, expected)


def set_filter(x, action):
    y = x * 2
    warnings.simplefilter(action)
    return y


def test_simplefilter_in_compiled_code_puts_the_filter_first():
    compiled = framejit.compile(set_filter)
    for action in ("ignore", "error", "ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            set_filter(torch.ones(2), action)
            expected = warnings.filters[0]
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            compiled(torch.ones(2), action)
            assert warnings.filters[0] == expected
