"""Attention whose scores are scaled by 0.0 on onnxrt (issue 17, review revF F1): ORT's attention ops read
`scale=0` as "not given" and use 1/sqrt(head_size), so the fused op computed another attention than eager's
(uniform weights over the unmasked keys): max |diff| 1.0-1.8 with no mask, an additive mask, a boolean -inf
mask and F.scaled_dot_product_attention(scale=0.0). Such attention is no longer fused (attention._fused).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import assert_same

B, H, T, D = 2, 2, 5, 4


def _heads(x):
    b, t, c = x.shape
    return x.view(b, t, H, c // H).transpose(1, 2)


def _merge(o):
    return o.transpose(1, 2).reshape(B, T, H * D) * 1.5


def no_mask(q, k, v, m):
    return _merge(((_heads(q) @ _heads(k).transpose(-2, -1)) * 0.0).softmax(-1) @ _heads(v))


def additive(q, k, v, m):
    return _merge(((_heads(q) @ _heads(k).transpose(-2, -1)) * 0.0 + m).softmax(-1) @ _heads(v))


def boolean(q, k, v, m):
    s = ((_heads(q) @ _heads(k).transpose(-2, -1)) * 0.0).masked_fill(m > 0, float("-inf"))
    return _merge(s.softmax(-1) @ _heads(v))


def sdpa(q, k, v, m):
    return _merge(F.scaled_dot_product_attention(_heads(q), _heads(k), _heads(v), scale=0.0))


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, T, H * D, generator=g) for _ in range(3)] + [torch.randn(T, T, generator=g)]


@pytest.mark.parametrize("fn", [no_mask, additive, boolean, sdpa])
def test_attention_scaled_by_zero_equals_eager(fn):
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=False)
    for seed in (0, 1):
        args = _inputs(seed)
        assert_same(compiled(*args), fn(*args), rtol=1e-4, atol=1e-5)
