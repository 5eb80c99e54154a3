"""contextlib context managers inside the compiled region: `@contextmanager` generators, `nullcontext`,
and the raw grad-mode switch hand-written managers call.

Differential: eager vs compiled on fresh inputs, several calls; side effects on an input list and the
torch global state after the call are compared (tests/helpers.py), graph counts asserted.
"""
from __future__ import annotations

import contextlib

import torch

from tests.helpers import run_differential


def _grad_x(seed):
    return (torch.randn(3, requires_grad=True),)


@contextlib.contextmanager
def computed(x):
    try:
        yield x.sin()
    finally:
        pass


@contextlib.contextmanager
def grad_mode(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        yield
    finally:
        torch.set_default_dtype(old)


class HandWritten:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


def test_yielded_value_is_bound():
    def fn(x):
        with computed(x) as y:
            return y.cos()
    assert run_differential(fn, _grad_x).graph_count == 1


def test_generator_manager_switches_grad_mode():
    def fn(x):
        with grad_mode(False):
            y = x * 2
        return y + 1, y.requires_grad
    assert run_differential(fn, _grad_x).graph_count == 1


def test_nested_generator_managers_and_hand_written_one():
    def fn(x):
        with grad_mode(True):
            x = x + 1
            with grad_mode(False):
                z = x * 1.5
            with HandWritten(False):
                w = x * 3
            x = torch.relu(x)
        return x - 1, z, w
    assert run_differential(fn, _grad_x).graph_count == 1
    with torch.no_grad():
        assert run_differential(fn, _grad_x).graph_count == 1


def test_setup_and_finally_run_in_order_with_the_block():
    def fn(x, log):
        @contextlib.contextmanager
        def logged(v):
            log.append("enter")
            try:
                yield v + 1
            finally:
                log.append("exit")

        with logged(x) as y:
            log.append(len(log))
            z = y * 3
        log.append("after")
        return z
    assert run_differential(fn, lambda seed: (torch.randn(3), [])).graph_count == 1


def test_explicit_enter_and_exit_calls():
    def fn(x, log):
        @contextlib.contextmanager
        def logged():
            log.append(1)
            yield x.cos()
            log.append(2)

        cm = logged()
        y = cm.__enter__()
        log.append(3)
        cm.__exit__(None, None, None)
        return y
    assert run_differential(fn, lambda seed: (torch.randn(3), [])).graph_count == 1


def test_generator_that_yields_twice_raises_like_eager():
    @contextlib.contextmanager
    def twice():
        yield
        yield

    def fn(x):
        with twice():
            x = x + 1
        return x
    run_differential(fn, lambda seed: (torch.randn(3),), fullgraph=False)


def test_manager_setting_default_dtype_is_not_traced_but_correct():
    def fn(x):
        with default_dtype(torch.float64):
            y = torch.tensor([3.0, 4.0])
        return x + 1, y.dtype
    run_differential(fn, lambda seed: (torch.randn(2),), fullgraph=False)  # set_default_dtype breaks


def test_break_inside_a_generator_manager_block():
    def fn(x, log):
        @contextlib.contextmanager
        def logged():
            log.append(x.sum().item() > 100)
            try:
                yield x.tan()
            finally:
                log.append("exit")

        y = x.sin()
        with logged() as z:
            print("inside")
            y = y + z
        return y + x.cos()
    # the break moves before the call that makes the manager: `y = x.sin()` is captured; the real manager
    # is entered as Python (contextlib's __enter__ is not traced) and the block resumes captured after the
    # print (add), as does the code after the block (cos, add): NOTE [Breaks at BEFORE_WITH]
    backend = run_differential(fn, lambda seed: (torch.randn(2), []), fullgraph=False)
    assert [backend.op_count(i) for i in range(backend.graph_count)] == [1, 1, 2]


def test_break_inside_the_generator_itself():
    def fn(x):
        @contextlib.contextmanager
        def breaking(v):
            try:
                print("in the generator")
                yield v.cos()
            finally:
                pass

        y = x.sin()
        with breaking(x) as z:
            y = y + z.neg()
        return y + y.tan()
    # sin; the block, resumed inside the real manager (neg, add); after it (tan, add)
    backend = run_differential(fn, lambda seed: (torch.rand(2),), fullgraph=False)
    assert [backend.op_count(i) for i in range(backend.graph_count)] == [1, 2, 2]


def test_nullcontext_captured_whole():
    def fn(x):
        with contextlib.nullcontext(x) as y:
            z = y.sin()
        with contextlib.nullcontext():
            z = z + 1
        return z
    assert run_differential(fn, lambda seed: (torch.randn(3),)).graph_count == 1


def test_nullcontext_with_a_break_inside():
    def fn(x):
        with contextlib.nullcontext():
            y = x.sin()
            print("break")
            y = y + 1
        return y
    assert run_differential(fn, lambda seed: (torch.randn(3),), fullgraph=False).graph_count == 2


def test_nullcontext_created_before_a_break():
    def fn(x):
        x = x + 1
        ctx = contextlib.nullcontext()
        print("break")
        with ctx:
            x = x + 1
        return x
    assert run_differential(fn, lambda seed: (torch.randn(3),), fullgraph=False).graph_count == 2


# ---- torch grad-mode managers used as decorators (NOTE [Context managers as decorators]) ---------------
def _requires_grad_x(seed):
    return (torch.zeros(4, requires_grad=True) + seed,)


def test_grad_mode_decorators_made_inside():
    def fn(x):
        @torch.no_grad()
        def no_grad_fn(v):
            return (v + 1) * 2

        def plain(v):
            return v.sin()

        with torch.no_grad():
            enabled = torch.enable_grad()(plain)
            disabled = torch.no_grad(plain)
            outside = torch.is_grad_enabled()
        return no_grad_fn(x), enabled(x), disabled(x), outside, torch.is_grad_enabled()
    assert run_differential(fn, _requires_grad_x).graph_count == 1


def test_set_grad_enabled_decorator_restores_the_mode_at_decoration():
    def fn(x):
        with torch.set_grad_enabled(True):
            @torch.set_grad_enabled(False)
            def inner(v):
                return v.cos(), torch.is_grad_enabled()
            during = torch.is_grad_enabled()
        return inner(x), during, torch.is_grad_enabled()
    assert run_differential(fn, _requires_grad_x).graph_count == 1


def test_grad_mode_manager_made_before_a_break_and_entered_after():
    def fn(x):
        x = x * 2
        torch.set_grad_enabled(False)
        ctx = torch.set_grad_enabled(True)
        off = torch.no_grad()
        print("break")
        with ctx:
            y = x + 1
        with off:
            z = x + 2
        torch.set_grad_enabled(True)
        return y, z, torch.is_grad_enabled()
    assert run_differential(fn, _grad_x, fullgraph=False).graph_count == 2
