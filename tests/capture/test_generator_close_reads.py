"""A run-ahead generator whose finally or with-block reads the exception it is closed with (`sys.exc_info()`
in a finally or a function it calls, a context manager's `__exit__` that acts only when given an exception, a
@contextmanager whose body catches GeneratorExit) acts differently when eager drops it suspended (the frame
returns, a `break`, a zip that stops early) or closes it: such a generator is traced lazily (NOTE [Handlers that
see the exception on close] in capture/lazy_generators.py). Before, its run ahead saw no exception, changed
nothing, and was taken as ended, so the close path never ran. Also: the names an except clause is resolved
through when deciding it stays out of close() are guarded (NOTE [Generators whose handlers run on close]).

Each program runs eagerly and compiled on fresh inputs of changing shapes, with the state its handlers read
changed between calls; result and log must be eager's."""
from __future__ import annotations

import contextlib
import sys

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []
MODE: list = [True]


def _compare(fn, calls=3, between=None):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for call in range(calls):
        if between is not None:
            between(call)
        MODE[0] = call != 1
        x = torch.randn(3 + call) + call
        runs = []
        for run in (fn, compiled):
            LOG.clear()
            result = run(x.clone())
            del run
            LOG.append("after")
            runs.append((result, list(LOG)))
        assert runs[1][1] == runs[0][1], (runs[1][1], runs[0][1])
        assert_same(runs[1][0], runs[0][0])
    return backend


def gen_exc_info(t):
    try:
        yield t + 1
        yield t + 2
    finally:
        if MODE[0]:
            LOG.append(("fin", sys.exc_info()[0] and sys.exc_info()[0].__name__))


class LogsOnException:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None and MODE[0]:
            LOG.append(("exit", kind.__name__))
        return False


class Quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return False


def gen_cm(t):
    with LogsOnException():
        yield t + 1
        yield t + 2


def gen_quiet(t):
    with Quiet():
        yield t + 1
        yield t + 2


def _saw_exception():
    if sys.exc_info()[0] is not None:
        LOG.append("helper saw it")


def gen_helper(t):
    try:
        yield t * 2
        yield t * 3
    finally:
        _saw_exception()


@contextlib.contextmanager
def _closing_logged():
    try:
        yield
    except GeneratorExit:
        LOG.append("ctx closed")
        raise


def gen_ctx(t):
    with _closing_logged():
        yield t + 1
        yield t + 2


def dropped(gen):
    def fn(t):
        g = gen(t)
        a = next(g)
        return a * 2
    return fn


def closed(gen):
    def fn(t):
        g = gen(t)
        a = next(g)
        g.close()
        LOG.append("closed")
        return a * 2
    return fn


def broken(gen):
    def fn(t):
        for v in gen(t):
            break
        LOG.append("loop left")
        return v * 3
    return fn


def zipped(gen):
    def fn(t):
        out = [a * b for a, b in zip(gen(t), [2])]
        LOG.append("zipped")
        return out
    return fn


def exhausted(gen):
    def fn(t):
        s = t * 0
        for v in gen(t):
            s = s + v
        return s
    return fn


@pytest.mark.parametrize("gen", [gen_exc_info, gen_cm, gen_helper, gen_ctx])
@pytest.mark.parametrize("use", [dropped, closed, broken, zipped, exhausted])
def test_handler_reading_the_exception(gen, use):
    _compare(use(gen))


def test_handlers_blind_to_the_exception_still_run_ahead():
    """A with-block whose `__exit__` ignores its arguments changes nothing on close: zip over it is still
    captured, no frame runs eagerly."""
    before = framejit.stats()["eager_frames"]
    backend = _compare(zipped(gen_quiet))
    assert framejit.stats()["eager_frames"] == before
    assert backend.graph_count >= 1


class MyError(ValueError):
    pass


def gen_my_error(t):
    try:
        yield t + 1
        yield t + 2
    except MyError:
        LOG.append("caught")
        raise


def test_rebinding_the_class_an_except_clause_names():
    """`except MyError` is known to stay out of close() only while MyError is an Exception subclass; bound
    to GeneratorExit between calls, close() runs the handler, as in eager."""
    def rebind(call):
        globals()["MyError"] = GeneratorExit if call == 2 else _original

    _original = MyError
    try:
        _compare(dropped(gen_my_error), calls=4, between=rebind)
    finally:
        globals()["MyError"] = _original
