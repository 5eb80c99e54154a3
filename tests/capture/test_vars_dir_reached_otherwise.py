"""`vars`/`dir` reaching the frame other than by a call with no arguments right after the load (`vars.__call__()`,
a name bound to `vars`, `operator.call(dir)`) see the user's locals, as eager's (NOTE [vars() and dir() reached
otherwise], capture/frame_locals.py); `vars(obj)` still reads `obj` only and keeps the frame captured."""
from __future__ import annotations

import operator
import types

import pytest
import torch

import framejit
from framejit.api import stats


def vars_dunder_call(x, n):
    y = x * n
    return y + 1, sorted(vars.__call__())


def vars_bound_to_a_name(x, n):
    y = x + n
    read = vars
    return y * 2, sorted(read())


def dir_through_operator_call(x, n):
    y = x - n
    return y, operator.call(dir)


_NS = types.SimpleNamespace(a=1, b=2)


def vars_of_an_object(x, n):
    return x * n, sorted(vars(_NS)), dir(torch.nn.Identity)


def vars_of_a_call_result(x, n):
    return x * n, sorted(vars(types.SimpleNamespace(a=n))), sorted(vars(_ns(n)))


def _ns(n):
    return types.SimpleNamespace(b=n)


def vars_star_empty(x, a):
    y = x * 2
    return y, sorted(vars(*a))


def dir_star_empty(x, a):
    y = x + 1
    return y, dir(*a)


def vars_double_star_empty(x, kw):
    y = x - 1
    return y, sorted(vars(**kw))


def vars_star_then_print_break(x, a):
    y = x * 3
    print("", end="")
    z = y + 1
    return z, sorted(vars(*a))


@pytest.mark.parametrize("fn", [vars_dunder_call, vars_bound_to_a_name, dir_through_operator_call])
def test_locals_read_through_vars_or_dir_as_eager(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n, size in ((1, 3), (2, 3), (3, 5)):
        x = torch.randn(size)
        expected, actual = fn(x, n), compiled(x, n)
        assert torch.equal(actual[0], expected[0])
        assert actual[1] == expected[1]


def test_vars_of_an_object_keeps_the_frame_captured():
    framejit.reset()
    compiled = framejit.compile(vars_of_an_object, backend="eager")
    before = stats()
    for n in (1, 2):
        x = torch.randn(4)
        expected, actual = vars_of_an_object(x, n), compiled(x, n)
        assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
    after = stats()
    assert after["eager_frames"] == before["eager_frames"] and after["graphs"] > before["graphs"]


@pytest.mark.parametrize("fn", [vars_star_empty, dir_star_empty, vars_double_star_empty, vars_star_then_print_break])
def test_vars_and_dir_with_empty_star_arguments_read_the_users_locals(fn):
    # NOTE [vars(*a) may pass nothing]: the load after `vars` is a star argument; an empty one reads the frame
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    empty = {} if fn is vars_double_star_empty else ()
    for size in (3, 3, 5):
        x = torch.randn(size)
        expected, actual = fn(x, empty), compiled(x, empty)
        assert torch.equal(actual[0], expected[0])
        assert actual[1] == expected[1]
    if fn is not vars_double_star_empty:  # a star argument naming an object reads that object, as eager
        x = torch.randn(3)
        expected, actual = fn(x, (_NS,)), compiled(x, (_NS,))
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1]


def test_vars_of_call_results_keeps_the_frame_captured():
    framejit.reset()
    compiled = framejit.compile(vars_of_a_call_result, backend="eager")
    before = stats()
    for n in (1, 2):
        x = torch.randn(4)
        expected, actual = vars_of_a_call_result(x, n), compiled(x, n)
        assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:]
    after = stats()
    assert after["eager_frames"] == before["eager_frames"] and after["graphs"] > before["graphs"]
