"""Defects found by probing real library code as a new user would (issue 11), each reduced to a small program.

Each test is differential (eager vs compiled on fresh inputs, several calls) and names the library code it
came from.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


class _Registry(dict):
    """A dict subclass read through dict's own methods (transformers' registries and ModelOutput)."""

    def get(self, key, default=None):
        return super().get(key, default)


_FIRST, _SECOND = _Registry(a=1), _Registry(b=2)
_LOG: list = []


def _reads_two_registries_and_mutates(x):
    _LOG.append(x.shape[0])
    return x + _FIRST.get("a") + _SECOND.get("b")


def test_fresh_copies_in_the_no_aliasing_guard_stay_distinct():
    """Encoder-decoder generate() (m2m_100, mt5) recompiled its decoder step every call until the recompile
    limit, then ran it eagerly: the frame mutates (so a guard pins its objects distinct) and reads two dict
    subclasses' raw items, fresh copies in the guard (NOTE [Dict subclasses]). `len({id(a), id(b)})` freed
    the first copy before making the second, which could get the same address: "NO_ALIASING ... got a
    different value" on some calls."""
    backend = CountingBackend()
    compiled = framejit.compile(_reads_two_registries_and_mutates, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    _LOG.clear()
    for _ in range(12):
        x = torch.randn(3, 2)
        torch.testing.assert_close(compiled(x), x + 3)
    assert _LOG == [3] * 12
    assert backend.graph_count == 1
    assert framejit.stats()["eager_frames"] == eager_before
