"""throw() and close() of generators whose bodies have try/except/finally, traced where CPython raises the
exception: at the suspended `yield` (NOTE [Exceptions thrown into suspended generators] in
capture/lazy_generators.py). Before, each of these made the whole frame run eagerly.

Each program runs eagerly and compiled on fresh inputs of two shapes; the result, the exception raised (type and
message) and the log of effects (order included) must be eager's. The captured ones make one graph per shape and
no eager frame, including a suspended generator dropped when the frame returns, whose close() runs then
(NOTE [Generators closed when the frame returns]); where eager runs code framejit does not trace (a generator
dropped before the return or kept, a handler that raises a new exception), the frame runs eagerly and matches."""
from __future__ import annotations

import sys

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


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
            runs.append((result, error, list(LOG)))
        assert runs[1][1:] == runs[0][1:], (runs[1][1:], runs[0][1:])
        assert_same(runs[1][0], runs[0][0])
    return backend.graph_count, framejit.stats()["eager_frames"] - eager_before


def logged(t):
    try:
        LOG.append("start")
        yield t.sin()
        LOG.append("resumed")
        yield t.cos()
    except ValueError as e:
        LOG.append(("caught", e.args))
        yield t * 3
    finally:
        LOG.append("finally")


def throw_caught_then_exhausted(t):
    g = logged(t)
    a = next(g)
    b = g.throw(ValueError(len(LOG)))
    rest = list(g)
    return a + b, rest


def throw_not_matching(t):
    g = logged(t)
    a = next(g)
    try:
        g.throw(KeyError("k"))
    except KeyError as e:
        LOG.append(("outer", e.args))
    LOG.append("after")
    return a * 2


def throw_class_runtime_error(t):
    def gen(t):
        try:
            yield t.sin()
        except RuntimeError:
            LOG.append("rt")
            yield t.cos()
    g = gen(t)
    return next(g) + g.throw(RuntimeError)


def throw_ends_body(t):
    def gen(t):
        try:
            yield t + 1
        except ValueError:
            LOG.append("caught")
        finally:
            LOG.append("finally")
    g = gen(t)
    a = next(g)
    try:
        g.throw(ValueError)
    except StopIteration as e:
        LOG.append(("stop", e.args))
        return a
    return a + 1


def return_in_finally(t):
    def gen():
        try:
            yield 1
        except ValueError:
            return 2
        finally:
            return 3  # noqa: B012
    g = gen()
    next(g)
    try:
        g.throw(ValueError)
    except StopIteration as e:
        LOG.append(e.args)
    return t.sin()


def throw_identity(t):
    x = ValueError(t.shape[0])

    def gen():
        try:
            yield 1
        finally:
            LOG.append("finally")
    g = gen()
    next(g)
    try:
        g.throw(x)
    except ValueError as e:
        LOG.append((e is x, e.args))
    return t + 1


def throw_not_started(t):
    def gen():
        try:
            yield 1
        finally:
            LOG.append("never")
    g = gen()
    try:
        g.throw(ValueError(7))
    except ValueError as e:
        LOG.append(e.args)
    LOG.append(next(g, "ended"))
    return t + 1


def throw_in_loop_body(t):
    def gen(t):
        for i in range(3):
            try:
                yield t + i
            except KeyError:
                LOG.append(("k", i))
                yield t - i
    g = gen(t)
    return [next(g), g.throw(KeyError), next(g), g.throw(KeyError("x")), *g]


def close_runs_finally(t):
    def gen(t):
        try:
            LOG.append(1)
            yield t.sin()
            LOG.append(2)
        finally:
            LOG.append("finally")
    g = gen(t)
    i = next(g)
    g.close()
    g.close()
    LOG.append(len(LOG))
    return i


def close_catches_and_returns(t):
    def gen(t):
        try:
            yield t.sin()
        except GeneratorExit:
            LOG.append("exit")
            return t.cos()
        finally:
            LOG.append("finally")
    g = gen(t)
    i = next(g)
    r = g.close()  # 3.13 gives the value returned, earlier versions None
    return i, r


def close_reraises(t):
    def gen(t):
        try:
            yield t.sin()
        except GeneratorExit:
            LOG.append("exit")
            raise
        finally:
            LOG.append("finally")
    g = gen(t)
    i = next(g)
    g.close()
    LOG.append("after")
    return i


def close_not_caught_by_except_exception(t):
    def gen():
        try:
            yield
        except Exception:
            LOG.append("except")
        finally:
            LOG.append("finally")
    g = gen()
    next(g)
    g.close()
    return t + 1


def close_ignored(t):
    def gen(t):
        try:
            yield t.sin()
        except GeneratorExit:
            yield t.cos()
    g = gen(t)
    i = next(g)
    try:
        g.close()
    except RuntimeError as e:
        LOG.append(str(e))
    g.close()
    return i


def suspended_in_handler_with_finally(t):
    g = logged(t)
    a = next(g)
    b = g.throw(ValueError)  # suspended at `yield t * 3`: the frame's return drops it and runs `finally`
    LOG.append("returning")
    return a + b


def dropped_at_return_kept_in_local_list(t):
    g = logged(t)
    keep = [g]
    return next(g) * len(keep)


def finally_mutates_returned_list(t):
    def gen(t, out):
        try:
            yield t + 1
        finally:
            out.append("closed")
    out = []
    g = gen(t, out)
    return next(g), out


def close_in_yield_from_of_plain_generator(t):
    def sub(t):
        yield t.sin()
        yield t.cos()

    def outer(t):
        LOG.append("start")
        yield from sub(t)
        LOG.append("after sub")
        try:
            yield t.tan()
        finally:
            LOG.append("finally")
    g = outer(t)
    i = next(g)
    g.close()  # closes `sub`, then GeneratorExit leaves `outer` before its try
    LOG.append("closed")
    return i, next(g, "ended")


def close_in_yield_from_of_list(t):
    def outer(t):
        yield from [t + 1, t + 2]
        try:
            yield t
        finally:
            LOG.append("finally")
    g = outer(t)
    i = next(g)
    g.close()
    return i


CAPTURED = [close_in_yield_from_of_plain_generator, close_in_yield_from_of_list, suspended_in_handler_with_finally, dropped_at_return_kept_in_local_list, finally_mutates_returned_list,
            throw_caught_then_exhausted, throw_not_matching, throw_class_runtime_error, throw_ends_body,
            return_in_finally, throw_identity, throw_not_started, throw_in_loop_body, close_runs_finally,
            close_catches_and_returns, close_reraises, close_not_caught_by_except_exception, close_ignored]


@pytest.mark.parametrize("fn", CAPTURED, ids=lambda f: f.__name__)
def test_throw_and_close_traced(fn):
    graphs, eager_frames = _compare(fn)
    assert (graphs, eager_frames) == (2, 0)


def handler_raises_new_exception(t):
    def gen():
        try:
            yield
        except GeneratorExit:
            raise TypeError("fie") from None
    g = gen()
    next(g)
    try:
        g.close()
    except TypeError as e:
        LOG.append(str(e))
    return t + 1


def handler_untraceable(t):
    def gen(t):
        try:
            yield t.sin()
        except ValueError:
            LOG.append(sys._getframe(0).f_code.co_name)
            yield t.cos()
        finally:
            LOG.append("finally")
    g = gen(t)
    a = next(g)
    return a + g.throw(ValueError), list(g)


def throw_into_yield_from(t):
    def sub():
        try:
            yield 1
        except ValueError:
            LOG.append("sub caught")
            yield 2

    def outer():
        try:
            yield from sub()
        finally:
            LOG.append("outer finally")
    g = outer()
    next(g)
    r = g.throw(ValueError)
    g.close()
    return t + r


def close_in_yield_from_of_generator_with_finally(t):
    def sub(t):
        try:
            yield t.sin()
        finally:
            LOG.append("sub finally")

    def outer(t):
        yield from sub(t)
        try:
            yield t
        finally:
            LOG.append("outer finally")
    g = outer(t)
    i = next(g)
    g.close()
    return i


def close_in_yield_from_inside_try(t):
    def sub(t):
        yield t.sin()

    def outer(t):
        try:
            yield from sub(t)
        finally:
            LOG.append("outer finally")
    g = outer(t)
    i = next(g)
    g.close()
    return i


def dropped_before_return(t):
    g = logged(t)
    a = next(g)
    g = None  # eager closes it here, before the next line
    LOG.append("after")
    return a


KEPT: list = []


def stored_outside(t):
    g = logged(t)
    KEPT.append(g)
    a = next(g)
    KEPT.clear()  # released here: eager closes it before the frame returns
    LOG.append("after")
    return a


def two_suspended(t):
    g, h = logged(t), logged(t + 1)
    return next(g) + next(h)


def finally_raises(t):
    def gen(t):
        try:
            yield t
        finally:
            raise ValueError("ignored by CPython")
    g = gen(t)
    return next(g) + 1


def test_handler_raising_a_new_exception_traced():  # NOTE [New exceptions leaving callees' handlers]
    graphs, eager_frames = _compare(handler_raises_new_exception)
    assert (graphs, eager_frames) == (2, 0)


@pytest.mark.parametrize("fn", [handler_untraceable, throw_into_yield_from,
                                close_in_yield_from_of_generator_with_finally, close_in_yield_from_inside_try,
                                dropped_before_return, stored_outside, two_suspended,
                                finally_raises], ids=lambda f: f.__name__)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # finally_raises: as in eager
def test_kept_eager_where_not_traced(fn):
    _, eager_frames = _compare(fn)
    assert eager_frames > 0
