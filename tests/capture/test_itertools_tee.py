"""`itertools.tee` is traced, evaluated when made (NOTE [tee evaluated when made] in
framejit/capture/itertools_support.py): each copy steps on its own over the items drawn from the argument. Before,
its call was a break (fullgraph=True raised "call of itertools.tee"; PyTorch's test_generator.py
test_deep_tee_buffer_no_recursion_error). A list mutated after the tee is still read as eager reads it (the break
where the tee was made). Differential: eager vs compiled, fresh inputs of two sizes.
"""
from __future__ import annotations

import itertools

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


def long_tee(t):
    a, b = itertools.tee(iter(range(2000)))
    list(a)  # one copy drained: the other still holds every item
    return t + 1, next(b), len(list(b))


def three_copies(t):
    a, b, c = itertools.tee([t, t * 2, t * 3], 3)
    x = next(a)
    y = list(b)
    z = next(c) + next(c)
    return x, y, z, list(a), type(a).__name__


def tee_of_generator(t):
    a, b = itertools.tee(x * 2 for x in (t, t + 1))
    return list(a), list(b)


def tee_of_an_argument(t, xs):
    a, b = itertools.tee(xs)
    return t * next(a), list(b), list(a)


def test_tee_is_traced():
    for fn in (long_tee, three_copies, tee_of_generator):
        run_differential(fn, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1))  # fullgraph: no break
    run_differential(tee_of_an_argument, lambda seed: (torch.randn(2), [seed, 2, 3]), seeds=(0, 1))
    _check_mutated_after_tee()


def mutated_after_tee(t):
    items = [1, 2]
    a, b = itertools.tee(items)
    items.append(3)  # CPython's tee draws lazily: both copies see 3
    return t + sum(a), list(b)


def _check_mutated_after_tee():
    compiled = framejit.compile(mutated_after_tee, backend=CountingBackend())
    for n in (2, 3):
        t = torch.randn(n)
        assert_same(compiled(t), mutated_after_tee(t))
