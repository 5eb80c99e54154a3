"""An OrderedDict made in the compiled function and reordered there (move_to_end, popitem(last=False),
re-insertion), then read by dict's own methods (`dict.keys(od)`, `dict.items(od)`, `dict.values(od)`,
`dict.__iter__(od)`) or handed back to the caller (NOTE [Reordered OrderedDicts made in the trace]).

CPython keeps two orders in an OrderedDict: its linked list (what `od` iterates) and its underlying dict (what
dict's own methods read), and only move_to_end makes them differ. Before, the OrderedDict was rebuilt (at the
break dict's methods take, and on return) in its linked order, so `dict.keys(od)` came back in the linked
order where eager gives the underlying one: a silent wrong result.
"""
from __future__ import annotations

import collections

import torch

import framejit

_OD = collections.OrderedDict


def _orders(od):
    return type(od), list(od), list(dict.keys(od)), [v.tolist() if torch.is_tensor(v) else v for v in od.values()]


def _same(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, _OD):
        return isinstance(b, _OD) and _same(_orders(a), _orders(b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return type(a) is type(b) and a == b


def _differential(fn, make_args, calls=5):
    compiled = framejit.compile(fn)
    for i in range(calls):
        args = make_args(i)  # tensors are only read
        expected, got = fn(*args), compiled(*args)
        assert _same(expected, got), (i, expected, got)


def test_dict_methods_read_the_underlying_order_after_reordering():
    def f(x, keys, moved):
        od = _OD((k, x * n) for n, k in enumerate(keys))
        od.move_to_end(moved)
        first = od.popitem(last=False)
        od[first[0]] = first[1] + 1  # re-inserted: last in both orders
        od.move_to_end(keys[-1], last=False)
        return (x + 1, list(dict.keys(od)), [k for k, _ in dict.items(od)], list(dict.values(od)),
                list(dict.__iter__(od)), list(od), od)

    key_sets = (("a", "b", "c"), ("p", "q", "r", "s"), ("a", "b", "c"), ("x", "y", "z", "w", "v"))
    _differential(f, lambda i: (torch.randn(i + 2), key_sets[i % 4], key_sets[i % 4][i % 2]))


def test_a_reordered_ordered_dict_handed_back_keeps_both_orders():
    def f(x, moved, extra):
        od = _OD(a=x, b=x * 2, c=x * 3)
        od.move_to_end(moved)
        od[extra] = x - 1
        del od["b"]
        od["b"] = x + 5
        od.move_to_end("c", last=False)
        return od, x.sum()

    _differential(f, lambda i: (torch.randn(i + 1), "ab"[i % 2], f"e{i % 3}"))


def test_lru_style_reordering_in_a_loop():
    def f(x, order):
        cache = _OD()
        for k in order:
            if k in cache:
                cache.move_to_end(k)
            else:
                cache[k] = x * len(cache)
                if len(cache) > 3:
                    cache.popitem(last=False)
        return x.sum(), cache, list(dict.keys(cache))

    orders = ((1, 2, 3, 1, 4, 2), (5, 6, 5, 7, 8, 6, 9), (1, 1, 2, 1))
    _differential(f, lambda i: (torch.randn(3), orders[i % 3]))
