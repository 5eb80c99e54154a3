"""Generators whose bodies mutate state the consumer sees are traced lazily, stepped in the consumer's order
(NOTE [Generators that mutate state] in capture/lazy_generators.py). Before, such a generator was a graph break
at the call that made it. Each program runs eagerly and compiled on fresh inputs of two shapes; the result, the
exception and the log of effects (order included) must be eager's; the captured ones trace with no break."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


def _compare(fn, calls=2):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for call in range(calls):
        x = torch.randn(3 + 2 * call) + call
        runs = []
        for run in (fn, compiled):
            LOG.clear()
            try:
                result, error = run(x.clone()), None
            except Exception as e:  # noqa: BLE001 - compared with eager's
                result, error = None, (type(e), str(e))
            runs.append((result, error, list(LOG)))
        assert runs[1][1:] == runs[0][1:], (runs[1][1:], runs[0][1:])
        assert_same(runs[1][0], runs[0][0])
    return backend.graph_count


def logging_gen(t):
    for i in range(3):
        LOG.append(("gen", i))
        yield t + i


def interleaved_loop(t):
    out = []
    for v in logging_gen(t):
        LOG.append("consumer")
        out.append(v * 2)
    return out


def partial_draw(t):
    g = logging_gen(t)
    a = next(g)
    LOG.append("between")
    return a + next(g)


def nonlocal_counter(t):
    n = 0

    def gen():
        nonlocal n
        for j in range(3):
            n += 1
            yield t + j
    g = gen()
    first = next(g)
    LOG.append(n)
    rest = list(g)
    LOG.append(n)
    return first, rest


@pytest.mark.parametrize("fn", [interleaved_loop, partial_draw, nonlocal_counter], ids=lambda f: f.__name__)
def test_mutating_generator_traced_lazily(fn):
    assert _compare(fn) == 2
    LOG.clear()
    explained = framejit.explain(fn)(torch.randn(3))
    assert (explained.graph_count, explained.break_reasons) == (1, [])


def zipped(t):
    return list(zip(range(2), logging_gen(t)))


def test_zip_over_mutating_generator_matches_eager():
    _compare(zipped)
