"""A generator's return value reaches `except StopIteration as e` through next() (issue 12: hhuntG3 HIGH-A),
differential (eager vs compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Return values of generators run ahead] (framejit/capture/builtins.py): the next() that ends a generator
run ahead in the trace raises StopIteration(return value) (before: a bare StopIteration(), so e.value was None
and e.args ()); a later next() raises a bare one; a return value that is not a constant is a break.
"""
from __future__ import annotations

import torch

from tests.helpers import run_differential


def counted(n):
    for i in range(n):
        yield i
    return "done%d" % n


def once(n):
    yield n
    return n * 10


def drain_with_next(x, gen, n):
    it = gen(n)
    try:
        while True:
            x = x + next(it)
    except StopIteration as e:
        return x, e.value, e.args


def test_next_loop_sees_the_return_value():
    for gen in (counted, once):
        run_differential(drain_with_next, lambda seed: (torch.randn(2 + seed), gen, seed + 1), seeds=(0, 1, 2))


def drain_with_dunder_next(x, n):
    it = once(n)
    out = []
    while True:
        try:
            x = x * it.__next__()
        except StopIteration as e:
            out.append(e.value)
            break
    try:  # the finished generator: a bare StopIteration, as CPython's
        next(it)
    except StopIteration as e:
        out.append((e.value, e.args))
    return x, out, next(it, "dflt")


def test_dunder_next_then_finished_generator():
    run_differential(drain_with_dunder_next, lambda seed: (torch.randn(3), seed + 2), seeds=(0, 1, 2))


def _helper_catching(it):
    try:
        while True:
            next(it)
    except StopIteration as e:
        return ("H", e.value)


def helper_catches(x, n):
    return x + n, _helper_catching(once(n + 100))


def test_inlined_helper_catches_the_return_value():
    run_differential(helper_catches, lambda seed: (torch.randn(2), seed), seeds=(0, 1, 2))


def genexpr_and_list(x, n):
    it = (i * 2 for i in range(n))
    lst = iter([1] * n)
    out = []
    for src in (it, lst):
        try:
            while True:
                x = x + next(src)
        except StopIteration as e:
            out.append((e.value, e.args))
    return x, out


def test_genexpr_and_list_iterator_stop_bare():
    run_differential(genexpr_and_list, lambda seed: (torch.randn(2), seed + 1), seeds=(0, 1, 2))


def tensor_returned(x, n):
    def gen():
        for i in range(n):
            yield x * i
        return x.sum() + n
    it = gen()
    y = x
    try:
        while True:
            y = y + next(it)
    except StopIteration as e:
        return y, e.value


def test_tensor_return_value():
    run_differential(tensor_returned, lambda seed: (torch.randn(2 + seed), seed + 1), seeds=(0, 1, 2),
                     fullgraph=False)
