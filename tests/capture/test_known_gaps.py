"""Known capture gaps and soundness bugs left by earlier sessions (issues 11 and 12, helper h11gaps).

Each program runs eagerly and compiled over several calls with changed inputs or state, compares the
results, and asserts the counts that are the point: graphs, graph breaks, frames traced and frames run
wholly eagerly by framejit (`framejit.stats()` is cumulative: deltas).
"""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _counts() -> tuple[int, int]:
    stats = framejit.stats()
    return stats["frames_traced"], stats["eager_frames"]


# ---- item 9: dict.__setitem__(od, k, v) on an OrderedDict (issue 12) -------------------------------------------
def _ordered_state(od):
    """What eager code can see of an OrderedDict, its table and its order list apart."""
    try:
        order = list(od)
    except KeyError as e:
        order = ("KeyError", e.args)
    return len(od), order, dict.get(od, "q"), "q" in od


def test_dict_setitem_on_an_ordered_dict_keeps_the_store():
    """The raw store reaches the table, not the order list: eager len(od) 3 and od.get('q') k while list(od)
    shows 2 keys. Compiled gave len 2 and None (the resume function read the dict by iterating it)."""
    def f(x, od, k):
        dict.__setitem__(od, "q", k)
        return x + len(od), len(od), od.get("q"), od["a"]

    compiled = framejit.compile(f, backend=CountingBackend())
    traced, eager = _counts()
    for k in (1, 2, 3):
        x = torch.randn(2)
        want_od, got_od = collections.OrderedDict(a=k, b=2), collections.OrderedDict(a=k, b=2)
        assert_same(compiled(x, got_od, k), f(x, want_od, k))
        assert _ordered_state(got_od) == _ordered_state(want_od)
    assert _counts()[1] == eager


@pytest.mark.parametrize("damage", ["setitem", "delitem"])
def test_an_entry_for_a_sound_ordered_dict_does_not_serve_a_damaged_one(damage):
    """The key guard read the order list only (list(od) == ['a', 'b']): a damaged OrderedDict with the same
    order list hit the entry made for a sound one, which answered len 2 and od.get('q') None."""
    def f(x, od):
        return x + len(od), len(od), od.get("q"), od.get("b")

    def make(k, damaged):
        od = collections.OrderedDict(a=k, b=2) if damage == "setitem" else collections.OrderedDict(a=k, b=2, q=k)
        if damaged:
            dict.__setitem__(od, "q", k) if damage == "setitem" else dict.__delitem__(od, "q")
        return od

    compiled = framejit.compile(f, backend=CountingBackend())
    traced, eager = _counts()
    for k, damaged in ((1, False), (2, True), (3, True), (4, False)):
        x = torch.randn(2)
        assert_same(compiled(x, make(k, damaged)), f(x, make(k, damaged)))
    assert _counts()[1] == eager
