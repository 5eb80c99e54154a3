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
