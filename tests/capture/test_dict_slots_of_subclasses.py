"""dict's and OrderedDict's slots called as methods on dict subclasses, OrderedDicts and defaultdicts (issue 11,
PyTorch's test_dicts.py): `od.__eq__(p)`, `dict.__eq__(od1, od2)`, `sd.__ne__(e)`, `sd.__or__(e)`,
`dict.__or__(od, e)`, `OrderedDict.__or__(p, q)`, `sd.__iter__()`, `od.__iter__()`, `dd.__ior__(pairs)`
(NOTE [Dict slots of subclasses], dict_slots.py).

Each was a graph break ("[unsupported_attribute] dict.__eq__", "dict.__ior__", ...) that ran the rest of the
frame as Python. The programs run eagerly and compiled on fresh inputs with changing shapes and Python values,
with no break and no frame run eagerly; the cases CPython answers from the underlying dict of an OrderedDict
(`dict.__iter__(od)` after move_to_end, `dict.__ior__(od, e)` growing it past the linked order) stay breaks
and equal eager.
"""
from __future__ import annotations

import collections

import torch

import framejit
from tests.capture.test_idiom_sweep5 import _run  # eager vs compiled on fresh arguments, break records
from tests.helpers import CountingBackend

_OD = collections.OrderedDict


class _Sub(dict):
    pass


class _ODSub(_OD):
    pass


def test_eq_and_ne_slots_follow_each_owner():
    def f(x, a, b):
        od1, od2, od3 = _OD(a=a, b=b), _OD(b=b, a=a), _ODSub(a=a, b=b)
        s1, s2 = _Sub(a=a, b=b), _Sub(a=a, b=b + 1)
        answers = (od1.__eq__(od2), od1.__ne__(od2), dict.__eq__(od1, od2), _OD.__eq__(od1, od3),
                   od3.__ne__(od1), s1.__eq__(s2), s1.__ne__(s2), dict.__ne__(s1, od1), s1.__eq__(od1),
                   od1.__eq__({"b": b, "a": a}), s1.__eq__([a]), od1.__ne__(3), dict.__eq__(od3, s1))
        return x * sum(1 for v in answers if v is True), answers

    backend, records = _run(f, lambda i: (torch.randn(i + 2), i, 2 - i))
    assert not records and 1 <= len(backend.graphs) <= 3  # a and b are guarded constants


def test_or_and_iter_slots_keep_each_result_type_and_order():
    def f(x, k):
        od, sd = _OD(a=x, b=k), _Sub(a=1, b=k)
        od.move_to_end("a")
        first = dict.__or__(od, {k: 3})  # an exact dict, in od's (linked) order
        second = od.__or__(sd)  # an OrderedDict
        third = _OD.__or__(_ODSub(q=k), od)  # type of the left operand
        fourth, fifth = sd.__or__({"c": x}), dict.__or__(sd, od)
        it = sd.__iter__()
        return (x + len(first), first, type(first), list(first), second, type(second), list(second), third,
                type(third), fourth, type(fourth), fifth, type(fifth), next(it), list(od.__iter__()),
                od.__or__(5), sd.__or__([1]))

    backend, records = _run(f, lambda i: (torch.randn(i + 2), f"k{i}"))
    assert not records and 1 <= len(backend.graphs) <= 3  # k and i are guarded constants


def test_ior_slot_of_defaultdicts_and_subclasses_updates_in_place():
    def f(x, k):
        dd = collections.defaultdict(int, {1: 1})
        dd |= [(0, "zero"), (1, "one")]
        result = dd.__ior__({3: k})
        sd = _Sub(a=1)
        back = dict.__ior__(sd, [("b", k)])
        od = _OD(a=1)
        od_back = od.__ior__({"z": x})
        return (x + dd[4], result is dd, dd.default_factory is int, type(dd), dict(dd), list(dd), back is sd,
                sd, type(sd), od_back is od, list(od), od["z"])

    backend, records = _run(f, lambda i: (torch.randn(i + 2), i))
    assert not records and 1 <= len(backend.graphs) <= 3  # k and i are guarded constants


def test_underlying_dict_slots_of_ordered_dicts_stay_breaks():
    def f(x, od):
        keys = list(dict.__iter__(od)), list(dict.keys(od)), list(dict.items(od))  # the underlying order: a, b
        grown = dict.__ior__(_OD(a=1), {"c": 3})  # "c" is past the linked list: not iterated
        return x + 1, keys, list(od), list(grown), len(grown), grown == {"a": 1, "c": 3}

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for i in range(2):
        x, od = torch.randn(i + 2), _OD(a=1, b=2)
        od.move_to_end("a")
        expected, got = f(x, od), compiled(x, od)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] == ((["a", "b"], ["a", "b"], [("a", 1), ("b", 2)]), ["b", "a"], ["a"], 2,
                                           True)
