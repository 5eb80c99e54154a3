"""torch.utils._pytree.tree_map / tree_leaves inside compiled code (NOTE [pytree calls] in
capture/pytree_support.py): captured over dicts, OrderedDicts, lists, tuples and namedtuples with eager's
result types, order and leaves; registered node types, is_leaf and mismatched trees break with eager's
answers; a registration after the first call recompiles."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.utils._pytree as pytree

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks

Pair = collections.namedtuple("Pair", "a b")


def _same(got, want):
    assert_same(got, want)


def _tree(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {"b": [r(2), (r(1), 3)], "a": collections.OrderedDict(z=r(2), y=None), "p": Pair(r(3), "s")}


def _double(leaf):
    return leaf * 2 if isinstance(leaf, torch.Tensor) else leaf


def test_tree_map_over_nested_containers_is_one_graph():
    def f(tree):
        return pytree.tree_map(_double, tree)

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for seed in range(3):
            _same(cf(_tree(seed)), f(_tree(seed)))
    assert breaks == [] and be.graph_count == 1


def test_tree_map_with_a_second_tree_and_tree_leaves():
    def f(a, b):
        summed = pytree.tree_map(lambda x, y: x + y, a, b)
        return summed, pytree.tree_leaves(summed), len(pytree.tree_leaves(a))

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for _ in range(2):
            a = {"x": torch.randn(2), "y": [torch.randn(3), torch.randn(1)]}
            b = {"y": [torch.randn(3), torch.randn(1)], "x": torch.randn(2)}  # same keys, another order
            _same(cf(a, b), f(a, b))
    assert breaks == [] and be.graph_count == 1


class Box:
    def __init__(self, t):
        self.t = t


def test_a_type_registered_after_the_first_call_recompiles_and_is_a_node():
    def f(tree):
        return pytree.tree_map(lambda leaf: leaf if isinstance(leaf, Box) else leaf * 2, tree)

    cf = framejit.compile(f, backend="eager")
    box = Box(torch.randn(2))
    got, want = cf([box, torch.ones(1)]), f([box, torch.ones(1)])
    assert got[0] is box and want[0] is box  # a leaf: mapped to itself
    pytree.register_pytree_node(Box, lambda b: ([b.t], None), lambda values, ctx: Box(values[0]))
    try:
        want, got = f([box, torch.ones(1)]), cf([box, torch.ones(1)])
        assert type(got[0]) is Box and got[0] is not box  # now a node: rebuilt around the doubled tensor
        torch.testing.assert_close(got[0].t, want[0].t)
    finally:
        pytree._deregister_pytree_node(Box)


def test_is_leaf_and_mismatched_trees_keep_eager_behaviour():
    def with_is_leaf(tree):
        return pytree.tree_map(lambda t: t * 2, tree, is_leaf=lambda n: isinstance(n, tuple))

    def mismatched(a, b):
        return pytree.tree_map(lambda x, y: x + y, a, b)

    tree = [(1, 2), torch.ones(2)]
    cf = framejit.compile(with_is_leaf, backend="eager")
    _same(cf(tree), with_is_leaf(tree))
    a, b = [torch.ones(2), torch.ones(2)], [torch.ones(2)]
    with pytest.raises(ValueError) as eager:
        mismatched(a, b)
    with pytest.raises(ValueError) as compiled:
        framejit.compile(mismatched, backend="eager")(a, b)
    assert str(compiled.value) == str(eager.value)
