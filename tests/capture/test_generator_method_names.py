"""`g.close.__name__` / `__qualname__` (and send, throw, __next__) of a generator made in the compiled region are
read in the trace (NOTE [Names of generator methods] in framejit/capture/generator_ends.py). Before, they were a
break (fullgraph=True raised "attribute '__name__' of close of generator ..."): unittest's
assertRaises(exc, g.close) reads the callable's __name__ (PyTorch's test_generator.py
test_error_during_close_propagates, test_throw_on_just_opened_generator). Differential: eager vs compiled.
"""
from __future__ import annotations

import torch

from tests.helpers import run_differential


def with_handler():
    try:
        yield 1
    except GeneratorExit:
        raise TypeError("fie!") from None


def plain(t):
    yield t + 1


def raises_through(fn, *args):
    """What unittest's assertRaises(exc, fn) does: the callable's name, then the call."""
    name = fn.__name__
    try:
        fn(*args)
    except TypeError as e:
        return name, str(e)
    return name, None


def names_of_methods(t):
    g = with_handler()
    next(g)
    h = plain(t)
    names = [m.__name__ for m in (g.send, g.close, h.throw, h.close)]
    quals = [g.close.__qualname__, h.throw.__qualname__]
    return t * 2, names, quals, raises_through(g.close)


def test_names_of_generator_methods_are_read_in_the_trace():
    backend = run_differential(names_of_methods, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1))
    assert backend.graph_count == 2  # fullgraph: no break


def doc_and_module_of_methods(t):
    g = plain(t)
    next(g)
    m = g.close
    return t + 1, m.__doc__, m.__module__, g.send.__doc__, hasattr(g.throw, "__module__"), \
        m.__doc__ == type(g).close.__doc__  # revBB MED-1: type(g) was list_iterator, so this raised AttributeError


def test_doc_and_module_of_generator_methods_are_read_in_the_trace():
    # revAQ LOW-1: `g.close.__doc__` of a started generator ran the whole frame eagerly (a break nowhere else)
    backend = run_differential(doc_and_module_of_methods, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1))
    assert backend.graph_count == 2  # fullgraph: no break
