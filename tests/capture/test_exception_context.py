"""An exception's `__context__` when it is raised while another one is handled (review revG G6; NOTE [Exceptions
raised while handling] in capture/caught_exceptions.py).

`except KeyError: try: raise ValueError ... except ValueError as v` gives v the KeyError as its context in eager
(traceback.format_exception prints "During handling of the above exception ..."); under framejit the traced
handler's rebuilt exception had None. Each program is compared with eager on fresh inputs: values, the repr of
the context chain, and whether the context is the handled exception itself.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def nested_in_handler(x):
    try:
        raise KeyError(1)
    except KeyError:
        try:
            raise ValueError(2)
        except ValueError as v:
            s = v
    return x + 1, repr(s.__context__)


def nested_in_handler_same_object(x):
    try:
        raise KeyError(1)
    except KeyError as e:
        try:
            raise ValueError(2)
        except ValueError as v:
            same = v.__context__ is e
    return x + 1, same


def made_before_raised_in_handler(x):
    err = TypeError(0)
    try:
        raise KeyError(1)
    except KeyError:
        try:
            raise err
        except TypeError as v:
            s = v
    return x * 2, repr(s.__context__), s is err


def suppressed_in_handler(x):
    try:
        raise KeyError(1)
    except KeyError:
        try:
            raise ValueError(2) from None
        except ValueError as v:
            s = v
    return x - 1, repr(s.__context__), s.__suppress_context__, repr(s.__cause__)


def _catches(x):
    try:
        raise ValueError(2)
    except ValueError as v:
        return v


def callee_in_handler(x):
    try:
        raise KeyError(1)
    except KeyError:
        v = _catches(x)
    return x * 3, repr(v.__context__)


def handlers_in_sequence(x):
    try:
        raise KeyError(1)
    except KeyError:
        y = x + 1
    try:
        raise ValueError(2)
    except ValueError as v:
        s = v
    return y * 2, repr(s.__context__)


@pytest.mark.parametrize("fn", [nested_in_handler, nested_in_handler_same_object, made_before_raised_in_handler, suppressed_in_handler,
                                callee_in_handler, handlers_in_sequence], ids=lambda f: f.__name__)
def test_context_of_an_exception_raised_while_handling_equals_eager(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    for n in (2, 3, 4):
        x = torch.randn(n)
        assert_same(compiled(x), fn(x))
    if fn is handlers_in_sequence:  # no handler active at the second raise: still followed and captured
        assert framejit.stats()["eager_frames"] == before and backend.graph_count >= 1


def _caught_in_frame(x):
    try:
        raise ValueError(2)
    except ValueError as v:
        s = v
    return x + 1, s


def _catches_inlined(x):
    try:
        raise ValueError(3)
    except ValueError as v:
        return v


def _caught_in_a_callee(x):
    v = _catches_inlined(x)  # inlined into this frame's trace
    return x - 1, v


OUTER = []


@pytest.mark.parametrize("fn", [_caught_in_frame, _caught_in_a_callee], ids=lambda f: f.__name__)
def test_context_from_the_callers_except_block_equals_eager(fn):
    compiled = framejit.compile(fn, backend="eager")

    def caller(run, x):
        try:
            raise KeyError("outer")
        except KeyError as e:
            OUTER.append(e)
            return run(x)
    for n in (2, 3):
        x = torch.randn(n)
        (y, got), (expected_y, expected) = caller(compiled, x), caller(fn, x)
        assert_same(y, expected_y)
        assert repr(got.__context__) == repr(expected.__context__) == "KeyError('outer')"
        assert got.__context__ is OUTER[-2] and expected.__context__ is OUTER[-1]
    assert compiled(x)[1].__context__ is None  # outside any except block: None, as eager's
