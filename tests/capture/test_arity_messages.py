"""TypeErrors of calls whose arguments do not fit an inlined callee carry CPython's message.

NOTE [Arity errors as CPython words them] (capture/arity_errors.py). Differential: the compiled function
catches the TypeError and returns its message with a tensor result, over calls with changing shapes; the
message must equal eager's, the frame stays compiled (no eager frame).
"""
import pytest
import torch

import framejit


def _check(make, sizes=(3, 5)):
    framejit.reset()
    fn, compiled = make(), framejit.compile(make(), backend="eager")
    eager_before = framejit.stats()["eager_frames"]
    for n in sizes:
        x = torch.randn(n) + n
        expected, got = fn(x), compiled(x)
        assert got[1] == expected[1]
        torch.testing.assert_close(got[0], expected[0])
    return framejit.stats()["eager_frames"] - eager_before


def _g(a, b, /, c, d=1, *args, e, f=2, **kw):
    return a


def _h(a, b=1):
    return a


def _k(a, *, b):
    return a


CALLS = {
    "nothing": lambda x: _g(),
    "two_missing": lambda x: _g(x),
    "one_missing": lambda x: _g(x, x, e=1),
    "kwonly_missing": lambda x: _g(x, x, x),
    "too_many_with_defaults": lambda x: _h(x, x, x),
    "unexpected_keyword": lambda x: _h(x, c=1),
    "multiple_values": lambda x: _h(x, a=x),
    "too_many_and_keyword_only": lambda x: _k(x, x, b=1),
    "keyword_only_missing": lambda x: _k(x),
    "unexpected_before_too_many": lambda x: _h(x, x, x, z=1),
    "none_given": lambda x: _h(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_message_equals_cpythons(name):
    call = CALLS[name]

    def make():
        def f(x):
            y = x * 2
            try:
                call(y)
            except TypeError as e:
                return y + 1, str(e)
            return y, ""
        return f
    assert _check(make) == 0


def test_nested_function_whose_defaults_were_set_to_none():
    # h15comp2's case: g.__defaults__ = None makes b required
    def make():
        def f(x):
            def g(a, b=2):
                return a * b
            g.__defaults__ = None
            try:
                return g(x), ""
            except TypeError as e:
                return x - 1, str(e)
        return f
    assert _check(make) == 0
