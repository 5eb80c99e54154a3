"""map() whose function makes and fills new objects (NOTE [Objects map makes] in capture/builtins.py, NOTE
[Values made in order] in capture/values/base.py): the calls run when map is made, as for effect-free
functions, and the frame has no break; a function that writes state that existed before map was made, or a
class whose __init__ reads state changed before the rows are drawn, still makes map run lazily, as Python.
Every result, and the state the program leaves, is compared with the same program run eagerly."""
from __future__ import annotations

import torch

import framejit

SETTINGS = {"scale": 2}
LOG: list = []


class Scaled:
    def __init__(self, v):
        self.v = v * SETTINGS["scale"]


class Pair:
    def __init__(self, v):
        self.items = []
        self.items.append(v)
        self.items.append(v + 10)


class Logged:
    def __init__(self, v):
        self.v = v
        LOG.append(v)  # a list that existed before: eager appends as rows are drawn


def unpack_two(x):
    a, b = map(Scaled, [1, 3])
    return x * a.v + b.v


def list_of_filled(x):
    pairs = list(map(Pair, [x.shape[0], 4]))
    return x + sum(sum(p.items) for p in pairs)


def loop_over_lambda(x):
    total = x
    for s in map(lambda n: Scaled(n + 1), range(x.shape[0])):
        total = total + s.v
    return total


def changed_before_drawn(x):
    rows = map(Scaled, [1, 2])
    SETTINGS["scale"] = SETTINGS["scale"] + 1
    return x + sum(s.v for s in rows)


def writes_outside(x):
    made = list(map(Logged, [5, 6]))
    return x + len(LOG) + made[1].v


def _run_both(fn, sizes):
    compiled = framejit.compile(fn, backend="eager")
    for n in sizes:
        SETTINGS["scale"] = 2
        LOG.clear()
        expected = fn(torch.arange(float(n)))
        state = (dict(SETTINGS), list(LOG))
        SETTINGS["scale"] = 2
        LOG.clear()
        got = compiled(torch.arange(float(n)))
        assert torch.equal(got, expected), (fn.__name__, n, got, expected)
        assert (dict(SETTINGS), list(LOG)) == state, fn.__name__
    SETTINGS["scale"] = 2
    LOG.clear()
    return framejit.explain(fn)(torch.arange(3.0))


def test_objects_made_by_map_leave_no_break():
    for fn in (unpack_two, list_of_filled, loop_over_lambda):
        framejit.reset()
        report = _run_both(fn, (2, 3, 5, 2))
        assert report.graph_count == 1 and report.graph_break_count == 0, (fn.__name__, report)


def test_fullgraph_unpacks_objects_made_by_map():
    framejit.reset()
    compiled = framejit.compile(unpack_two, backend="eager", fullgraph=True)
    for n in (2, 4):
        x = torch.randn(n)
        assert torch.equal(compiled(x), unpack_two(x))


def test_state_changed_before_the_rows_are_drawn_is_seen():
    framejit.reset()
    report = _run_both(changed_before_drawn, (2, 3, 2))
    assert report.graph_break_count >= 1


def test_writes_to_outside_state_keep_map_lazy():
    framejit.reset()
    report = _run_both(writes_outside, (2, 3))
    assert report.graph_break_count >= 1
