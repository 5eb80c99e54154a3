"""Fully masked query rows of `scaled_dot_product_attention` on onnxrt when the attention is not fused
(NOTE [Fully masked rows of SDPA], backends/onnxrt/attention.py).

torch's CPU kernel returns 0 for a query row whose mask is -inf at every key; torchlib's translation of the
op (used whenever the attention is not one fused ORT node: symbolic sizes, q/k/v given in head layout)
returned NaN there (revC C5: p20.py's dynamic graph; also static graphs of plain q/k/v inputs).
Differential: eager vs the onnxrt backend on fresh inputs and masks at each call, several sizes, static and
symbolic; the SDPA node must run in ORT (not left to torch).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import OnnxrtRecorder

F32 = dict(rtol=1e-4, atol=1e-5, equal_nan=True)


class _Recorder(OnnxrtRecorder):
    def assert_attention_in_ort(self) -> None:
        rows = self.rows()
        assert rows and all(row["ort_nodes"] > 0 and not row["eager_graph"] for row in rows), rows
        assert not [n for row in rows for n in row["eager_nodes"] if "scaled_dot_product" in n], rows


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _mask(kind: str, seed: int, batch: int, seq: int):
    """A float mask with at least one query row masked at every key (row 0 in most kinds)."""
    if kind == "full":  # (batch, 1, seq, seq), row 0 everywhere, row 2 of the first sequence, random -inf
        mask = torch.zeros(batch, 1, seq, seq).masked_fill(torch.rand(batch, 1, seq, seq, generator=_g(seed)) < 0.2,
                                                           -math.inf)
        mask[:, :, 0, :] = -math.inf
        mask[0, :, min(2, seq - 1), :] = -math.inf
        return mask
    if kind == "2d":  # (seq, seq)
        mask = torch.zeros(seq, seq)
        mask[seq // 2, :] = -math.inf
        return mask
    if kind == "padding":  # (batch, 1, 1, seq): the first sequence fully padded, others padded at the tail
        mask = torch.zeros(batch, 1, 1, seq)
        mask[0] = -math.inf
        mask[1:, :, :, seq - 1:] = -math.inf
        return mask
    assert kind == "bool"  # a bool mask (False = masked): torch turns it into -inf before the op
    keep = torch.rand(batch, 1, seq, seq, generator=_g(seed)) < 0.7
    keep[:, :, 0, :] = False
    keep[:, :, 1:, 0] = True
    return keep


def _sdpa(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2 + 1


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("kind", ["full", "2d", "padding", "bool"])
def test_fully_masked_rows_of_unfused_sdpa_are_zero(kind, dynamic):
    recorder = _Recorder()
    compiled = framejit.compile(_sdpa, backend=recorder, dynamic=dynamic)
    for seed, (batch, seq) in enumerate([(2, 5), (2, 5), (3, 7), (2, 4)]):
        q, k, v = (torch.randn(batch, 2, seq, 8, generator=_g(10 * seed + i)) for i in range(3))
        mask = _mask(kind, seed, batch, seq)
        with torch.no_grad():
            expected, got = _sdpa(q, k, v, mask), compiled(q, k, v, mask)
        assert not expected.isnan().any()
        torch.testing.assert_close(got, expected, **F32)
    recorder.assert_attention_in_ort()


class _SelfAttention(torch.nn.Module):
    """revC p20.py's block: q, k, v projections, 2 heads, SDPA with an additive mask."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))

    def forward(self, x, mask):
        batch, seq, _ = x.shape
        q, k, v = (p(x).view(batch, seq, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(batch, seq, -1)


def test_projected_attention_with_changing_sizes_zeroes_masked_rows():
    """p20.py: the first shape's graph is fused (already right); the recompiled symbolic graph is not."""
    torch.manual_seed(0)
    model = _SelfAttention().eval()
    recorder = _Recorder()
    compiled = framejit.compile(model, backend=recorder)
    for seed, (batch, seq) in enumerate([(2, 5), (2, 5), (3, 7), (3, 6)]):
        x = torch.randn(batch, seq, 16, generator=_g(seed))
        mask = _mask("full", seed, batch, seq)
        with torch.no_grad():
            expected, got = model(x, mask), compiled(x, mask)
        torch.testing.assert_close(got, expected, **F32)
    assert any(row["symbolic"] for row in recorder.rows())
    recorder.assert_attention_in_ort()
