"""Resume functions of frames whose function is a closure (NOTE [Resume functions of closures] in
convert.py): two function objects of one code with different cells each resume in their own closure.

Differential: the compiled function is called several times; each call makes new closures over a new
list, and every list must receive exactly the appends eager makes into it (before the fix, calls after
the first appended into the first call's list: the resume function kept the first closure's cells).
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(framejit.config, "cache_enabled", False)
    framejit.reset()
    yield
    framejit.reset()


@contextlib.contextmanager
def plain_cm():
    yield


@contextlib.contextmanager
def tagged(log, tag):
    log.append(("enter", tag))
    try:
        yield tag
    finally:
        log.append(("exit", tag))


def _run_calls(fn, make_x, calls=4):
    compiled = framejit.compile(fn, backend=CountingBackend())
    eager_logs, compiled_logs = [], []
    for i in range(calls):
        x = make_x(i)
        eager_logs.append([])
        compiled_logs.append([])
        expected = fn(x, eager_logs[-1])
        actual = compiled(x, compiled_logs[-1])
        assert_same(actual, expected)
        assert compiled_logs == eager_logs, f"call {i}"


def test_break_inside_a_function_decorated_by_a_generator_manager():
    def fn(x, log):
        @plain_cm()
        def g(v):
            log.append(v.shape[0])
            torch._dynamo.graph_break()
            return v + 1

        return g(x) * 2

    _run_calls(fn, lambda i: torch.randn(3))


def test_decorator_manager_with_arguments_and_state_after_the_break():
    def fn(x, log):
        scale = x.shape[0]

        @tagged(log, "t")
        def g(v):
            log.append("before")
            torch._dynamo.graph_break()
            log.append("after")
            return v * scale

        return g(x).sum()

    _run_calls(fn, lambda i: torch.randn(2 + i % 2))
