"""`with cm:` over a `@contextmanager` manager made outside the compiled function (an argument, a global)
and not entered yet: traced from its generator's start (NOTE [Generator context managers from outside]).

Differential: each call gets a fresh manager over fresh tensors, built the same way for the eager and
the compiled run; results, the log the generator writes, and the state left on the manager object
(`args`/`kwds`/`func` deleted, generator closed) are compared, and graph/break counts asserted.
"""
from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


@pytest.fixture(autouse=True)
def _fresh():
    framejit.reset()
    yield
    framejit.reset()


@contextlib.contextmanager
def logged(x, log, scale=1.0):
    log.append("enter")
    try:
        yield x.cos() * scale + 1
    finally:
        log.append("exit")


def _logged_cm(log):
    return lambda x, **kw: logged(x, log, **kw)


def _manager_state(cm):
    return (hasattr(cm, "args"), hasattr(cm, "kwds"), hasattr(cm, "func"), inspect.getgeneratorstate(cm.gen))


def _compare(fn, make_call, seeds=(0, 1, 2)):
    """make_call(seed, log) -> (args, manager); runs fn eagerly and compiled on equal fresh calls."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in seeds:
        eager_log, compiled_log = [], []
        torch.manual_seed(seed)
        eager_args, eager_cm = make_call(seed, eager_log)
        torch.manual_seed(seed)
        compiled_args, compiled_cm = make_call(seed, compiled_log)
        expected = fn(*eager_args)
        actual = compiled(*compiled_args)
        assert_same(actual, expected)
        assert compiled_log == eager_log
        assert _manager_state(compiled_cm) == _manager_state(eager_cm)
    return backend


def test_argument_manager_is_traced_into_one_graph():
    def fn(x, ctx):
        y = x.sin()
        with ctx as z:
            y = y + z
        return y * 2

    def make_call(seed, log):
        x = torch.randn(3)
        cm = _logged_cm(log)(x, scale=0.5)
        return (x, cm), cm

    backend = _compare(fn, make_call)
    assert backend.graph_count == 1  # one trace serves every fresh manager (guards hold)
    explanation = framejit.explain(fn)(*make_call(0, [])[0])
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0


def test_manager_from_a_global_and_return_inside_the_block():
    log = []
    holder = {}

    def fn(x):
        with holder["cm"] as z:
            return x + z

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in range(2):
        x = torch.randn(4)
        holder["cm"] = _logged_cm(log)(x)
        expected_log_len = len(log) + 2
        expected = x + (x.cos() + 1)
        actual = compiled(x)
        assert_same(actual, expected)
        assert len(log) == expected_log_len and log[-2:] == ["enter", "exit"]
        assert _manager_state(holder["cm"]) == (False, False, False, inspect.GEN_CLOSED)
    assert backend.graph_count == 1


def test_entering_the_same_manager_again_raises_as_eager():
    def fn(x, ctx):
        with ctx as z:
            x = x + z
        with ctx:
            x = x * 2
        return x

    x = torch.randn(3)
    with pytest.raises(AttributeError):
        fn(x, _logged_cm([])(x))
    with pytest.raises(AttributeError):
        framejit.compile(fn, backend=CountingBackend())(x, _logged_cm([])(x))


def test_manager_used_up_by_an_earlier_call_is_not_traced_as_new():
    def fn(x, ctx):
        with ctx as z:
            return x + z

    compiled = framejit.compile(fn, backend=CountingBackend())
    x = torch.randn(3)
    cm = _logged_cm([])(x)
    assert_same(compiled(x, cm), fn(x, _logged_cm([])(x)))
    with pytest.raises(AttributeError):  # eager: its __enter__ finds `args` deleted
        fn(x, cm)
    with pytest.raises(AttributeError):  # the generator-state guard fails; not adopted again
        compiled(x, cm)


def test_graph_break_inside_the_block_keeps_order_of_effects():
    def fn(x, ctx, log):
        with ctx as z:
            log.append("body")
            torch._dynamo.graph_break()
            y = x + z
        log.append("after")
        return y.relu()

    def make_call(seed, log):
        x = torch.randn(2 + seed)
        cm = _logged_cm(log)(x)
        return (x, cm, log), cm

    _compare(fn, make_call, seeds=(0, 1))


# ---- a @contextmanager manager made in the frame, used as a decorator (ContextDecorator) ----------


def test_manager_as_decorator_wraps_each_call_in_a_fresh_manager():
    def fn(x, log):
        cm = logged(x, log)

        @cm
        def g(v):
            log.append("call")
            return v * 2

        a = g(x)
        b = g(a)
        with cm as z:  # the manager that decorated was never entered itself
            c = b + z
        return c

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for seed in range(2):
        x = torch.randn(3)
        eager_log, compiled_log = [], []
        assert_same(compiled(x, compiled_log), fn(x, eager_log))
        assert compiled_log == eager_log == ["enter", "call", "exit", "enter", "call", "exit", "enter", "exit"]
    assert backend.graph_count == 1


def test_decorated_function_with_a_graph_break_inside():
    def fn(x, log):
        @logged(x, log, scale=2.0)
        def g(v):
            log.append("call")
            torch._dynamo.graph_break()
            return v + 1

        return g(x).relu()

    compiled = framejit.compile(fn, backend=CountingBackend())
    for seed in range(2):
        x = torch.randn(4)
        eager_log, compiled_log = [], []
        assert_same(compiled(x, compiled_log), fn(x, eager_log))
        assert compiled_log == eager_log
