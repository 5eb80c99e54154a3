"""Issue 13 (hhuntD MED-2): one call whose traced op raises eager's error for its symbolic values (`torch.zeros(n)`
with n = -1, a view that does not divide, an out-of-range narrow or index) made a break entry that guarded nothing
about the failing value; tried first (newest), it served every later call with a graph break and recompiled the
rest, where the entry made for the good sizes was never used again. Such a call runs eagerly now and installs no
entry (NOTE [Calls that raise at a symbolic op] in capture/dynamic_misses.py).

Stock torch.compile(backend=CompileCounter) over the same calls: 2 graphs, the bad call raising (its
TorchRuntimeError/IndexError), the entry for the good sizes kept.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit import config
from tests.helpers import CountingBackend, assert_same, eager_frames


def _zeros_neg(x, n):
    return torch.zeros(n) + x.sum()


def _view_bad(x, n):
    return x.view(n, -1) * 2


def _narrow_bad(x, n):
    return x.narrow(0, n, 2) * 2


def _index_bad(x, n):
    return x[n] * 2


CASES = {  # the 4th call raises in eager
    "zeros_neg": (_zeros_neg, [1, 2, 3, -1, 4, 5, 6, 7]),
    "view_bad": (_view_bad, [1, 2, 3, 5, 4, 2, 1, 3]),
    "narrow_bad": (_narrow_bad, [1, 2, 3, 13, 4, 5, 6, 7]),
    "index_bad": (_index_bad, [1, 2, 3, 40, 4, 5, 6, 7]),
}


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - compared by type with eager's
        return type(e)


def _differential(fn, compiled, ns):
    for n in ns:
        expected, actual = _outcome(fn, torch.arange(12.0), n), _outcome(compiled, torch.arange(12.0), n)
        if isinstance(expected, type):
            assert actual is expected
        else:
            assert_same(actual, expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_raising_call_leaves_the_good_entry_in_use(name):
    """Was: 4 or 5 graphs and a graph break on every call after the bad one."""
    fn, ns = CASES[name]
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend)
    _differential(fn, compiled, ns)
    assert backend.graph_count == 2  # stock 2
    assert eager_frames() == before
    traced = framejit.stats()["frames_traced"]
    _differential(fn, compiled, [6, 4, 2])
    assert framejit.stats()["frames_traced"] == traced  # no resume function traced, no new entry


def test_a_frame_that_keeps_raising_is_not_traced_on_every_call(monkeypatch):
    """Past the recompile limit of such calls the break entry is made as before: later bad calls run through it."""
    monkeypatch.setattr(config, "recompile_limit", 3)
    backend = CountingBackend()
    compiled = framejit.compile(_zeros_neg, backend=backend)
    _differential(_zeros_neg, compiled, [2, 3])
    traced = framejit.stats()["frames_traced"]
    _differential(_zeros_neg, compiled, [-1, -2, -3])
    assert framejit.stats()["frames_traced"] == traced + 3
    _differential(_zeros_neg, compiled, [-4, -5, -6, -7])
    assert framejit.stats()["frames_traced"] == traced + 4
