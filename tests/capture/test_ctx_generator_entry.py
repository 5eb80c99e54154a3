"""@contextmanager managers with a graph break in their generator, inside and around ExitStack (issue 11:
context managers), differential (eager vs compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Generator managers live from their entry] (framejit/capture/generator_ctx.py): a manager made in the
trace and not entered yet is rebuilt at a break, so a break in its generator moves before the instruction that
enters it (before: the one that made it; inside `stack.enter_context(cm(x))` that left the enter_context call on
the stack and the rest of the frame ran as Python). NOTE [Reload before replay] (codegen.py): the `__self__` of
a bound method read from a container the frame then changes is loaded before the change is replayed (before:
an ExitStack from outside whose callback breaks raised IndexError "deque index out of range").
"""
from __future__ import annotations

import contextlib

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, call_capturing, run_differential, shifted


def exit_stack_of_generator_managers(x):
    x = x.sin()
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(shifted("a", x))
        b = stack.enter_context(shifted("b", x))
        y = a * b
    return y.cos()


def test_exit_stack_of_breaking_generator_managers_stays_captured():
    backend = run_differential(exit_stack_of_generator_managers, lambda seed: (torch.randn(3 + seed),),
                               fullgraph=False)
    assert backend.graph_count == 6  # sin | a * b | cos, per call (before: only sin was captured)


def with_generator_manager(x):
    y = x * 2
    with shifted("w", y) as z:
        z = z.relu()
    return z + y


def test_with_breaking_generator_manager():
    run_differential(with_generator_manager, lambda seed: (torch.randn(2 + seed),), fullgraph=False)


def with_stack_from_outside(x, stack):
    with stack:
        y = x * 2
    return y.cos()


def test_exit_stack_from_outside_whose_callback_breaks():
    compiled = framejit.compile(with_stack_from_outside, backend=CountingBackend())
    for n in (2, 3):
        results = []
        for fn in (with_stack_from_outside, compiled):
            stack = contextlib.ExitStack()
            stack.enter_context(shifted("outside", torch.zeros(1)))
            results.append(call_capturing(fn, (torch.ones(n), stack), {}))
            assert not stack._exit_callbacks
        (expected, expected_exc, expected_out), (actual, actual_exc, actual_out) = results
        assert actual_exc is expected_exc is None, actual
        assert actual_out == expected_out
        assert_same(actual, expected)


def made_before_entered_in_try(x):
    y = x * 2
    cm = shifted("t", y)
    w = y.sin()  # between making the manager and entering it: the same graph as `x * 2` now
    try:
        with cm as z:
            z = z.relu()
    finally:
        w = w + 1
    return z + w


def test_break_in_generator_moves_before_its_entry_not_its_creation():
    backend = run_differential(made_before_entered_in_try, lambda seed: (torch.randn(3 + seed),), fullgraph=False)
    assert backend.graph_count == 6  # x * 2, sin | relu | the adds, per call (before: 4 per call)
