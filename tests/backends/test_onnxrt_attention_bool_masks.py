"""Boolean attention masks (masked_fill / where with -inf) inside ORT's attention op on onnxrt (NOTE [Boolean
masks as an additive bias] in framejit/backends/onnxrt/attention_masks.py): values equal eager's, including
NaN rows, non-finite masked scores (the exact fallback) and the forms that must stay op by op."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framejit

WIDTH, HEADS = 16, 2


class Causal(nn.Module):
    """GPT style: one qkv projection split in three, masked_fill(~tril, fill) of a mask made in forward."""

    def __init__(self, fill=float("-inf"), p=0.0):
        super().__init__()
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fill, self.drop = fill, nn.Dropout(p)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, HEADS, -1).transpose(1, 2) for y in self.qkv(x).split(WIDTH, dim=2))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        keep = torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t)
        probs = self.drop(F.softmax(scores.masked_fill(~keep, self.fill), dim=-1))
        return self.proj((probs @ v).transpose(1, 2).contiguous().view(b, t, WIDTH))


class NanoBuffer(nn.Module):
    """nanoGPT style: a float tril buffer compared == 0, three Linear projections."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.register_buffer("bias", torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (m(x).view(b, t, HEADS, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH // HEADS)
        scores = scores.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, WIDTH))


class Padded(nn.Module):
    """BERT style heads with a (batch, 1, 1, keys) boolean keep-mask argument and torch.where."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(WIDTH, WIDTH) for _ in range(4))

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = (m(x).view(b, t, HEADS, -1).permute(0, 2, 1, 3) for m in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(WIDTH // HEADS)
        scores = torch.where(keep[:, None, None, :], scores, float("-inf"))
        return self.proj(torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).reshape(b, t, WIDTH))


def _same(expected, got):
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, equal_nan=True)


def _compiled(model, **kwargs):
    framejit.reset()
    return framejit.compile(model, backend="onnxrt", **kwargs)


def test_causal_masked_fill_is_one_attention_op(optimized):
    torch.manual_seed(0)
    model = Causal().eval()
    fast = _compiled(model)
    with torch.no_grad():
        for seed in (1, 2, 3):
            x = torch.randn(2, 6, WIDTH, generator=torch.Generator().manual_seed(seed))
            _same(model(x), fast(x))
    ops = optimized()
    assert ops["Attention"] == 1 and ops["Softmax"] == 0 and ops["Where"] == 0, ops


def test_tril_buffer_compared_with_zero(optimized):
    torch.manual_seed(0)
    model = NanoBuffer().eval()
    fast = _compiled(model)
    with torch.no_grad():
        for seed in (1, 2):
            x = torch.randn(3, 8, WIDTH, generator=torch.Generator().manual_seed(seed))
            _same(model(x), fast(x))
        model.bias.fill_(1.0)  # the buffer changed: no mask at all now
        x = torch.randn(3, 8, WIDTH)
        _same(model(x), fast(x))
    ops = optimized()
    assert ops["Attention"] >= 1 and ops["Softmax"] == 0, ops


def test_padding_where_with_fully_masked_rows(optimized):
    torch.manual_seed(0)
    model = Padded().eval()
    fast = _compiled(model)
    with torch.no_grad():
        for lengths in ((5, 3, 0), (1, 5, 2)):  # a row of length 0: every key masked, NaN in eager
            x = torch.randn(3, 5, WIDTH)
            keep = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
            expected = model(x, keep)
            assert expected.isnan().any(-1).any(-1).tolist() == [n == 0 for n in lengths]
            _same(expected, fast(x, keep))
    ops = optimized()
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, ops


def causal_heads(q, k, v, w):
    b, t, _ = q.shape
    q, k, v = (y.view(b, t, HEADS, -1).transpose(1, 2) for y in (q, k, v))
    keep = torch.ones(t, t, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~keep, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, WIDTH) @ w


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 3e38])
def test_non_finite_masked_scores_keep_eager_values(bad, optimized):
    """A future key that is NaN, inf or makes q . k overflow: masked_fill hides those scores from the rows
    before it in eager, where adding -inf would make them NaN; the fused op's NaN takes the op-by-op branch."""
    fast = _compiled(causal_heads)
    w = torch.randn(WIDTH, WIDTH)
    for last in (bad, 0.5, bad):
        q, k, v = (torch.randn(2, 6, WIDTH) for _ in range(3))
        q = q.abs() + 0.1
        k[0, -1] = last
        expected = causal_heads(q, k, v, w)
        assert expected[0, :-1].isfinite().all() and expected[1].isfinite().all()
        _same(expected, fast(q, k, v, w))
    ops = optimized()
    assert ops["MultiHeadAttention"] == 1 and ops["If"] == 1, ops


def test_finite_fill_stays_op_by_op(optimized):
    torch.manual_seed(0)
    model = Causal(fill=-1e9).eval()
    fast = _compiled(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 6, WIDTH)
            _same(model(x), fast(x))
    ops = optimized()
    assert ops["Attention"] == 0 and ops["Softmax"] == 1, ops


def test_float64_and_symbolic_sizes_stay_correct(optimized):
    torch.manual_seed(0)
    model = Causal().eval().double()
    fast = _compiled(model)
    with torch.no_grad():
        for t in (6, 7):
            x = torch.randn(2, t, WIDTH, dtype=torch.float64)
            torch.testing.assert_close(fast(x), model(x))
    assert optimized()["Attention"] == 0
    model = Causal().eval()
    fast = _compiled(model, dynamic=True)
    with torch.no_grad():
        for t in (5, 7, 3):
            x = torch.randn(2, t, WIDTH)
            _same(model(x), fast(x))


def test_train_mode_dropout_is_not_fused(optimized):
    torch.manual_seed(0)
    model = Causal(p=0.5).train()
    fast = _compiled(model)
    with torch.no_grad():
        for seed in (1, 2):
            x = torch.randn(2, 6, WIDTH)
            torch.manual_seed(seed)
            expected = model(x)
            torch.manual_seed(seed)
            _same(expected, fast(x))
    assert optimized()["Attention"] == 0
