"""Exceptions raised inside a generator's body reach the consumer at the step where eager raises them, and a
StopIteration leaving the body is PEP 479's RuntimeError (NOTE [StopIteration leaving a generator body] in
capture/lazy_generators.py). Before, a generator run ahead of its consumer that raised was a graph break before
the call that made it, and a StopIteration leaving a lazy one was a break too.

Each program runs eagerly and compiled on fresh inputs of two shapes; result, exception (type, message) and the
log (the caught exceptions' members, `__cause__` and `__context__` included) must be eager's; the captured ones
make one graph per shape and no eager frame."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


def _describe(e):
    cause = e.__cause__
    return (type(e).__name__, e.args, type(cause).__name__, getattr(cause, "args", None), e.__context__ is cause,
            e.__suppress_context__)


def _compare(fn, calls=2):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    for call in range(calls):
        x = torch.randn(3 + 2 * call) + call
        runs = []
        for run in (fn, compiled):
            LOG.clear()
            try:
                result, error = run(x.clone()), None
            except Exception as e:  # noqa: BLE001 - compared with eager's
                result, error = None, (type(e), str(e))
            log = [_describe(v) if isinstance(v, BaseException) else v for v in LOG]
            runs.append((result, error, log))
        assert runs[1][1:] == runs[0][1:], (runs[1][1:], runs[0][1:])
        assert_same(runs[1][0], runs[0][0])
    return backend.graph_count, framejit.stats()["eager_frames"] - eager_before


def raise_at_first_step(t):
    def gen(t):
        raise ValueError(t.shape[0])
        yield t.cos()
    g = gen(t)
    try:
        next(g)
    except ValueError as e:
        LOG.append(e.args)
    LOG.append(g.close())
    LOG.append(next(g, "ended"))
    return t.sin()


def raise_after_items(t):
    def gen(t):
        yield t + 1
        yield t + 2
        yield 1 // (t.shape[0] - t.shape[0])
        yield t + 3
    g = gen(t)
    out = [next(g), next(g)]
    try:
        next(g)
    except ZeroDivisionError as e:
        LOG.append(str(e))
    LOG.append(next(g, "ended"))
    return out


def stopiteration_raised_in_body(t):
    def gen():
        yield t + 1
        raise StopIteration("boom", t.shape[0])
    g = gen()
    first = next(g)
    try:
        next(g)
    except RuntimeError as e:
        LOG.append(e)  # kept: its cause and context are compared after the call
        return first + 1
    except StopIteration:
        return first + 2
    return first


def stopiteration_from_inner_next(t):
    def inner():
        yield t + 1

    def gen():
        it = inner()
        while True:
            yield next(it)
    g = gen()
    first = next(g)
    try:
        next(g)
    except RuntimeError as e:
        LOG.append(str(e))
        return first * 2
    return first


def raise_then_close(t):
    def gen(t):
        raise ValueError("foo")
        yield t.cos()
    g = gen(t)
    try:
        next(g)
    except ValueError:
        pass
    return [t.sin(), g.close()]


def raise_in_callee_of_body(t):
    def f():
        return 1 // 0

    def gen():
        yield f()
        yield 42
    k = gen()
    try:
        next(k)
    except ZeroDivisionError:
        pass
    return t + next(k, 7)


@pytest.mark.parametrize("fn", [raise_at_first_step, raise_after_items, stopiteration_raised_in_body,
                                stopiteration_from_inner_next, raise_then_close, raise_in_callee_of_body],
                         ids=lambda f: f.__name__)
def test_raised_at_the_step(fn):
    assert _compare(fn) == (2, 0)
    LOG.clear()
    explained = framejit.explain(fn)(torch.randn(3))
    assert (explained.graph_count, explained.break_reasons) == (1, [])


def stopiteration_leaves_frame(t):
    def inner():
        yield t

    def outer():
        it = inner()
        yield next(it)
        yield next(it)
    return list(outer())


def test_uncaught_pep479_error_matches_eager():
    _compare(stopiteration_leaves_frame)


# hhuntG7 MED-1: a handler that changed state and then re-raised the very exception it caught (a `finally`, a bare
# `raise`) left its frame as a break; from a generator with finalizers the whole frame ran eagerly, with the
# reason "the except clause of gen ... could not be traced" (NOTE [Handlers that re-raise what they caught]).
STATE = {"n": 0}


def finally_logs_then_reraises(t):
    def gen(t, stop):
        try:
            for i in range(4):
                if i == stop:
                    raise KeyError(i)
                yield t * i
        finally:
            LOG.append("fin")
    acc = t * 0
    try:
        for v in gen(t, 2):
            acc = acc + v
    except KeyError as e:
        LOG.append(e.args)
        acc = acc - 1
    return acc


def finally_writes_a_tensor_then_reraises(t):
    def gen(t, out):
        try:
            for i in range(3):
                if i == 1:
                    raise IndexError(i)
                yield t * i
        finally:
            out.mul_(2)
    out = t.clone()
    acc = t * 0
    try:
        for v in gen(t, out):
            acc = acc + v
    except IndexError:
        acc = acc - out
    return acc, out


def callee_finally_counts_then_reraises(t):
    def callee():
        try:
            return {}["a"]
        finally:
            STATE["n"] += 1
    STATE["n"] = 0
    try:
        y = callee()
    except KeyError:
        y = t * STATE["n"]
    return y


def callee_logs_then_bare_raise(t):
    def callee():
        try:
            raise KeyError("k")
        except KeyError:
            LOG.append("in")
            raise
    try:
        y = callee()
    except KeyError as e:
        y = t + len(LOG)
        LOG.append(e.args)
    return y


@pytest.mark.parametrize("fn", [finally_logs_then_reraises, finally_writes_a_tensor_then_reraises,
                                callee_finally_counts_then_reraises, callee_logs_then_bare_raise],
                         ids=lambda f: f.__name__)
def test_handler_that_changed_state_and_reraised_is_traced(fn):
    assert _compare(fn) == (2, 0)
    LOG.clear()
    explained = framejit.explain(fn)(torch.randn(3))
    assert (explained.graph_count, explained.break_reasons) == (1, [])
