"""Exceptions the compiled code raises and catches itself carry eager's traceback entry for the frame that
caught them (NOTE [Tracebacks of caught exceptions], capture/caught_exceptions.py; revC C1): before, the
exception rebuilt per call had `__traceback__` None."""
from __future__ import annotations

import traceback

import pytest
import torch

import framejit


class Catching:
    def __enter__(self):
        return self

    def __exit__(self, t, v, tb):
        self.seen = v
        return True


def _raiser(k):
    raise KeyError(k)


def caught_by_except(x, k):
    try:
        raise KeyError(k)
    except KeyError as e:
        saved = e
    return x + 1, saved


def suppressed_by_exit(x, k):
    with Catching() as c:
        raise ValueError(k)
    return x * 2, c.seen


def caught_after_a_break(x, k):
    y = x.sum().item()  # a graph break: the handler runs in a resume function
    try:
        raise KeyError(k)
    except KeyError as e:
        saved = e
    return x + y, saved


def caught_in_a_loop(x, k):
    out = []
    for i in range(2):
        try:
            raise IndexError(k * (i + 1))
        except IndexError as e:
            out.append(e)
    return x, out[0], out[1]


def raised_by_a_callee(x, k):
    try:
        _raiser(k)
    except KeyError as e:
        saved = e
    return x + 3, saved


def _text(e):
    return "".join(traceback.format_exception(e))


@pytest.mark.parametrize("fn", [caught_by_except, suppressed_by_exit, caught_after_a_break, caught_in_a_loop])
def test_traceback_as_eager(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for k in ("a", "bc", "d"):
        x = torch.randn(3)
        expected, actual = fn(x, k), compiled(x, k)
        for e, c in zip(expected[1:], actual[1:]):
            assert type(c) is type(e) and c.args == e.args
            assert c.__traceback__ is not None
            assert _text(c) == _text(e)
            assert c.__traceback__.tb_frame.f_code.co_filename == e.__traceback__.tb_frame.f_code.co_filename


def _nested_raiser(k):
    return _raiser(k * 2)


def raised_two_callees_down(x, k):
    try:
        _nested_raiser(k)
    except KeyError as e:
        saved = e
    return x + 3, saved


@pytest.mark.parametrize("fn", [raised_by_a_callee, raised_two_callees_down])
def test_callee_raise_has_eagers_entries(fn):
    # the inlined callees' frames never exist: each has an entry in a frame made for it, at eager's line
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for k in ("a", "b", "cd"):
        expected, actual = fn(torch.ones(2), k)[1], compiled(torch.ones(2), k)[1]
        entries = [(t.filename, t.name, t.lineno, t.line) for t in traceback.extract_tb(expected.__traceback__)]
        assert [(t.filename, t.name, t.lineno, t.line) for t in traceback.extract_tb(actual.__traceback__)] == entries
        # the made entries carry no column positions (tb_lasti -1), so eager's `^^^` marks under a call that is
        # part of its line are not drawn
        assert _without_marks(_text(actual)) == _without_marks(_text(expected))
        assert actual.__traceback__.tb_frame.f_code.co_name == fn.__name__


def _without_marks(text):
    return [line for line in text.splitlines() if set(line.strip()) - set("^~")]
