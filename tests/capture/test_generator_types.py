"""type() of a generator made in the compiled region, and what reads it (review revBB HIGH-2). A generator run
ahead of its consumer (NOTE [Eager generators]) is an iterator value over its items; type(g) answered
list_iterator, so `isinstance(g, types.GeneratorType)`, inspect.isgenerator(g), collections.abc.Generator,
`type(g).__name__`, `type(g).close` and code dispatching on the type gave another answer than eager, silently,
in one graph (generator functions and generator expressions alike). The len() error named 'iterator'.

Differential: eager vs compiled on fresh inputs (three calls, two sizes), values and exceptions compared.
"""
from __future__ import annotations

import collections.abc
import inspect
import types

import pytest
import torch

from tests.helpers import CountingBackend, run_differential


def gen(t):
    yield t
    yield t * 2


def type_reads(t):
    g = gen(t)
    return t + 1, type(g).__name__, type(g) is types.GeneratorType, isinstance(g, types.GeneratorType), \
        inspect.isgenerator(g), [c.__name__ for c in type(g).__mro__], list(g)


def abc_reads(t):
    g = gen(t)
    return t + 1, isinstance(g, collections.abc.Generator), issubclass(type(g), collections.abc.Generator), \
        isinstance(g, collections.abc.Iterator), list(g)


def dispatch_on_type(t):
    g = gen(t)
    if isinstance(g, types.GeneratorType):
        return sum(g) + 1
    return sum(g) - 1


def genexpr_type(t):
    g = (v * t for v in range(3))
    return type(g).__name__, isinstance(g, types.GeneratorType), inspect.isgenerator(g), sum(g)


def type_methods(t):
    g = gen(t)
    return t + 1, type(g).close.__name__, type(iter(g)).__name__, list(g)


def next_through_the_type(t):
    g = gen(t)
    first = type(g).__next__(g)  # a break: before, list_iterator's __next__ raised TypeError
    return first + 1, list(g)


def len_error(t):
    g = (v * t for v in range(3))
    try:
        len(g)
    except TypeError as e:
        return t + 1, str(e), sum(g)
    return t - 1


def _rev(it):
    return reversed(it)


def reversed_error(t):
    """revBF PRE-2: reversed() of an iterator raises TypeError (before: drew it and reversed the items)."""
    g, it, m = gen(t), iter([t, 2 * t]), map(lambda v: v + 1, [t])
    errors = []
    for x in (g, it, m):
        try:
            _rev(x)
        except TypeError as e:
            errors.append(str(e))
    return t + 1, errors, list(g), list(it), list(m)


@pytest.mark.parametrize("fn", [type_reads, abc_reads, dispatch_on_type, genexpr_type, type_methods, len_error,
                                reversed_error])
def test_type_of_a_generator_made_in_the_trace_is_generator(fn):
    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1), backend=CountingBackend())
    assert backend.graph_count == 2  # fullgraph: no break; one trace per size



def test_next_through_the_type_of_a_generator_made_in_the_trace():
    run_differential(next_through_the_type, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1), fullgraph=False)
