"""Dynamic shapes, issue 13 (hhuntD MED-5, helper hfixDyn2): a miss whose newest entry fails first on something other
than a size still marks the sizes that changed (NOTE [Sizes that changed beside another miss] in
capture/dynamic_misses.py).

gpt2 generate(): a second generate() passes `attention_mask`; its decode step missed the prefill entry first on the
KV cache's `is_initialized` (a bool), so the mask, whose size differed from the prefill's, was traced static, and
symbolic one step later: 7 compilations over 3 generate() calls where stock torch.compile needs 6 (/tmp/hhuntD/
p9_hf.py; after: 6). The same shape here: a flag that flips between a first call and the next ones, with a mask
that grows each call. Stock torch.compile (counting backend): 2 graphs, as framejit now (3 before).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


def step(x, mask, first):
    if first:
        return x * 2 + mask.sum()
    return x * 3 + mask.sum()


def test_flag_and_growing_mask_compile_twice():
    backend = CountingBackend()
    compiled = framejit.compile(step, backend=backend)
    for i, n in enumerate((5, 6, 7, 8, 9, 10)):
        x, mask = torch.randn(3), torch.ones(1, n)
        assert torch.equal(compiled(x, mask, i == 0), step(x, mask, i == 0))
    assert backend.graph_count == 2  # stock: 2


def test_size_one_beside_a_flag_stays_correct():
    """A size that changes to 1 beside the flag: marked, its 1 still specialised; values equal eager."""
    backend = CountingBackend()
    compiled = framejit.compile(step, backend=backend)
    for first, n in ((True, 5), (False, 1), (False, 1), (True, 4), (False, 3), (False, 1), (True, 7), (False, 6)):
        x, mask = torch.randn(3), torch.randn(2, n)
        assert torch.equal(compiled(x, mask, first), step(x, mask, first))
    assert backend.graph_count <= 4  # stock: 4 (framejit 4 before and after)
