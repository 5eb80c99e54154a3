"""Adversarial differential programs (issue 12, red team): each runs eager and compiled on separate but
equal state, changes the inputs and that state between calls, and compares results, exceptions, output
and the state left behind."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


# ---- list iterators from outside (NOTE [Iterators from outside]) --------------------------------------

def _take_two(x, it):
    a = next(it)
    b = next(it)
    return x * a + b


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_next_on_an_argument_iterator_advances_it(backend):
    # next(it) on a list iterator passed in advanced only the traced copy: the caller's iterator still
    # yielded [1, 2, 3, 4, 5] after the compiled call (eager leaves [3, 4, 5]).
    counting = CountingBackend() if backend == "eager" else backend
    compiled = framejit.compile(_take_two, backend=counting)
    for i, items in enumerate([[1, 2, 3, 4, 5], [2, 3, 4, 5], [7, 8], [1, 2, 3, 4, 5]]):
        x = torch.randn(i + 1)
        it_e, it_c = iter(items), iter(list(items))
        assert_same(compiled(x, it_c), _take_two(x, it_e))
        assert list(it_c) == list(it_e), i
    if backend == "eager":
        assert counting.graph_count >= 1


def _loop_until_three(x, it):
    for v in it:
        x = x + v
        print("v", v)  # a graph break inside the loop: the rest of the loop runs in a resume function
        if v == 3:
            break
    return x


def test_for_loop_over_an_argument_iterator_with_a_break(capsys):
    compiled = framejit.compile(_loop_until_three, backend="eager")
    for i, items in enumerate([[1, 2, 3, 4, 5], [2, 3, 4, 5], [3, 9], [4, 5]]):
        x = torch.randn(2)
        it_e, it_c = iter(items), iter(list(items))
        expected = _loop_until_three(x, it_e)
        printed = capsys.readouterr().out
        assert_same(compiled(x, it_c), expected)
        assert capsys.readouterr().out == printed
        assert list(it_c) == list(it_e), i


def _exhaust_then_grow(x, it, items):
    first = list(it)
    items.append(9)  # an exhausted list iterator stays exhausted in CPython
    return x * len(first), list(it), next(it, "end")


def test_exhausted_list_iterator_stays_exhausted():
    compiled = framejit.compile(_exhaust_then_grow, backend="eager")
    for i in range(4):
        x = torch.randn(i + 1)
        l_e, l_c = [1, 2, 3][: i % 3], [1, 2, 3][: i % 3]
        it_e, it_c = iter(l_e), iter(l_c)
        assert_same(compiled(x, it_c, l_c), _exhaust_then_grow(x, it_e, l_e))
        assert l_c == l_e
        l_e.append(10), l_c.append(10)
        assert list(it_c) == list(it_e) == []


def _local_exhaust(x, items):
    it = iter(items)
    first = list(it)
    items.append(5)
    return x * len(first), list(it), sum(1 for _ in it)


def test_local_iterator_exhausted_then_list_grows():
    compiled = framejit.compile(_local_exhaust, backend="eager")
    for i in range(4):
        x = torch.randn(2)
        l_e, l_c = [1, 2, 3][:i], [1, 2, 3][:i]
        assert_same(compiled(x, l_c), _local_exhaust(x, l_e))
        assert l_c == l_e
