"""itertools building blocks, `sorted(key=)`, `n * [x]`, default `==` of plain objects and a tensor's
`__class__`, inside the compiled region: differential against eager, graph counts asserted."""
from __future__ import annotations

import itertools

import torch

from tests.helpers import run_differential


def _two(seed):
    return (torch.randn(3), torch.randn(3))


class Plain:
    a = 1


class Equal:
    def __eq__(self, other):
        return True


def test_itertools_islice_combinations_zip_longest_chain_from_iterable():
    def fn(a, b):
        first, second = [a + 1, a + 2], [a + 3, a + 4]
        p, q = list(itertools.islice(itertools.chain(first, second), 1, 3))
        c = next(itertools.islice(first, 1, None))
        every_other = list(itertools.islice([a, b, a, b, a], 0, None, 2))
        combs = [torch.ones(size) for size in itertools.combinations((1, 2, 3), 2)]
        perms = list(itertools.permutations("ab"))
        longest = list(itertools.zip_longest([1, 2, 3], ["a"], [b], fillvalue=None))
        total = a
        for x in itertools.chain.from_iterable([[a, b], [1, 2]]):
            total = total + x
        return p - q / c, len(every_other), combs, perms, longest, total
    assert run_differential(fn, _two).graph_count == 1


def test_islice_bad_arguments_raise_like_eager():
    def fn(a, b):
        return list(itertools.islice([a, b], -1))
    run_differential(fn, _two, fullgraph=False)


def test_sorted_with_key_and_repeat_of_lists():
    def fn(a, b):
        rows = [("john", "A", 8), ("jane", "B", 5), ("dave", "B", 10)]
        ordered = sorted([(a, 2), (b, 1)], key=lambda pair: pair[1])
        return (sorted(rows, key=lambda r: r[2]), sorted(rows, key=lambda r: r[2], reverse=True),
                ordered[0][0] * 2, sum(4 * [a]), 2 * (b,), [a] * 2)
    assert run_differential(fn, _two).graph_count == 1


def test_default_equality_is_identity():
    def fn(a, b):
        v = a + b
        if Plain() == None:  # noqa: E711
            return -1
        if Plain() != None:  # noqa: E711
            v = v.sin()
        p = Plain()
        return v, Plain() == Plain(), p == p, p != p, Plain() is Plain()
    assert run_differential(fn, _two).graph_count == 1


def test_user_equality_is_still_inlined_or_broken_never_guessed():
    def fn(a, b):
        return Equal() == Equal(), a + 1
    run_differential(fn, _two, fullgraph=False)


def test_tensor_class_name():
    def fn(a, b):
        name = f"{a.__class__.__name__} foo"
        if name.startswith("Tensor"):
            return a + 1
        return a - 1
    assert run_differential(fn, _two).graph_count == 1
