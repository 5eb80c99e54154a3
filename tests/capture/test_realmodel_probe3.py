"""Defects found by the fifth new-user probe of real library code (issue 11, helper h11g), each reduced to a
small program. Differential: eager vs compiled on fresh inputs over several calls and shapes, with graph and
break counts where capturing whole is the point, and no frame run wholly eagerly (a delta of
framejit.stats()["eager_frames"]).
"""
from __future__ import annotations

import collections
import functools
import inspect

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


def _explain_breaks(fn, *args) -> int:
    return framejit.explain(fn)(*args).graph_break_count


# ---- functools.wraps on a function made inside the compiled region ------------------------------------------

def _scaled(factor):
    """A decorator factory as libraries write them (torch.func.jacrev's wrapper_fn, transformers'
    can_return_tuple): the wrapper is made, and `functools.wraps` copies the wrapped function's attributes
    onto it, while the compiled code runs."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs) * factor
        return wrapper
    return deco


def _tagged(y: torch.Tensor) -> torch.Tensor:
    "Sine of y."
    return y.sin()


_tagged.tag = "sin"  # copied into the wrapper's __dict__ by update_wrapper


def _decorate_and_call(x, factor):
    g = _scaled(factor)(_tagged)
    sig = inspect.signature(g)  # follows __wrapped__
    bonus = 1.0 if g.__name__ == "_tagged" and g.tag == "sin" and g.__wrapped__ is _tagged else 0.0
    return g(x) + bonus + len(sig.parameters) + len(g.__doc__)


def test_functools_wraps_inside_the_compiled_region_is_one_graph():
    """`update_wrapper` runs `setattr(wrapper, '__module__', ...)` on the new function: this was a graph
    break ("assignment to the attribute '__module__' of Function(...)") at every such decorator."""
    backend = CountingBackend()
    compiled = framejit.compile(_decorate_and_call, backend=backend)
    before = _eager_frames()
    for n, factor in ((3, 2.0), (5, 2.0), (4, 2.0), (4, 3.0)):
        x = torch.randn(n)
        assert_same(compiled(x, factor), _decorate_and_call(x, factor))
    assert _eager_frames() == before
    assert _explain_breaks(_decorate_and_call, torch.randn(3), 2.0) == 0
    assert backend.graph_count == 3  # static, then a dynamic size, then a dynamic factor (NOTE [Dynamic floats])


def _make_wrapper(x):
    def inner(y: torch.Tensor, k: int = 2) -> torch.Tensor:
        """inner's doc"""
        return y * k
    inner.calls = x.shape[0]
    w = functools.wraps(inner)(lambda *a: inner(*a) + 1)
    w.extra = x + 1  # a tensor in the function's __dict__
    return w, [w], w(x)


def _function_facts(fn):
    return (fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__, fn.__annotations__, sorted(fn.__dict__),
            fn.calls, fn.__wrapped__.__name__)


def test_a_wrapper_made_inside_the_compiled_region_escapes_with_its_attributes():
    """The wrapper is returned: it must be rebuilt with what update_wrapper stored (name, qualname, module,
    doc, annotations, the wrapped function's __dict__ entries, __wrapped__, a tensor stored on it), once:
    the same object wherever it is returned, as in eager."""
    backend = CountingBackend()
    compiled = framejit.compile(_make_wrapper, backend=backend)
    before = _eager_frames()
    for n in (3, 5, 3):
        x = torch.randn(n)
        w_eager, ws_eager, out_eager = _make_wrapper(x)
        w, ws, out = compiled(x)
        assert_same(out, out_eager)
        assert ws[0] is w
        assert _function_facts(w) == _function_facts(w_eager)
        assert_same(w.extra, w_eager.extra)
        z = torch.randn(n)
        assert_same(w(z), w_eager(z))  # the rebuilt closure still calls the rebuilt inner
    assert _eager_frames() == before
    assert _explain_breaks(_make_wrapper, torch.randn(3)) == 0
    assert backend.graph_count == 2


def _rename(x, name):
    def f(y):
        return y + 1
    f.__name__ = name  # CPython: TypeError unless a str
    return f(x), f.__name__


def test_stores_cpython_rejects_raise_the_same_error():
    backend = CountingBackend()
    compiled = framejit.compile(_rename, backend=backend)
    x = torch.randn(2)
    assert compiled(x, "g")[1] == "g"
    with pytest.raises(TypeError, match="__name__ must be set to a string object"):
        _rename(x, 3)
    with pytest.raises(TypeError, match="__name__ must be set to a string object"):
        compiled(x, 3)
    assert_same(compiled(torch.ones(4), "h"), _rename(torch.ones(4), "h"))


def _wrapper_across_a_break(x):
    g = _scaled(2.0)(_tagged)
    g.seen = x.sum()
    print("between")  # a graph break: g crosses it with its attributes
    return g(x) + g.seen, g.__name__, g.tag


def test_a_wrapper_with_stored_attributes_crosses_a_graph_break(capsys):
    backend = CountingBackend()
    compiled = framejit.compile(_wrapper_across_a_break, backend=backend)
    before = _eager_frames()
    for n in (3, 4):
        x = torch.randn(n)
        expected = _wrapper_across_a_break(x)
        assert_same(compiled(x), expected)
    assert _eager_frames() == before
    assert capsys.readouterr().out == "between\n" * 4
    assert backend.graph_count == 4  # before and after the print, static then with a dynamic size
    assert _explain_breaks(_wrapper_across_a_break, torch.randn(3)) == 1  # the print only
