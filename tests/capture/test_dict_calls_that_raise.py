"""A pop or setdefault that raises (a missing key, an unhashable key) and is caught leaves an outside
OrderedDict as eager leaves it, its underlying dict order included (NOTE [Calls that raise announce nothing]
in container_methods.py).

Before, the call announced its mutation before the key was checked; the announcement stayed without a
call, so the replay after the graph rewrote the whole OrderedDict with `clear(); update(final)`, and
`dict.keys(od)` (the order `dict.__iter__`, pickling and C code see) came out in the linked order
(review revAJ MED-1: eager [a, b, c], framejit [b, c, a]).
"""
from __future__ import annotations

import collections
import types

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

OD = collections.OrderedDict


def _od(first: str) -> OD:
    od = OD(a=1, b=2, c=3)
    od.move_to_end(first)  # the linked order differs from the underlying dict order
    return od


def _check(fn) -> None:
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i, (first, k) in enumerate((("a", "b"), ("b", "c"), ("c", "a"), ("a", "a"))):
        x = torch.full((2,), float(i))
        eager_od, jit_od = _od(first), _od(first)
        expected, actual = fn(x, eager_od, k), compiled(x, jit_od, k)
        assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:], (i, actual, expected)
        assert list(jit_od) == list(eager_od), i
        assert list(dict.keys(jit_od)) == list(dict.keys(eager_od)), i
        assert list(dict.values(jit_od)) == list(dict.values(eager_od)), i


def test_a_caught_pop_of_a_missing_key_leaves_both_orders():
    def f(x, od, k):
        try:
            od.pop("zz")
        except KeyError as e:
            r = repr(e)
        return x + 1, r

    def g(x, od, k):  # then a real reordering
        try:
            od.pop("zz")
        except KeyError:
            pass
        od.move_to_end(k)
        return x + 1, list(od)

    _check(f)
    _check(g)


def test_caught_unhashable_pop_and_setdefault_leave_both_orders():
    def f(x, od, k):
        try:
            od.pop([1])
        except TypeError as e:
            r = str(e)
        return x + 1, r

    def g(x, od, k):
        try:
            od.setdefault([1])
        except TypeError as e:
            r = str(e)
        od.move_to_end(k, last=False)
        return x + 1, r, list(od)

    _check(f)
    _check(g)


def test_pops_and_setdefaults_that_succeed_are_replayed():
    def f(x, od, k):
        v = od.pop(k)
        d = od.pop("zz", 7)
        s = od.setdefault(k, v * 10)
        od.setdefault("a", 0)
        return x + v + d + s, list(od)

    _check(f)


# NOTE [Receivers of unbound container methods]: review revAJ MED-2 and LOW
_BASE = {"a": 1, "b": 2}
_PROXY = types.MappingProxyType(_BASE)


@pytest.mark.parametrize("expr", ["dict.popitem(_PROXY)", "dict.pop(_PROXY, 'a')", "dict.clear(_PROXY)",
                                  "dict.update(_PROXY, c=3)", "dict.setdefault(_PROXY, 'z', 1)",
                                  "dict.__setitem__(_PROXY, 'a', 5)", "OD.move_to_end(_PROXY, 'a')",
                                  "OD.move_to_end(plain, 'a')", "OD.popitem(plain)", "set.union(frozenset(plain))",
                                  "od.move_to_end('a', True, 3)", "od.move_to_end('a', lst=False)"])
def test_unbound_methods_on_receivers_of_other_types_raise_eagers_type_error(expr):
    src = (f"def f(x, plain, od):\n    try:\n        r = {expr}\n    except TypeError as e:\n        r = str(e)\n"
           f"    return x + len(plain), r, list(od), list(dict.keys(od))\n")
    namespace = {"_PROXY": _PROXY, "OD": OD}
    exec(src, namespace)
    fn = namespace["f"]
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i in range(3):
        results = []
        for call in (fn, compiled):
            _BASE.clear()
            _BASE.update(a=1, b=2)
            plain, od = dict.fromkeys("abc"[:i + 1], i), _od("abc"[i])
            out = call(torch.full((2,), float(i)), plain, od)
            results.append((out[0].tolist(), *out[1:], dict(_BASE), plain, list(od), list(dict.keys(od))))
        assert results[0] == results[1], (i, results)
        assert "doesn't apply" in results[0][1] or "requires" in results[0][1] or "argument" in results[0][1]
