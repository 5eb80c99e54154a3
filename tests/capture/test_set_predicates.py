"""isdisjoint/issubset/issuperset on sets whose hash-table layout the trace cannot reproduce answer from
their elements (a bool has no order; NOTE [Set order]), with no break."""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend

X = {"apple", "banana", "cherry"}
Y = {"google", "microsoft", "apple"}
Z = {f"a{i}" for i in range(20)} - {"a3", "a7"}


def fn(a):
    r = a
    if X.isdisjoint(Y):
        r = r + 1
    if Y.issubset(Z) or X.issuperset({"apple"}):
        r = r * 2
    if Z.issuperset({"a1"}) and not Z.isdisjoint({"a3", "a4"}):
        r = r - 5
    return r, Y.isdisjoint(Z), {"a1"}.issubset(Z)


def test_set_predicates_on_outside_sets_follow_changes():
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    changes = [lambda: None, lambda: Y.discard("apple"), lambda: X.discard("apple"), lambda: Z.discard("a4"),
               lambda: Z.add("apple")]
    for change in changes:
        change()
        a = torch.randn(2)
        expected = fn(a)
        got = compiled(a)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    assert 1 <= backend.graph_count <= len(changes)
