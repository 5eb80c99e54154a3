"""A generator whose handler can catch GeneratorExit (`except GeneratorExit`, `except BaseException`, a bare
`except:`, a tuple naming one) runs that handler when it is dropped suspended; such a generator is lazy from
the start (NOTE [Generators whose handlers run on close] in capture/lazy_generators.py). Before, one whose
normal path changed nothing was run ahead and taken as ended, so the handler never ran (review revW HIGH-1).

Each program runs eagerly and compiled on fresh inputs of two shapes; result and log must be eager's."""
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
            result = run(x.clone())
            runs.append((result, list(LOG)))
        assert runs[1][1] == runs[0][1], (runs[1][1], runs[0][1])
        assert_same(runs[1][0], runs[0][0])


def drop_except_genexit(t):
    def gen(t):
        try:
            yield t + 1
        except GeneratorExit:
            LOG.append("ge")
    g = gen(t)
    a = next(g)
    LOG.append("end")
    return a


def drop_except_base(t):
    def gen(t):
        try:
            yield t + 1
        except BaseException as e:
            LOG.append(type(e).__name__)
    g = gen(t)
    a = next(g)
    return a


def drop_except_tuple(t):
    def gen(t):
        try:
            yield t + 1
        except (ValueError, GeneratorExit):
            LOG.append("h")
    g = gen(t)
    a = next(g)
    return a


def del_except_genexit(t):
    def gen(t):
        try:
            yield t + 1
            yield t + 2
        except GeneratorExit:
            LOG.append("ge")
    g = gen(t)
    a = next(g)
    del g
    LOG.append("after del")
    return a * 2


def _bare(t):
    try:
        for i in range(3):
            yield t + i
    except:  # noqa: E722 - the case under test
        LOG.append("cleanup")
        raise


def break_bare_except(t):
    acc = t * 0
    for x in _bare(t):
        acc = acc + x
        break
    LOG.append("after loop")
    return acc


def exception_only_handler(t):
    def gen(t):
        try:
            yield t + 1
        except (ValueError, KeyError):
            LOG.append("never")
    g = gen(t)
    a = next(g)
    return a


@pytest.mark.parametrize("fn", [drop_except_genexit, drop_except_base, drop_except_tuple, del_except_genexit,
                                break_bare_except, exception_only_handler])
def test_handler_runs_on_close_as_eager(fn):
    _compare(fn)


def test_handlers_that_close_runs():
    from framejit.capture.lazy_generators import runs_code_on_close

    def gen(t):
        try:
            yield t
        except (ValueError, KeyError):
            pass
    assert not runs_code_on_close(gen)
    for f in (drop_except_genexit, drop_except_base, drop_except_tuple, del_except_genexit):
        inner = next(c for c in f.__code__.co_consts if hasattr(c, "co_flags"))
        assert runs_code_on_close(type(gen)(inner, globals()))
    assert runs_code_on_close(_bare)
