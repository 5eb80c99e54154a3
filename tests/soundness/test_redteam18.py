"""Adversarial differential programs, eighteenth round (issue 12, red team): each runs eagerly and compiled
on separate but equal state over several calls, changing what the code reads between calls, and compares
results, printed output and the state left behind."""
from __future__ import annotations

import threading

import pytest
import torch

from tests.helpers import run_differential


# ---- NOTE [Iterators of their own type] (capture/values/containers.py), reversed() ---------------------------

def _reversed_types(x, k):
    r, t, l = reversed(range(k + 3)), reversed((x, 2, 3)), reversed([1, 2, k])
    next(r), next(t), next(l)
    return x + 1, type(r).__name__, type(t).__name__, type(l).__name__


def _reversed_across_a_break(x, k):
    r, t = reversed(range(2, 20, 3 + k)), reversed((x, x * 2, k))
    next(r), next(t)
    print("break")
    return x + next(t), list(t), list(r), type(r).__name__, type(t).__name__, r.__length_hint__()


def _reversed_list_from_outside(x, items):
    r = reversed(items)
    a = next(r)
    items[0] = 99
    print("break")
    return x + a, next(r, None), list(r), type(r).__name__


def _reversed_long_range(x, k):
    r = reversed(range(2**64, 2**64 + 4 + k))  # past C longs: a longrange_iterator
    next(r)
    return x + 1, type(r).__name__, [v - 2**64 for v in r]


def _reversed_returned(x, k):
    return x * 2, reversed((k, 1, 2)), reversed(range(k + 2))


@pytest.mark.parametrize("fn", [_reversed_types, _reversed_across_a_break, _reversed_list_from_outside,
                                _reversed_long_range, _reversed_returned],
                         ids=["in_trace", "across_break", "list_from_outside", "long_range", "returned"])
def test_reversed_iterators_keep_their_type(fn):
    # before: reversed(range), reversed(tuple) and reversed(list) answered type() as list_iterator, in the
    # trace, after a break and as return values (eager: range_iterator, reversed, list_reverseiterator)
    def make(seed):
        return (torch.randn(3) + seed, list(range(seed + 2)) if fn is _reversed_list_from_outside else seed)

    def typed(*args):  # iterators compared by type and contents (they are not equal to each other)
        out = fn(*args)
        return tuple((type(v).__name__, list(v)) if type(v) in (type(iter(range(0))), reversed) else v
                     for v in out)
    run_differential(typed, make, seeds=(0, 1, 2), fullgraph=False)


# ---- NOTE [Bound builtin methods by their parts] (capture/values/builder.py) ------------------------------

def _lock_method_across_a_break(x, k):
    lock = threading.Lock()
    a = lock.locked
    print("break")
    return x + k, type(a).__name__, a == lock.locked, a in {lock.locked}, {a: 1}.get(lock.locked, 0), a()


def _dict_method_across_a_break(x, k):
    d = {"k": k}
    a, b = d.get, x.__add__
    print("break")
    return b(a("k")), type(a).__name__, a == d.get, {a: 1}.get(d.get, 0), a in [d.get]


@pytest.mark.parametrize("fn", [_lock_method_across_a_break, _dict_method_across_a_break], ids=["lock", "dict"])
def test_a_c_method_read_before_a_break_is_the_builtin_bound_method(fn):
    # before: the trace rebuilt `obj.method` (a C method read in the graph before the break) as
    # types.MethodType(descriptor, obj): type 'method', equal to no later read of the method, another hash
    # (eager: builtin_function_or_method, a == lock.locked, found as a dict key)
    run_differential(fn, lambda seed: (torch.randn(3) + seed, seed), seeds=(0, 1, 2), fullgraph=False)


# ---- NOTE [One object per value] (capture/codegen.py): tuples ------------------------------------------------

def _tuple_identity_across_a_break(x, k):
    t = (x, k)
    u, d = [t], {"t": t}
    print("break")
    return u[0] is t, d["t"] is u[0], t[1]


def test_a_tuple_made_while_tracing_is_one_object_after_a_break():
    # before: each place that held the tuple got a tuple of its own (eager: u[0] is t)
    run_differential(_tuple_identity_across_a_break, lambda seed: (torch.randn(3) + seed, seed), seeds=(0, 1, 2),
                     fullgraph=False)
