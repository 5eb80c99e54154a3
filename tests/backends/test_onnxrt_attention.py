"""Attention as one ORT op (NOTE [Attention as one ORT op], backends/onnxrt/attention.py).

Written-out attention (bmm, scale, additive mask, softmax, bmm between head reshapes and permutes) and
`F.scaled_dot_product_attention` become one com.microsoft node in the emitted model, which ORT's optimizer
keeps (no Transpose, MatMul or Softmax left for the attention): Attention when q, k and v are projections of
one input (NOTE [Projections inside the attention op]; tests/backends/test_onnxrt_attention_projections.py),
else MultiHeadAttention. Differential:
eager vs the onnxrt backend on fresh inputs and masks at every call, and on a second shape (programs are
per signature); float32 tolerance 1e-4 relative / 1e-5 absolute; fully masked rows as eager (NaN for a
softmax over -inf only, 0 from the SDPA kernel).
"""
from __future__ import annotations

import collections
import math
import os

import onnx
import pytest
import torch
import torch.nn.functional as F

from framejit.backends.onnxrt import onnxrt, runtime
from tests.models import zoo

F32 = dict(rtol=1e-4, atol=1e-5, equal_nan=True)
MHA, ATTN = "MultiHeadAttention", "Attention"


@pytest.fixture(autouse=True)
def optimized_paths(monkeypatch, tmp_path):
    """Every ORT session made in the test writes its optimized model (frozen weights folded) to tmp_path."""
    made = []
    original = runtime.session_options

    def saving(opts):
        so = original(opts)
        so.optimized_model_filepath = str(tmp_path / f"session{len(made)}.onnx")
        made.append(so.optimized_model_filepath)
        return so

    monkeypatch.setattr(runtime, "session_options", saving)
    return made


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _mask(seed, batch, seq, fully_masked_row=False):
    """Additive padding mask (batch, 1, 1, seq): 0 for kept keys, -inf for a random padded tail; with
    `fully_masked_row`, (batch, 1, seq, seq) where query 1 of the first sequence sees no key."""
    keep = torch.randint(1, seq + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(batch, 1, 1, seq).masked_fill(torch.arange(seq) >= keep[:, None, None, None], -math.inf)
    if fully_masked_row:
        mask = mask.expand(batch, 1, seq, seq).clone()
        mask[0, :, 1, :] = -math.inf
    return mask


class WrittenOut(torch.nn.Module):
    """BERT-style: q, k, v projections, heads by view + permute, (q @ k^T) / sqrt(d) + mask, softmax,
    @ v, heads merged, output projection."""

    def __init__(self, dim=16, heads=2, return_probs=False):
        super().__init__()
        self.heads, self.return_probs = heads, return_probs
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, mask):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads) + mask
        probs = scores.softmax(-1)
        out = self.o(torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(b, s, d))
        return (out, probs) if self.return_probs else out


class FusedQKV(torch.nn.Module):
    """ViT-style: one qkv projection reshaped to (3, b, heads, s, d), unbind, q scaled before q @ k^T."""

    def __init__(self, dim=24, heads=3):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.o = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.o((attn @ v).transpose(1, 2).reshape(b, s, d))


class Sdpa(torch.nn.Module):
    """transformers-style: heads by view + transpose, F.scaled_dot_product_attention with a float mask."""

    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, mask=None):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, -1).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(b, s, d))


def _parts(compiled) -> list:
    return [m for p in compiled.programs.values() if p is not None for m in p.graph_module.modules()
            if isinstance(m, runtime.OrtPart)]


def _emitted(compiled) -> collections.Counter:
    """Op types of every emitted model, over every program."""
    return collections.Counter(n.op_type for part in _parts(compiled)
                               for n in onnx.load_from_string(part.model).graph.node)


def _optimized(paths) -> collections.Counter:
    """Op types of the models ORT's own optimizer made of every session since `paths` was last emptied."""
    counts = collections.Counter()
    for path in paths:
        if os.path.exists(path):  # not when ORT refused the model (NOTE [Correct before fast])
            counts.update(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)
    paths.clear()
    return counts


def _run(model, make_args, calls, paths=None):
    """Compile `model` on the first call's arguments, then compare with eager on every call's."""
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(model.eval())
    if paths is not None:
        paths.clear()
    with torch.no_grad():
        compiled = onnxrt(gm, list(make_args(*calls[0])))
        for call in calls:
            args = make_args(*call)
            torch.testing.assert_close(compiled(*args), model(*args), **F32)
    return compiled


def _assert_fused(compiled, paths, count, op=ATTN):
    emitted, optimized = _emitted(compiled), _optimized(paths)
    other = MHA if op == ATTN else ATTN
    assert emitted[op] == count and optimized[op] == count, (emitted, optimized)
    assert emitted[other] == 0 and optimized[other] == 0, (emitted, optimized)
    for name in ("Softmax", "MatMul", "Transpose"):
        assert name not in optimized, (emitted, optimized)
    assert "Softmax" not in emitted and "MatMul" not in emitted, emitted


def test_written_out_attention_with_a_padding_mask_is_one_op(optimized_paths):
    torch.manual_seed(1)
    model = WrittenOut()
    # calls: (seed, batch, seq); the last one is another signature, so another program
    compiled = _run(model, lambda seed, b, s: (_x(seed, b, s, 16), _mask(seed, b, s)),
                    [(0, 3, 6), (1, 3, 6), (2, 3, 6), (3, 2, 9)])
    _assert_fused(compiled, optimized_paths, count=2)


def test_written_out_attention_with_a_fully_masked_row_gives_nan_as_eager(optimized_paths):
    torch.manual_seed(2)
    model = WrittenOut()
    compiled = _run(model, lambda seed, b, s: (_x(seed, b, s, 16), _mask(seed, b, s, fully_masked_row=True)),
                    [(0, 2, 5), (1, 2, 5)])
    with torch.no_grad():
        assert compiled(_x(4, 2, 5, 16), _mask(4, 2, 5, True))[0, 1].isnan().all()
    _assert_fused(compiled, optimized_paths, count=1)


def test_vit_style_fused_qkv_with_a_scaled_query_is_one_op(optimized_paths):
    torch.manual_seed(3)
    model = FusedQKV()
    compiled = _run(model, lambda seed, b, s: (_x(seed, b, s, 24),), [(0, 2, 7), (1, 2, 7), (2, 4, 5)])
    _assert_fused(compiled, optimized_paths, count=2)


def test_scaled_dot_product_attention_is_one_op(optimized_paths):
    torch.manual_seed(4)
    model = Sdpa()
    compiled = _run(model, lambda seed, b, s, full: (_x(seed, b, s, 16), _mask(seed, b, s, full)),
                    [(0, 2, 6, False), (1, 2, 6, False), (2, 2, 6, True), (3, 2, 6, True)])
    _assert_fused(compiled, optimized_paths, count=2)
    unmasked = _run(model, lambda seed: (_x(seed, 3, 5, 16),), [(0,), (1,)], optimized_paths)
    _assert_fused(unmasked, optimized_paths, count=1)


def test_attention_whose_probabilities_are_returned_is_not_fused():
    """The softmax has a second user: fusing would compute it twice."""
    torch.manual_seed(5)
    compiled = _run(WrittenOut(return_probs=True), lambda seed: (_x(seed, 2, 5, 16), _mask(seed, 2, 5)),
                    [(0,), (1,)])
    assert _emitted(compiled)[MHA] == 0 and _emitted(compiled)[ATTN] == 0


def test_zoo_bert_and_vit_attention_layers_are_fused(optimized_paths):
    for name, layers in (("bert", 2), ("vit", 2)):
        case = zoo.get(name, "small")
        gm = torch.fx.symbolic_trace(case.model)
        optimized_paths.clear()
        with torch.no_grad():
            compiled = onnxrt(gm, list(case.make_inputs(0)))
            for seed in (1, 2):
                inputs = case.make_inputs(seed)
                for got, want in zip(zoo.output_tensors(compiled(*inputs)), zoo.output_tensors(case.model(*inputs))):
                    torch.testing.assert_close(got, want, **case.tolerance)
        assert _emitted(compiled)[ATTN] == layers and _optimized(optimized_paths)[ATTN] == layers, name


class SdpaHeadsMergedInTorch(torch.nn.Module):
    """SDPA at the end of the graph: the head merge (transpose, then a view that is only valid on the CPU
    flash kernel's strides) stays in torch (NOTE [ORT outputs in eager's layout]); also returned as is."""

    def forward(self, q, k, v, mask):
        b, s, d = q.shape
        split = lambda t: t.view(b, s, 4, d // 4).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        return out.transpose(1, 2).view(b, s, d), out


class PermutedPointwise(torch.nn.Module):
    """A pointwise op keeps its permuted input's memory order in eager, so the view after it is valid."""

    def forward(self, x):
        y = torch.tanh(x.permute(0, 2, 1)) * 2
        return y.permute(0, 2, 1).view(-1), y


def test_ort_outputs_read_by_torch_views_have_eager_strides():
    """Both graphs raised "view size is not compatible with input tensor's size and stride" on the
    contiguous ORT output, and that signature then ran eagerly; now every call runs its ORT program."""
    cases = [
        (SdpaHeadsMergedInTorch(), lambda seed, b, s: (*(_x(seed + k, b, s, 32) for k in range(3)),
                                                        _x(seed + 3, b, 1, s, s)), [(0, 2, 8), (4, 2, 8), (8, 3, 5)]),
        (PermutedPointwise(), lambda seed, b, s: (_x(seed, b, s, 6),), [(0, 2, 5), (1, 2, 5), (2, 3, 4)]),
    ]
    for model, make_args, calls in cases:
        compiled = _run(model, make_args, calls)
        assert len(compiled.programs) == 2 and all(p is not None for p in compiled.programs.values()), \
            compiled.summary()
        assert all(row["parts"] == 1 for row in compiled.summary())
        args = make_args(9, 2, 8 if isinstance(model, SdpaHeadsMergedInTorch) else 5)
        with torch.no_grad():
            for got, want in zip(compiled(*args), model(*args)):
                torch.testing.assert_close(got, want, **F32)
                assert got.stride() == want.stride()
