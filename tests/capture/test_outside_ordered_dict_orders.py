"""An OrderedDict from outside the frame (an argument, a global LRU cache, one nested in a dict or held by an
object) that the frame mutates keeps CPython's two orders after the compiled call (NOTE [Reordering calls
replayed on OrderedDicts from outside] in mappings.py).

CPython keeps two orders in an OrderedDict: its linked list (what `od` iterates) and its underlying dict (what
dict's own `keys`/`items`/`values`/`__iter__` read); move_to_end changes only the first. Before, a mutated
OrderedDict from outside was replayed as `od.clear(); od.update(final contents)` after the graph, which made
the underlying order equal to the linked one: `dict.keys(od)` after the call (or after a break inside it) read
['c', 'a', 'b'] where eager reads ['a', 'b', 'c']. Now move_to_end and popitem are replayed as the calls the
program made, on the real object, like every other logged mutation.
"""
from __future__ import annotations

import collections

import torch

import framejit
from tests.helpers import CountingBackend

_OD = collections.OrderedDict


def _orders(od):
    return list(od), list(dict.keys(od)), [v.tolist() if torch.is_tensor(v) else v for v in dict.values(od)]


def _make(i):
    """An OrderedDict whose linked order and underlying order differ (both depend on i)."""
    od = _OD(a=torch.ones(1) * i, b=torch.ones(1), c=torch.ones(1) * 2)
    od.move_to_end("a")
    od.move_to_end("b", last=False)
    if i % 2:
        od.move_to_end("c", last=False)
    return od


def _differential(fn, calls=5):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for i in range(calls):
        x = torch.randn(2) + i
        od_eager, od_compiled = _make(i), _make(i)
        expected, got = fn(x, od_eager, "abc"[i % 3]), compiled(x, od_compiled, "abc"[i % 3])
        assert torch.equal(expected[0], got[0]), i
        assert expected[1:] == got[1:], (i, expected, got)
        assert _orders(od_eager) == _orders(od_compiled), (i, _orders(od_eager), _orders(od_compiled))
    return backend


def test_reordering_an_ordered_dict_from_outside_keeps_its_underlying_order():
    def f(x, od, k):
        od.move_to_end(k)
        od.move_to_end("b", last=False)
        return x + 1, list(od)

    assert _differential(f).graph_count >= 1


def test_popitem_and_reinsertion_into_an_ordered_dict_from_outside():
    def f(x, od, k):
        key, value = od.popitem(last=False)
        od[key] = value + x.sum()
        od.popitem()
        od.setdefault("q", 5)
        return x * 2, key

    _differential(f)


def test_a_raising_move_to_end_or_update_leaves_both_orders():
    def f(x, od, k):
        try:
            od.move_to_end("missing")
        except KeyError:
            pass
        try:
            od.update([(1, 2, 3)])
        except ValueError:
            pass
        od.move_to_end(k, last=False)
        return x + 1, None

    _differential(f)


def test_a_break_between_reorderings_of_an_ordered_dict():
    def f(x, od, k):
        od.move_to_end(k)
        print("break")
        od.popitem(last=False)
        return x + 1, list(dict.keys(od))

    def g(x, n):  # made in the frame, reordered on both sides of a break
        od = _OD(a=x, b=x * 2, c=x * 3)
        od.move_to_end("a")
        print("break")
        od.move_to_end("c", last=False)
        od.popitem(last=False)
        return list(dict.keys(od)), list(od), [v.tolist() for v in dict.values(od)]

    _differential(f)
    compiled = framejit.compile(g)
    for n in range(3):
        x = torch.randn(2)
        assert g(x, n) == compiled(x, n), n


CACHE = _OD()


def test_a_global_lru_cache_keeps_both_orders():
    def f(x, k):
        if k in CACHE:
            CACHE.move_to_end(k)
        else:
            CACHE[k] = x * len(CACHE)
            if len(CACHE) > 3:
                CACHE.popitem(last=False)
        return x + 1

    keys = [1, 2, 3, 1, 4, 2, 5, 1, 3]
    seen = []
    for call in (f, framejit.compile(f)):
        CACHE.clear()
        orders = []
        for k in keys:
            call(torch.ones(1), k)
            orders.append((list(CACHE), list(dict.keys(CACHE))))
        seen.append(orders)
    assert seen[0] == seen[1]
    assert seen[0][3] == ([2, 3, 1], [1, 2, 3])  # the case the replay got wrong: the orders differ


def test_ordered_dicts_held_by_a_dict_or_an_object():
    class Box:
        def __init__(self, od):
            self.cache = od

    def f(x, holder, k):
        od = holder.cache if isinstance(holder, Box) else holder["cache"]
        od.move_to_end(k)
        od["z"] = x
        return x + 1, list(od)

    compiled = framejit.compile(f)
    for i in range(4):
        x, k = torch.randn(2), "abc"[i % 3]
        a, b = _make(i), _make(i)
        ha, hb = (Box(a), Box(b)) if i % 2 else ({"cache": a}, {"cache": b})
        assert f(x, ha, k)[1] == compiled(x, hb, k)[1]
        assert list(dict.keys(a)) == list(dict.keys(b)) and list(a) == list(b), i


def test_popitem_of_an_empty_ordered_dict_raises_its_own_message():
    def f(x, od, plain):
        od.clear()
        plain.clear()
        out = []
        for d in (od, plain):
            try:
                d.popitem()
            except KeyError as e:
                out.append(str(e))
        return x + 1, out

    compiled = framejit.compile(f)
    for i in range(3):
        x = torch.randn(2)
        assert f(x, _make(i), {"a": 1})[1] == compiled(x, _make(i), {"a": 1})[1] == \
            ["'dictionary is empty'", "'popitem(): dictionary is empty'"]


def _state(od):
    try:
        linked = list(od)
    except KeyError as e:  # an OrderedDict left out of order by dict's own method
        linked = repr(e)
    return linked, list(dict.keys(od))


_DICT_WRITES = {"popitem": lambda od: dict.popitem(od), "pop": lambda od: dict.pop(od, "a"),
                "setdefault": lambda od: dict.setdefault(od, "n", 1), "update": lambda od: dict.update(od, {"n": 1}),
                "clear": lambda od: dict.clear(od)}


def test_dicts_own_writes_to_an_ordered_dict_run_as_python():
    # NOTE [dict's own writes to OrderedDicts]: they change the underlying dict, not the linked list
    for name, write in _DICT_WRITES.items():
        def outside(x, od):
            y = x + 1
            return y, write(od), y * 2

        def inside(x, reorder):
            od = _OD(a=1, b=2, c=3)
            if reorder:
                od.move_to_end("a")
            y = x + 1
            return y, write(od), _state(od)

        for fn, make in ((outside, lambda i: _make(i)), (inside, lambda i: bool(i % 2))):
            compiled = framejit.compile(fn)
            for i in range(3):
                x, a, b = torch.randn(2), make(i), make(i)
                expected, got = fn(x, a), compiled(x, b)
                assert expected[1:2] + expected[3:] == got[1:2] + got[3:], (name, i, expected, got)
                if fn is outside:
                    assert _state(a) == _state(b), (name, i)


def test_ordered_dicts_own_methods_stay_in_one_graph():
    def f(x, od):
        y = x + 1
        od.pop("a")
        od.setdefault("n", 1)
        od.update(m=2)
        k = od.popitem(last=False)
        od.move_to_end("n", last=False)
        od.clear()
        return y * 2, k

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for i in range(3):
        x, a, b = torch.randn(2), _make(i), _make(i)
        assert f(x, a)[1] == compiled(x, b)[1]
        assert _orders(a) == _orders(b)
    assert backend.graph_count == 2  # calls 0 and 1 differ in the linked order; no break
