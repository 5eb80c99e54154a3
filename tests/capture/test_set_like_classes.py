"""Classes built on collections.abc (a MutableSet over a dict, a Mapping, a generic subclass used in casts) and
torch.utils._ordered_set.OrderedSet, traced like other Python classes: comparisons with plain sets, lists,
tuples and dicts (NOTE [Comparisons of Python classes] in capture/user_operators.py), `Cls[T]` of a
collections.abc subclass (NOTE [Typing subscripts are folded] in capture/typing_forms.py), and OrderedSet's
methods inlined (capture/values/builder.py, _INLINED_TORCH_PACKAGES). Every result is compared with the same
program run eagerly."""
from __future__ import annotations

from collections.abc import Mapping, MutableSet
from typing import TypeVar, cast

import torch

import framejit
from torch.utils._ordered_set import OrderedSet

T = TypeVar("T")


class KeySet(MutableSet):
    def __init__(self, items=()):
        self._keys = dict.fromkeys(items)

    def __contains__(self, item):
        return item in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def add(self, item):
        self._keys[item] = None

    def discard(self, item):
        self._keys.pop(item, None)


class TypedKeySet(KeySet, MutableSet[T]):
    def __or__(self, other):
        return cast(TypedKeySet[T], super().__or__(other))


class Table(Mapping):
    def __init__(self, rows):
        self._rows = dict(rows)

    def __getitem__(self, key):
        return self._rows[key]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)


class NoAnswer:
    def __eq__(self, other):
        return NotImplemented


SEEN = KeySet("pq")


def set_comparisons(x):
    s = KeySet("abc")
    flags = [s == {"a", "b", "c"}, s != {"a"}, s <= {"a", "b", "c", "d"}, s < {"a"},
             {"a", "b", "c"} == s, frozenset("ab") >= s, SEEN == {"p", "q"}]
    return x + sum(2 ** i * f for i, f in enumerate(flags))


def other_containers(x):
    t = Table({"k": 1})
    flags = [t == {"k": 1}, {"k": 1} == t, t != {"k": 2}, NoAnswer() == [1], NoAnswer() != (1,),
             [1] == NoAnswer()]
    return x + sum(2 ** i * f for i, f in enumerate(flags))


def generic_cast(x):
    both = TypedKeySet("ab") | TypedKeySet("bc")
    return x * len(both) + (both == {"a", "b", "c"})


def ordered_set_ops(x):
    p, q = OrderedSet("abc"), OrderedSet("bcd")
    joined = p | q
    common = p.intersection(q)
    rest = p - q
    copied = p.copy()
    copied.add("z")
    return (x * len(joined) + len(common) * 10 + len(rest) * 100 + (copied == {"a", "b", "c", "z"}) * 1000,
            list(joined), list(common))


def _check(fn, sizes=(2, 3, 2)):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in sizes:
        x = torch.randn(n)
        expected, got = fn(x), compiled(x)
        if isinstance(expected, tuple):
            assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:], fn.__name__
        else:
            assert torch.equal(got, expected), fn.__name__
    return framejit.explain(fn)(torch.randn(3))


def test_set_like_objects_compare_with_plain_containers_without_a_break():
    for fn in (set_comparisons, other_containers):
        report = _check(fn)
        assert report.graph_count == 1 and report.graph_break_count == 0, (fn.__name__, report)


def test_an_outside_set_like_object_changed_between_calls():
    compiled = framejit.compile(set_comparisons, backend="eager")
    x = torch.zeros(2)
    try:
        for extra in (None, "r", None):
            if extra is not None:
                SEEN.add(extra)
            assert torch.equal(compiled(x), set_comparisons(x))
            if extra is not None:
                SEEN.discard(extra)
    finally:
        SEEN.discard("r")


def test_cast_to_a_collections_abc_generic_subclass():
    report = _check(generic_cast)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_ordered_set_methods_are_inlined():
    report = _check(ordered_set_ops)
    assert report.graph_count == 1 and report.graph_break_count == 0
    compiled = framejit.compile(ordered_set_ops, backend="eager", fullgraph=True)
    x = torch.randn(4)
    assert torch.equal(compiled(x)[0], ordered_set_ops(x)[0])


def test_text_of_ordered_sets_and_optimizers_follows_their_state():
    outside = OrderedSet([1, 2])
    lin = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def texts(x):
        made = OrderedSet([x.shape[0], 7])
        return x + len(f"{outside}"), repr(made), str(opt)

    framejit.reset()
    compiled = framejit.compile(texts, backend="eager")
    for n, lr, extra in ((2, 0.1, None), (3, 0.25, 9), (2, 0.1, None)):
        opt.param_groups[0]["lr"] = lr
        if extra is not None:
            outside.add(extra)
        x = torch.randn(n)
        expected, got = texts(x), compiled(x)
        assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]
        outside.discard(9)
    report = framejit.explain(texts)(torch.randn(3))
    assert report.graph_count == 1 and report.graph_break_count == 0


class Joined:
    def __init__(self, items):
        self.items = list(items)

    def __add__(self, other):
        return Joined(self.items + other) if isinstance(other, list) else NotImplemented

    def __radd__(self, other):
        return NotImplemented


def in_place_with_plain_containers(x):
    kept = OrderedSet("abc")
    kept -= ["a"]
    kept |= ("z",)
    kept &= {"b", "c", "z"}
    mine = KeySet("ab")
    both = mine - {"a"}, mine | {"q"}, {"a", "q"} - mine, {"q"} | mine
    try:
        kept -= [[]]  # discard([]) raises TypeError inside __isub__
    except TypeError:
        x = x - 1
    return x + len(kept) + sum(len(b) for b in both) + len((Joined([1]) + [2, 3]).items), list(kept)


def concatenation_left_to_python(x):
    try:
        [1] + Joined([2])
    except TypeError as e:
        return x - len(str(e))
    return x


def test_operators_with_plain_containers():
    report = _check(in_place_with_plain_containers)
    assert report.graph_count == 1 and report.graph_break_count == 0
    report = _check(concatenation_left_to_python)
    assert report.graph_break_count == 1
