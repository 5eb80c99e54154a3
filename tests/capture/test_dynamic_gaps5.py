"""Dynamic shapes, issue 13 (fifth round of gaps, h13dyn3): differential tests, eager vs compiled over
several sizes, with the number of compilations asserted against stock torch.compile's count.

- A dim marked with `mark_dynamic` whose size is 0 or 1 is specialised by rule (not a broken contract), but
  the entry's DYNAMIC_INDICES guard allowed only the dims it kept symbolic, so the entry failed its own kind
  of input: sizes 3, 0, 1, 2, 5, 0, 1 traced 0 and 1 again on every return (stock torch.compile: 3 graphs).
  The guard now also allows the traced tensor's marked dims of size 0 or 1 (shapes._marked_by_rule).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


def _sum_and_mean(x):
    return (x * 2).sum(0) + x.mean(0), x.unsqueeze(0).expand(3, *x.shape).sum(0)


def test_a_marked_dim_of_size_0_or_1_is_served_again_by_its_entry():
    backend = CountingBackend()
    compiled = framejit.compile(_sum_and_mean, backend=backend)
    eager_before = _eager_frames()
    for i, size in enumerate([3, 0, 1, 2, 5, 0, 1, 4, 0, 1]):
        torch.manual_seed(i)
        x = torch.randn(size, 3)
        framejit.mark_dynamic(x, 0)
        assert_same(compiled(x), _sum_and_mean(x))
    assert _eager_frames() == eager_before
    assert backend.graph_count == 3, backend.graph_count  # symbolic, 0, 1 (stock torch.compile: 3)


def test_an_unmarked_entry_of_size_1_still_retraces_a_marked_tensor():
    backend = CountingBackend()
    compiled = framejit.compile(_sum_and_mean, backend=backend, dynamic=False)
    x = torch.randn(1, 3)
    assert_same(compiled(x), _sum_and_mean(x))
    y = torch.randn(1, 3)
    framejit.mark_dynamic(y, 0)
    assert_same(compiled(y), _sum_and_mean(y))
    assert backend.graph_count == 2, backend.graph_count  # the unmarked entry does not serve a marked tensor
