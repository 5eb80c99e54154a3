"""Attention heads on triton with dynamic=True, issue 13 (h13dyn3): `x.view(b, t, h, c // h)` scaled by
`(c // h) ** -0.5`, eager vs triton over batch sizes and sequence lengths, with the modules counted.

The scale specialises the head width (the frontend guards `Eq(c // h, 4)`), which no probe of primes meets,
so the symbols of the broken guards were pinned to the example's values (NOTE [Symbols pinned by guards the
probes miss]): all of them, the batch and the sequence length of `Eq(b*t*c, b*t*h*(c // h))` as well, and the
graph compiled one module per (b, t) (5 modules over 5 shapes; stock torch.compile 1 graph). Only the fewest
symbols that meet the broken guards are pinned now (NOTE [Fewest symbols pinned], probe_relations.py).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import RecordingBackend, assert_same


def _heads(x, h):
    b, t, c = x.shape
    q = x.view(b, t, h, c // h).transpose(1, 2)
    att = (q @ q.transpose(-1, -2)) * (c // h) ** -0.5
    return att.softmax(-1).matmul(q).transpose(1, 2).reshape(b, t, c)


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_heads_over_batches_and_lengths_is_one_module(triton_modules):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(_heads, backend=backend, dynamic=True)
    eager = framejit.stats()["eager_frames"]
    for b, t in [(2, 5), (3, 4), (4, 7), (2, 3), (5, 6)]:
        x = _r(b, t, 8, seed=b * t)
        assert_same(compiled(x, 2), _heads(x, 2), rtol=1e-5, atol=1e-5)
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: 5
    assert framejit.stats()["eager_frames"] == eager


def test_another_head_count_compiles_again(triton_modules):
    # h and c are pinned: (12, 3) is another module, its values eager's
    backend = RecordingBackend("triton")
    compiled = framejit.compile(_heads, backend=backend, dynamic=True)
    for x, h in [(_r(2, 5, 8), 2), (_r(3, 4, 12, seed=1), 3), (_r(4, 6, 8, seed=2), 2)]:
        assert_same(compiled(x, h), _heads(x, h), rtol=1e-5, atol=1e-5)
    assert sum(triton_modules.values()) == 2, triton_modules  # before: 3
