"""A lazy generator whose body has effects (NOTE [Generators that mutate state] in capture/lazy_generators.py),
drawn by a consumer that may stop early or interleave its own code with the draws (any, all, max/min with key,
functools.reduce, sum with an object start, itertools.chain): eager stops or interleaves, so the trace must not
run the generator to its end first (review revY HIGH-1: `all(small(p) for p in params)` logged [2, 5, 1, 2]
where eager logs [2, 5]). Each program runs eagerly and compiled on fresh inputs of two shapes; the result, the
input after the call and the log of effects must be eager's."""
from __future__ import annotations

import functools
import itertools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


def _compare(fn, calls=2):
    compiled = framejit.compile(fn, backend=CountingBackend())
    for call in range(calls):
        x = torch.randn(2 + call)
        params = [torch.zeros(2 + call), torch.zeros(5), torch.zeros(1), torch.zeros(2)]
        runs = []
        for run in (fn, compiled):
            LOG.clear()
            xs = x.clone()
            result = run(xs, params)
            runs.append((result, xs, list(LOG)))
        assert runs[1][2] == runs[0][2], (runs[1][2], runs[0][2])
        assert_same(runs[1][0], runs[0][0])
        assert_same(runs[1][1], runs[0][1])


def small(p):
    LOG.append(p.shape[0])
    return p.shape[0] < 3


def logged(n):
    for i in range(n):
        LOG.append(i)
        yield i


def all_genexp(x, params):
    if all(small(p) for p in params):
        return x + 1
    return x - 1


def any_logged(x, params):
    return x + len(LOG) * 10 + int(any(logged(5)))


def max_key(x, params):
    ks = []
    r = max(logged(4), key=lambda i: ks.append(len(LOG)) or -i)
    return x + r, ks


def reduce_reads_log(x, params):
    return x + functools.reduce(lambda a, b: a + b * len(LOG), logged(4))


class Acc:
    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        return Acc(self.v + other * len(LOG))


def sum_object_start(x, params):
    return x + sum(logged(4), Acc(0)).v


def chain_break(x, params):
    out = x
    for i in itertools.chain(logged(3), logged(3)):
        out = out + len(LOG)
        if len(LOG) == 2:
            break
    return out


def bump(t):
    for i in range(5):
        t.add_(1)
        yield i


def any_inplace_input(x, params):
    return any(i >= 1 for i in bump(x)) * 1 + x.sum()


@pytest.mark.parametrize("fn", [all_genexp, any_logged, max_key, reduce_reads_log, sum_object_start, chain_break,
                                any_inplace_input])
def test_effects_of_a_lazy_generator_in_eager_order(fn):
    _compare(fn)


# NOTE [Consumers that call back between draws] (capture/builtins.py): the consumer's callback changes what
# the generator reads; eager draws each item after the callbacks for the items before it.
def reads_log_sent():
    for _ in range(3):
        _ = yield len(LOG)


def reads_log():
    for _ in range(3):
        yield len(LOG)


def max_key_sent(x, params):
    return x + max(reads_log_sent(), key=lambda i: LOG.append(1) or i)


def max_key_run_ahead(x, params):
    return x + max(reads_log(), key=lambda i: LOG.append(1) or i)


def reduce_sent(x, params):
    return x + functools.reduce(lambda a, b: LOG.append(1) or a + b, reads_log_sent())


class Logs:
    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        LOG.append(other)
        return Logs(self.v + other)


def sum_logging_start(x, params):
    return x + sum(reads_log(), Logs(0)).v


def chain_sent(x, params):
    out = x
    for i in itertools.chain(reads_log_sent(), [1]):
        LOG.append(i)
        out = out + i
    return out


def chain_local_cell(x, params):
    seen = []

    def reads_seen():
        for _ in range(3):
            _ = yield len(seen)
    out = x
    for i in itertools.chain(reads_seen(), [1]):
        seen.append(i)
        out = out + i
    return out


@pytest.mark.parametrize("fn", [max_key_sent, max_key_run_ahead, reduce_sent, sum_logging_start, chain_sent,
                                chain_local_cell])
def test_consumer_callbacks_change_what_the_generator_reads(fn):
    _compare(fn)
