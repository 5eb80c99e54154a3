"""q, k and v projections inside ORT's Attention op (NOTE [Projections inside the attention op] in
backends/onnxrt/attention.py).

When the q, k and v of an attention block are Linear layers of one input, the part's session runs one
com.microsoft Attention node (projection, head split and attention together) instead of Gemms and a
MultiHeadAttention; otherwise (a projection also used elsewhere, cross-attention) MultiHeadAttention stays.
The op types are read from the model ORT's optimizer made for the session (frozen weights folded).
Differential: eager vs framejit's onnxrt backend on fresh inputs at every call, a second shape, and weight
changes between calls (frozen weights rebuilt, or fed with freeze_weights=False); float32 tolerance.
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit

F32 = dict(rtol=1e-4, atol=1e-5, equal_nan=True)


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class SelfAttention(torch.nn.Module):
    """BERT-style: three projections (with or without bias), heads by view + permute, an additive mask."""

    def __init__(self, dim=16, heads=2, bias=True, also_return_v=False):
        super().__init__()
        self.heads, self.also_return_v = heads, also_return_v
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim, bias=bias) for _ in range(3))
        self.o = torch.nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3)  # noqa: E731
        v = self.v(x)
        scores = split(self.q(x)) @ split(self.k(x)).transpose(-1, -2) / math.sqrt(d // self.heads) + mask
        out = self.o((scores.softmax(-1) @ split(v)).permute(0, 2, 1, 3).reshape(b, s, d))
        return (out, v) if self.also_return_v else out


class CrossAttention(SelfAttention):
    """q from x, k and v from another input: no single input to project."""

    def forward(self, x, memory):
        b, s, d = x.shape
        split = lambda t: t.view(b, t.shape[1], self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        out = torch.nn.functional.scaled_dot_product_attention(
            split(self.q(x)), split(self.k(memory)), split(self.v(memory)))
        return self.o(out.transpose(1, 2).reshape(b, s, d))


class PackedQKV(torch.nn.Module):
    """ViT-style one projection of 3 * dim, read in the order `order` (q, k, v = chunks[order])."""

    def __init__(self, dim=24, heads=3, order=(0, 1, 2)):
        super().__init__()
        self.heads, self.order = heads, order
        self.qkv, self.o = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        chunks = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        q, k, v = (chunks[i] for i in self.order)
        attn = (q * (d // self.heads) ** -0.5 @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.o((attn @ v).transpose(1, 2).reshape(b, s, d))


def _mask(seed, b, s):
    keep = torch.randint(1, s + 1, (b,), generator=torch.Generator().manual_seed(seed))
    return torch.zeros(b, 1, 1, s).masked_fill(torch.arange(s) >= keep[:, None, None, None], -1e9)


def _check(model, make_args, calls, options=None):
    """Compile `model` with framejit on onnxrt and compare with eager on every call's arguments."""
    compiled = framejit.compile(model.eval(), backend="onnxrt", options=options, dynamic=False)
    with torch.no_grad():
        for call in calls:
            args = make_args(*call)
            for got, want in zip(torch.utils._pytree.tree_leaves(compiled(*args)),
                                 torch.utils._pytree.tree_leaves(model(*args))):
                torch.testing.assert_close(got, want, **F32)
    return compiled


@pytest.mark.parametrize("bias", [True, False])
def test_three_projections_run_inside_one_attention_op(optimized, bias):
    framejit.reset()
    torch.manual_seed(0)
    _check(SelfAttention(bias=bias), lambda seed, b, s: (_x(seed, b, s, 16), _mask(seed, b, s)),
           [(0, 3, 6), (1, 3, 6), (2, 2, 9)])
    ops = optimized()
    # 2 programs (2 shapes): one Attention each; only the output projection is left a Gemm
    assert ops["Attention"] == 2 and ops["MultiHeadAttention"] == 0, ops
    assert ops["Gemm"] == 2 and "MatMul" not in ops and "Softmax" not in ops, ops
    assert "Concat" not in ops and "Transpose" not in ops, ops  # the weights' layout is folded into constants


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 0, 2)])
def test_packed_qkv_in_any_order(optimized, order):
    framejit.reset()
    torch.manual_seed(1)
    _check(PackedQKV(order=order), lambda seed, b, s: (_x(seed, b, s, 24),), [(0, 2, 7), (1, 2, 7), (2, 3, 5)])
    ops = optimized()
    assert ops["Attention"] == 2 and ops["Gemm"] == 2 and "Split" not in ops, ops


def test_projection_used_elsewhere_keeps_multi_head_attention(optimized):
    """v is also returned: inside Attention it would be computed twice."""
    framejit.reset()
    torch.manual_seed(2)
    _check(SelfAttention(also_return_v=True), lambda seed: (_x(seed, 2, 5, 16), _mask(seed, 2, 5)), [(0,), (1,)])
    ops = optimized()
    assert ops["MultiHeadAttention"] == 1 and ops["Attention"] == 0, ops


def test_cross_attention_keeps_multi_head_attention(optimized):
    framejit.reset()
    torch.manual_seed(3)
    _check(CrossAttention(), lambda seed: (_x(seed, 2, 5, 16), _x(seed + 10, 2, 7, 16)), [(0,), (1,)])
    ops = optimized()
    assert ops["MultiHeadAttention"] == 1 and ops["Attention"] == 0, ops


@pytest.mark.parametrize("freeze", [True, False])
def test_weight_changes_reach_the_attention_op(optimized, freeze):
    """In-place writes, `.data` writes and load_state_dict between calls (frozen weights: the session is
    rebuilt; not frozen: the weights are fed and concatenated in the model on every call)."""
    framejit.reset()
    torch.manual_seed(4)
    model = SelfAttention().eval()
    compiled = framejit.compile(model, backend="onnxrt", options={"freeze_weights": freeze})
    other = SelfAttention().state_dict()
    changes = [
        lambda: None,
        lambda: model.q.weight.mul_(1.5),
        lambda: model.v.bias.data.add_(0.25),
        lambda: model.load_state_dict(other),
    ]
    with torch.no_grad():
        for seed, change in enumerate(changes):
            change()
            args = (_x(seed, 2, 6, 16), _mask(seed, 2, 6))
            torch.testing.assert_close(compiled(*args), model(*args), **F32)
    assert optimized()["Attention"] >= 1
