"""`e.__context__` of an exception caught by the traced code and raised where no handler of it is active (NOTE
[Contexts of exceptions raised where nothing is handled] in capture/caught_exceptions.py).

Its eager context is the exception a caller handles when the function is called: None outside any `except`. The
read was a graph break for every caught exception (fullgraph: Unsupported; PyTorch's test_exceptions.py
test_raise_set___context__). Now it answers None, guarded on no exception being handled at entry, so a call from
inside a caller's `except` retraces and gives that exception, as eager.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _raises_in_callee(n):
    try:
        raise KeyError(n)
    except KeyError as e:
        return e


def contexts(x, n):
    try:
        raise TypeError(n)
    except TypeError as e:
        first = e
    second = _raises_in_callee(n)
    return x + n, first.__context__ is None, second.__context__ is None, repr(first.__context__), first, second


def _compare(got, expected):
    assert_same(got[:4], expected[:4])
    for g, e in zip(got[4:], expected[4:]):
        assert type(g) is type(e) and g.args == e.args and repr(g.__context__) == repr(e.__context__)


def test_context_read_outside_any_except_is_captured():
    backend = CountingBackend()
    compiled = framejit.compile(contexts, backend=backend, fullgraph=True)
    before = framejit.stats()["eager_frames"]
    for n in (2, 3):
        x = torch.randn(n)
        _compare(compiled(x, n), contexts(x, n))
    # one graph per n (the exceptions' args are constants), no break, no eager frame
    assert backend.graph_count == 2 and framejit.stats()["eager_frames"] == before


def test_context_read_inside_a_callers_except_equals_eager():
    compiled = framejit.compile(contexts, backend="eager")
    for n in (2, 3):
        x = torch.randn(n)
        _compare(compiled(x, n), contexts(x, n))  # outside: traced with the guard
        try:
            raise IndexError("outer")
        except IndexError:
            got, expected = compiled(x, n), contexts(x, n)  # the guard fails: not None here
        _compare(got, expected)
        assert repr(got[4].__context__) == "IndexError('outer')"
