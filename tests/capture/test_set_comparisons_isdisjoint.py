"""Set idioms from PyTorch's test_sets.py (issue 11): `s.isdisjoint(iterator)` stops drawing where eager stops
(NOTE [isdisjoint over an iterator], sequence_protocol.py); `object.__eq__`/`object.__ne__` called directly
(NOTE [object's comparison slots called directly], user_operators.py); a user set class (collections.abc.Set,
torch's OrderedSet) compared with a set or frozenset subclass (NOTE [Comparisons of Python classes]).

Each was a graph break that ran the frame's rest as Python ("the generator ... has effects and is drawn all at
once", "call of object.__ne__", "comparison eq of New(OrderedSet) and SetSubclass"). Each program runs eagerly
and compiled on fresh inputs of changing shape and Python values, with no break and no frame run eagerly.
"""
from __future__ import annotations

import torch
from torch.utils._ordered_set import OrderedSet

import framejit
from tests.capture.test_idiom_sweep5 import _run  # eager vs compiled on fresh arguments, break records


class _SetSub(set):
    pass


class _FrozenSub(frozenset):
    pass


class _Key:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, _Key) and self.v == other.v

    __hash__ = None


class _Plain:
    pass


def test_isdisjoint_draws_a_generator_only_until_the_first_common_key():
    def f(x, s, stop):
        steps = []

        def gen():
            for k in range(stop):
                steps.append(k)
                yield k

        g = gen()
        answer = s.isdisjoint(g)
        left = list(g)  # the iterator is left after the key that answered
        return x * (len(steps) + 1), answer, steps, left, frozenset({9}).isdisjoint(map(abs, [-9, 1]))

    sets = [{2, 4}, {7}, {0, 1}]
    backend, records = _run(f, lambda i: (torch.randn(i + 2), sets[i], 3 + i))
    assert not records and len(backend.graphs) >= 1


def test_isdisjoint_of_an_unhashable_key_raises_type_error():
    def f(x, k):
        try:
            {1, 2}.isdisjoint(iter([k, [k]]))
        except TypeError as e:
            return x + 1, str(e)
        return x, None

    backend, records = _run(f, lambda i: (torch.randn(i + 1), 5 + i))
    assert not records


def test_object_comparison_slots_called_directly():
    def f(x, v):
        a, b, c = _Key(v), _Key(v), _Key(v + 1)
        p, q = _Plain(), _Plain()
        r = (object.__eq__(a, b), object.__eq__(a, a), object.__ne__(a, b), object.__ne__(a, c),
             _Key.__ne__(a, c), object.__ne__(p, q), object.__ne__(p, p), object.__lt__(p, q))
        return x + v, r

    backend, records = _run(f, lambda i: (torch.randn(i + 1), i))
    assert not records and len(backend.graphs) >= 1


def test_object_comparison_slot_with_wrong_arity_raises_as_eager():
    def f(x):
        try:
            object.__ne__(_Plain())
        except TypeError as e:
            return x + 1, str(e)
        return x, None

    backend, records = _run(f, lambda i: (torch.randn(i + 1),))
    assert not records


def test_user_set_compared_with_set_subclasses():
    def f(x, text):
        p = OrderedSet(text)
        r = (p == _SetSub("abc"), _SetSub("abc") == p, p == _FrozenSub("abc"), p != _SetSub("abd"),
             [p != C("abe") for C in (set, frozenset, _SetSub, dict.fromkeys, str, list, tuple)])
        return x * len(p), r

    backend, records = _run(f, lambda i: (torch.randn(i + 1), ["abc", "abe", "xy"][i]))
    assert not records


def test_set_subclass_given_eq_after_compiling_is_seen():
    class Sub(set):
        pass

    def f(x):
        return x + 1, Sub("ab") == OrderedSet("ab")

    compiled = framejit.compile(f)
    assert compiled(torch.ones(1))[1] is True
    Sub.__eq__ = lambda self, other: "own"
    try:
        assert compiled(torch.ones(2))[1] == f(torch.ones(2))[1] == "own"
    finally:
        del Sub.__eq__
    assert compiled(torch.ones(3))[1] is True


def test_isdisjoint_without_an_argument_raises_type_error():
    def f(x, n):
        try:
            set(range(n)).isdisjoint()
        except TypeError as e:
            return x + 1, str(e)
        return x, None

    backend, records = _run(f, lambda i: (torch.randn(i + 1), i + 1))
    assert not records


def test_an_exact_frozenset_is_its_own_copy():
    def f(x, text):
        p, q = frozenset(text), _FrozenSub(text)
        c = q.copy()
        return x * len(p), p.copy() is p, frozenset.copy(p) is p, c is q, type(c), c == q, len(p.copy())

    backend, records = _run(f, lambda i: (torch.randn(i + 1), ["abc", "xy", "q"][i]))
    assert not records
