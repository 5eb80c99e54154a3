"""Slots of lists, tuples and dicts called as methods (`p.__contains__(x)`, `t.__add__(u)`, `d.__setitem__(k, v)`)
and CPython's errors for list methods called with wrong arguments (NOTE [Container slots called as methods],
NOTE [Argument errors of container methods] in capture/container_slots.py). Before, reading such a slot was a
graph break ("unsupported_attribute list.__contains__") and `p.append()` / `p.pop(10)` failed inside framejit
(an internal error: a break, and under fullgraph an error eager does not raise)."""

import pytest
import torch

from tests.helpers import run_differential


class MyList(list):
    def __getitem__(self, i):
        return "overridden"


def _reads(x, items, table):
    n = items.__len__()
    first = items.__getitem__(0)
    has = items.__contains__(2)
    it = items.__iter__()
    nxt = next(it)
    t = tuple(items)
    return x * n + first, has, nxt, t.__getitem__(-1), t.__contains__(9), table.__getitem__("a") * x, \
        table.__contains__("b"), table.__len__()


def _writes(x, items, table):
    items.__setitem__(0, x * 2)
    items.__delitem__(1)
    same = items.__iadd__([x + 1, 7])
    table.__setitem__("c", x.sum())
    table.__delitem__("a")
    return same is items, len(items), x + 1


def _operands(x, items):
    t = tuple(items)
    return (x, items.__eq__(list(items)), items.__eq__(1), t.__lt__((100,)), t.__ne__([1]), items.__mul__(2),
            t.__add__((5,)), items.__add__([3]), t.__rmul__(2))


def _errors(x, items):
    caught = []
    for call in (lambda: items.append(), lambda: items.insert(1), lambda: items.pop(1, 2), lambda: items.clear(1),
                 lambda: items.pop(99), lambda: items.__getitem__(), lambda: tuple(items).__add__([1]),
                 lambda: items.__mul__(2.5), lambda: items.__setitem__(1)):
        try:
            call()
            caught.append(None)
        except (TypeError, IndexError) as e:
            caught.append((type(e).__name__, str(e)))
    return x + len(items), caught


def _inputs(seed):
    return torch.randn(3) + seed, [seed + 1, 2, 3 + seed][: 2 + seed % 2], {"a": seed + 1.0, "b": 2.0}


@pytest.mark.parametrize("fn", [_reads, _writes])
def test_slots_read_and_write_like_the_operators(fn):
    backend = run_differential(fn, _inputs, seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count >= 1


def test_slots_with_operands_of_other_types():
    run_differential(_operands, lambda seed: _inputs(seed)[:2], seeds=(0, 1), fullgraph=True)


def test_argument_errors_are_cpythons():
    run_differential(_errors, lambda seed: _inputs(seed)[:2], seeds=(0, 1), fullgraph=True)


def test_slot_of_a_subclass_is_not_the_operator():
    def fn(x, items):
        return x + 1, list.__getitem__(items, 0), items[0], items.__len__()
    run_differential(fn, lambda seed: (torch.randn(2), MyList([seed, 5])), seeds=(0, 1), fullgraph=False)
