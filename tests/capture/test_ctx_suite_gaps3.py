"""`@contextmanager` managers entered by a bare `cm.__enter__()` (issue 11, PyTorch's test_ctx_manager.py
test_contextmanager_as_argument / _only___enter__).

- NOTE [Generator managers entered and not exited]: a manager entered and not exited when the frame
  returns keeps its generator suspended; eager runs its `finally:` when the generator is collected, or the
  caller exits it later. The trace cannot hand back a suspended generator, so it breaks before the manager.
- NOTE [Generator context managers from outside]: an outside manager entered and exited by bare calls
  inside the frame is traced from its generator's start, like `with cm:` over it.

Differential: eager and compiled runs get equal fresh managers over fresh tensors (two or three calls, the
tensor shape changes); results, the log the generator writes (also after the caller exits the manager)
and the state left on the manager object are compared; graph and break counts asserted.
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
def logged(x, log):
    log.append("enter")
    try:
        yield x.cos() + 1
    finally:
        log.append("exit")


def _state(cm):
    return (hasattr(cm, "args"), hasattr(cm, "kwds"), hasattr(cm, "func"), inspect.getgeneratorstate(cm.gen))


def test_manager_made_here_and_left_entered_runs_its_finally_as_eager():
    def fn(x, log):
        cm = logged(x, log)
        y = cm.__enter__()
        log.append("body")
        return x.sin() + y  # cm is dropped here: its generator is collected and its finally runs

    compiled = framejit.compile(fn)
    for n in (3, 3, 5):
        x = torch.randn(n)
        eager_log, compiled_log = [], []
        expected = fn(x, eager_log)
        actual = compiled(x.clone(), compiled_log)
        assert_same(actual, expected)
        assert eager_log == ["enter", "body", "exit"]
        assert compiled_log == eager_log  # before: ['enter', 'body'] (the finally never ran)

    # returned while entered: the caller gets the real manager, its generator suspended, and exits it
    def returns_it(x, log):
        cm = logged(x, log)
        y = cm.__enter__()
        return x * y, cm

    compiled_returns = framejit.compile(returns_it)
    for n in (2, 4):
        x = torch.randn(n)
        eager_log, compiled_log = [], []
        expected, eager_cm = returns_it(x, eager_log)
        actual, compiled_cm = compiled_returns(x.clone(), compiled_log)
        assert_same(actual, expected)
        assert type(compiled_cm) is contextlib._GeneratorContextManager
        assert compiled_log == eager_log == ["enter"]
        assert inspect.getgeneratorstate(compiled_cm.gen) == inspect.getgeneratorstate(eager_cm.gen)
        assert compiled_cm.__exit__(None, None, None) is eager_cm.__exit__(None, None, None) is False
        assert compiled_log == eager_log == ["enter", "exit"]

    # entered in a callee and dropped there: eager runs the finally when the callee returns, before "after"
    def helper(x, log):
        cm = logged(x, log)
        return cm.__enter__()

    def calls_helper(x, log):
        y = helper(x, log)
        log.append("after")
        return x - y

    compiled_calls = framejit.compile(calls_helper)
    for n in (3, 2):
        x = torch.randn(n)
        eager_log, compiled_log = [], []
        expected = calls_helper(x, eager_log)
        assert_same(compiled_calls(x.clone(), compiled_log), expected)
        assert compiled_log == eager_log == ["enter", "exit", "after"]


def test_outside_manager_entered_and_exited_by_calls_is_traced_into_one_graph():
    def fn(x, ctx):
        y = ctx.__enter__()
        ctx.__exit__(None, None, None)
        return x + y

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in (3, 3, 6):
        x = torch.randn(n)
        eager_log, compiled_log = [], []
        eager_cm, compiled_cm = logged(x, eager_log), logged(x.clone(), compiled_log)
        assert_same(compiled(x.clone(), compiled_cm), fn(x, eager_cm))
        assert compiled_log == eager_log == ["enter", "exit"]
        assert _state(compiled_cm) == _state(eager_cm)  # args/kwds/func deleted, generator closed
    explanation = framejit.explain(fn)(torch.randn(3), logged(torch.randn(3), []))
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0  # before: 1 graph (x + y), 6 breaks
    assert [op for ops in explanation.ops_per_graph for op in ops].count("cos") == 1  # the generator's body

    # entered only: left entered for the caller to exit, as eager leaves it (the trace breaks before it)
    def enter_only(x, ctx):
        return x + ctx.__enter__()

    compiled_enter = framejit.compile(enter_only)
    for n in (2, 2):
        x = torch.randn(n)
        eager_log, compiled_log = [], []
        eager_cm, compiled_cm = logged(x, eager_log), logged(x.clone(), compiled_log)
        assert_same(compiled_enter(x.clone(), compiled_cm), enter_only(x, eager_cm))
        assert compiled_log == eager_log == ["enter"]
        assert _state(compiled_cm) == _state(eager_cm)
        compiled_cm.__exit__(None, None, None)
        eager_cm.__exit__(None, None, None)
        assert compiled_log == eager_log == ["enter", "exit"]


def test_attributes_of_an_entered_outside_manager_are_read_as_eager():
    # entering deletes args/kwds/func; the real object keeps them until the graph's effects are replayed
    def in_with(x, ctx):
        with ctx as y:
            gone = not hasattr(ctx, "args")
        return x + y, gone

    def by_calls(x, ctx):
        y = ctx.__enter__()
        gone = not hasattr(ctx, "kwds")
        ctx.__exit__(None, None, None)
        return x * y, gone, inspect.getgeneratorstate(ctx.gen)

    for fn in (in_with, by_calls):
        compiled = framejit.compile(fn)
        for n in (2, 3):
            x = torch.randn(n)
            eager_log, compiled_log = [], []
            eager_cm, compiled_cm = logged(x, eager_log), logged(x.clone(), compiled_log)
            expected = fn(x, eager_cm)
            assert expected[1] is True
            assert_same(compiled(x.clone(), compiled_cm), expected)  # before: gone was False
            assert compiled_log == eager_log == ["enter", "exit"]
            assert _state(compiled_cm) == _state(eager_cm)
