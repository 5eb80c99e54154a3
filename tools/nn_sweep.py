"""Sweep of torch's own library code (torch.nn modules, functional calls, nn.utils, nn.init, distributions)
under framejit against eager and stock torch.compile (issue 11).

Usage (from the repository root):
    .venv/bin/python tools/nn_sweep.py [--backend eager|onnxrt] [--modes eval,train] [-k SUBSTRING|=NAME ...]
        [--no-stock] [--verbose]

Every case is a small module (or a plain function) with an input maker. For each mode:
- eval: `module.eval()`, every call under `torch.no_grad()`;
- train: `module.train()`, float inputs require grad, the sum of every float output that requires grad is
  back-propagated after each call, and the gradients of parameters and inputs are compared too.
Each mode runs three times over the same three calls (fresh inputs from seeds 0, 1, 2, same shapes;
`torch.manual_seed(100 + call)` before each call so random ops draw the same numbers): eagerly (the
reference values), under stock `torch.compile(backend=<counting eager backend>)` (graph count and
`counters["graph_break"]`; torch._dynamo reset around it) and under `framejit.compile(backend=...)` (graphs
from a counting backend, or the onnxrt backend wrapped to count, graph breaks from the `graph_breaks`
log, frames run wholly eagerly from `framejit.stats()["eager_frames"]`). Each runner builds a fresh module
from the same seed, so in-place state (BatchNorm statistics, Embedding max_norm renorm) starts equal; the
module's parameters and buffers after the calls are compared as well.

One `ROW` line per case and mode: status, stock graphs/breaks, framejit graphs/breaks/eager frames, max
abs difference from eager, the first break reasons. Status is the worst of: CRASH (framejit raised where
eager did not, or raised another type), DIFF (a value or gradient differs by more than 1e-4, relative to
the magnitude), EAGER (a frame ran wholly eagerly), MORE (more graphs than stock), then FEWER (framejit
captured more than stock: fine) or OK. A summary counts statuses at the end.
"""
from __future__ import annotations

import argparse
import copy
import logging
import math
import os
import sys
import tempfile
import time
import traceback
import warnings

os.environ.setdefault("FRAMEJIT_CACHE_DIR", tempfile.mkdtemp(prefix="nn_sweep_cache_"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402

warnings.filterwarnings("ignore")
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)

TOL = 1e-4
CASES: list["Case"] = []


class Case:
    def __init__(self, name, make, inputs, modes=("eval", "train"), rtol=TOL):
        self.name, self.make, self.inputs, self.modes, self.rtol = name, make, inputs, modes, rtol


def case(name, make, inputs, **kw):
    CASES.append(Case(name, make, inputs, **kw))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(seed, *shape):
    return torch.randn(*shape, generator=gen(seed))


def rand(seed, *shape):
    return torch.rand(*shape, generator=gen(seed))


def randint(seed, lo, hi, *shape):
    return torch.randint(lo, hi, shape, generator=gen(seed))


class Fn(nn.Module):
    """A module whose forward calls `fn(self, *args)`: how user models call library functions."""

    def __init__(self, fn, **children):
        super().__init__()
        self.fn = fn
        for k, v in children.items():
            setattr(self, k, v)

    def forward(self, *args):
        return self.fn(self, *args)


def x_(*shape):
    return lambda s: (randn(s, *shape),)


# ---------------------------------------------------------------- linear, conv, pooling
case("Linear", lambda: nn.Linear(6, 4), x_(3, 6))
case("Linear.nobias", lambda: nn.Linear(6, 4, bias=False), x_(2, 3, 6))
case("Bilinear", lambda: nn.Bilinear(3, 5, 4), lambda s: (randn(s, 2, 3), randn(s + 9, 2, 5)))
case("Identity", lambda: nn.Identity(), x_(2, 3))
for d in (1, 2, 3):
    shp = (2, 3) + (6,) * d
    Conv = getattr(nn, f"Conv{d}d")
    ConvT = getattr(nn, f"ConvTranspose{d}d")
    case(f"Conv{d}d", lambda Conv=Conv: Conv(3, 4, 3, padding=1), x_(*shp))
    case(f"Conv{d}d.strided_groups", lambda Conv=Conv: Conv(3, 6, 2, stride=2, groups=3, dilation=1), x_(*shp))
    case(f"Conv{d}d.same_reflect", lambda Conv=Conv: Conv(3, 4, 3, padding="same", padding_mode="reflect"), x_(*shp))
    case(f"Conv{d}d.circular", lambda Conv=Conv: Conv(3, 4, 3, padding=1, padding_mode="circular"), x_(*shp))
    case(f"ConvTranspose{d}d", lambda ConvT=ConvT: ConvT(3, 4, 3, stride=2, padding=1, output_padding=1), x_(*shp))
    case(f"ConvTranspose{d}d.output_size",
         lambda ConvT=ConvT, d=d: Fn(lambda m, x: m.c(x, output_size=[12] * d), c=ConvT(3, 4, 3, stride=2, padding=1)),
         x_(*shp))
    for pool in ("MaxPool", "AvgPool"):
        P = getattr(nn, f"{pool}{d}d")
        case(f"{pool}{d}d", lambda P=P: P(2), x_(*((2, 3) + (7,) * d)))
        case(f"{pool}{d}d.ceil_pad", lambda P=P: P(3, stride=2, padding=1, ceil_mode=True), x_(*((2, 3) + (8,) * d)))
    case(f"MaxPool{d}d.indices", lambda d=d: getattr(nn, f"MaxPool{d}d")(2, return_indices=True), x_(*shp))
    case(f"MaxUnpool{d}d", lambda d=d: Fn(lambda m, x: m.u(*m.p(x)), p=getattr(nn, f"MaxPool{d}d")(2, return_indices=True),
                                         u=getattr(nn, f"MaxUnpool{d}d")(2)), x_(*shp))
    case(f"AdaptiveAvgPool{d}d", lambda d=d: getattr(nn, f"AdaptiveAvgPool{d}d")(3), x_(*((2, 3) + (7,) * d)))
    case(f"AdaptiveMaxPool{d}d.indices", lambda d=d: getattr(nn, f"AdaptiveMaxPool{d}d")(3, return_indices=True),
         x_(*((2, 3) + (7,) * d)))
    case(f"LPPool{d}d", lambda d=d: getattr(nn, f"LPPool{d}d")(2, 2), x_(*shp)) if d < 3 or hasattr(nn, "LPPool3d") else None
case("AvgPool2d.divisor", lambda: nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False, divisor_override=2),
     x_(2, 3, 5, 5))
case("AdaptiveAvgPool2d.None", lambda: nn.AdaptiveAvgPool2d((None, 2)), x_(2, 3, 5, 7))
case("FractionalMaxPool2d", lambda: nn.FractionalMaxPool2d(2, output_size=3), x_(2, 3, 7, 7))

# ---------------------------------------------------------------- normalization
for d, shp in ((1, (4, 3, 5)), (2, (4, 3, 5, 5)), (3, (2, 3, 4, 4, 4))):
    BN = getattr(nn, f"BatchNorm{d}d")
    IN = getattr(nn, f"InstanceNorm{d}d")
    case(f"BatchNorm{d}d", lambda BN=BN: BN(3), x_(*shp))
    case(f"BatchNorm{d}d.no_stats", lambda BN=BN: BN(3, track_running_stats=False), x_(*shp))
    case(f"BatchNorm{d}d.no_affine_mom_none", lambda BN=BN: BN(3, affine=False, momentum=None), x_(*shp))
    case(f"InstanceNorm{d}d", lambda IN=IN: IN(3), x_(*shp))
    case(f"InstanceNorm{d}d.affine_stats", lambda IN=IN: IN(3, affine=True, track_running_stats=True), x_(*shp))
case("BatchNorm1d.2d_input", lambda: nn.BatchNorm1d(3), x_(4, 3))
case("LayerNorm", lambda: nn.LayerNorm(6), x_(2, 3, 6))
case("LayerNorm.2d_nobias", lambda: nn.LayerNorm([3, 6], bias=False), x_(2, 3, 6))
case("LayerNorm.no_affine", lambda: nn.LayerNorm(6, elementwise_affine=False), x_(2, 6))
case("GroupNorm", lambda: nn.GroupNorm(2, 4), x_(2, 4, 5, 5))
case("GroupNorm.no_affine", lambda: nn.GroupNorm(1, 4, affine=False), x_(2, 4, 5))
case("RMSNorm", lambda: nn.RMSNorm(6), x_(2, 3, 6))
case("RMSNorm.eps_none_2d", lambda: nn.RMSNorm([3, 6], eps=None), x_(2, 3, 6))
case("LocalResponseNorm", lambda: nn.LocalResponseNorm(3), x_(2, 5, 4, 4))
case("CrossMapLRN2d", lambda: nn.CrossMapLRN2d(3), x_(2, 5, 4, 4))
case("SyncBatchNorm.cpu_eval", lambda: nn.SyncBatchNorm(3), x_(4, 3, 5), modes=("eval",))

# ---------------------------------------------------------------- embeddings
ids = lambda s: (randint(s, 0, 10, 3, 4),)  # noqa: E731
case("Embedding", lambda: nn.Embedding(10, 5), ids)
case("Embedding.padding_idx", lambda: nn.Embedding(10, 5, padding_idx=0), ids)
case("Embedding.max_norm", lambda: nn.Embedding(10, 5, max_norm=1.0), ids)
case("Embedding.max_norm_p1_scale", lambda: nn.Embedding(10, 5, max_norm=0.5, norm_type=1.0, scale_grad_by_freq=True), ids)
case("Embedding.from_pretrained", lambda: nn.Embedding.from_pretrained(torch.randn(10, 5), freeze=False), ids)
case("EmbeddingBag.mean", lambda: nn.EmbeddingBag(10, 5, mode="mean"), ids)
case("EmbeddingBag.sum_offsets", lambda: nn.EmbeddingBag(10, 5, mode="sum"),
     lambda s: (randint(s, 0, 10, 8), torch.tensor([0, 3, 5])))
case("EmbeddingBag.max_psw", lambda: nn.EmbeddingBag(10, 5, mode="max", padding_idx=1), ids)
case("EmbeddingBag.per_sample_weights", lambda: Fn(lambda m, i, w: m.e(i, per_sample_weights=w), e=nn.EmbeddingBag(10, 5, mode="sum")),
     lambda s: (randint(s, 0, 10, 3, 4), rand(s, 3, 4)))
case("F.embedding.max_norm", lambda: Fn(lambda m, i: F.embedding(i, m.w, max_norm=1.0), w=nn.Parameter(torch.randn(10, 5) * 3)), ids)
case("F.one_hot", lambda: Fn(lambda m, i: F.one_hot(i, 10).float() * 2), ids)
case("F.one_hot.infer", lambda: Fn(lambda m, i: F.one_hot(i % 7)), ids)


# ---------------------------------------------------------------- recurrent
def rnn_cases():
    seq = lambda bf: (lambda s: (randn(s, 2, 5, 4) if bf else randn(s, 5, 2, 4),))  # noqa: E731
    for R in ("RNN", "LSTM", "GRU"):
        cls = getattr(nn, R)
        case(f"{R}", lambda cls=cls: cls(4, 6), seq(False))
        case(f"{R}.2layer_bf_bidir", lambda cls=cls: cls(4, 6, num_layers=2, batch_first=True, bidirectional=True), seq(True))
        case(f"{R}.dropout", lambda cls=cls: cls(4, 6, num_layers=2, dropout=0.3), seq(False))
        case(f"{R}.h0", lambda cls=cls, R=R: Fn(lambda m, x, h: m.r(x, h if R != "LSTM" else (h, h)), r=cls(4, 6, num_layers=2)),
             lambda s, R=R: (randn(s, 5, 2, 4), randn(s + 3, 2, 2, 6)))
        case(f"{R}.unbatched", lambda cls=cls: cls(4, 6), x_(5, 4))

        def packed(m, x, lengths):
            p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, h = m.r(p)
            out, lens = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
            return out, h, lens
        case(f"{R}.packed", lambda cls=cls: Fn(packed, r=cls(4, 6, batch_first=True, bidirectional=True)),
             lambda s: (randn(s, 3, 5, 4), torch.tensor([5, 2 + s % 3, 3])))
        case(f"{R}.packed_list_lengths", lambda cls=cls: Fn(packed, r=cls(4, 6, batch_first=True)),
             lambda s: (randn(s, 3, 5, 4), [5, 4, 2]))
        cell = getattr(nn, f"{R}Cell")
        case(f"{R}Cell", lambda cell=cell: cell(4, 6), x_(3, 4))
        case(f"{R}Cell.loop", lambda cell=cell, R=R: Fn(lambda m, x: cell_loop(m.c, x, R), c=cell(4, 6)), x_(5, 3, 4))
    case("LSTM.proj_size", lambda: nn.LSTM(4, 6, proj_size=3, num_layers=2, bidirectional=True), seq(False))
    case("RNN.relu", lambda: nn.RNN(4, 6, nonlinearity="relu", bias=False), seq(False))

    def packed_seq(m, a, b, c):
        p = nn.utils.rnn.pack_sequence([a, b, c], enforce_sorted=False)
        out, _ = m.r(p)
        padded = nn.utils.rnn.pad_sequence([a, b, c], batch_first=True)
        un = nn.utils.rnn.unpack_sequence(out)
        return padded, un, nn.utils.rnn.unpad_sequence(padded, torch.tensor([5, 3, 2]), batch_first=True)
    case("rnn_utils.pack_sequence", lambda: Fn(packed_seq, r=nn.GRU(4, 6)),
         lambda s: (randn(s, 5, 4), randn(s + 1, 3, 4), randn(s + 2, 2, 4)))


def cell_loop(cell, x, kind):
    h = None
    outs = []
    for t in range(x.shape[0]):
        h = cell(x[t], h)
        outs.append(h[0] if kind == "LSTM" else h)
    return torch.stack(outs)


rnn_cases()


# ---------------------------------------------------------------- attention and transformers
def mha_cases():
    E = 8
    qkv = lambda bf: (lambda s: tuple(randn(s + i, 2, 5, E) if bf else randn(s + i, 5, 2, E) for i in range(3)))  # noqa: E731
    case("MHA.self", lambda: Fn(lambda m, q: m.a(q, q, q), a=nn.MultiheadAttention(E, 2)), lambda s: (randn(s, 5, 2, E),))
    case("MHA.need_weights_false", lambda: Fn(lambda m, q, k, v: m.a(q, k, v, need_weights=False), a=nn.MultiheadAttention(E, 2)), qkv(False))
    case("MHA.bf_avg_false", lambda: Fn(lambda m, q, k, v: m.a(q, k, v, average_attn_weights=False),
                                        a=nn.MultiheadAttention(E, 2, batch_first=True)), qkv(True))
    case("MHA.attn_mask_bool", lambda: Fn(lambda m, q, k, v: m.a(q, k, v, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu(1)),
                                          a=nn.MultiheadAttention(E, 2)), qkv(False))
    case("MHA.attn_mask_float3d", lambda: Fn(lambda m, q, k, v, am: m.a(q, k, v, attn_mask=am),
                                             a=nn.MultiheadAttention(E, 2)), lambda s: qkv(False)(s) + (randn(s, 4, 5, 5),))
    case("MHA.key_padding_mask", lambda: Fn(lambda m, q, k, v, kpm: m.a(q, k, v, key_padding_mask=kpm),
                                            a=nn.MultiheadAttention(E, 2, batch_first=True)),
         lambda s: qkv(True)(s) + (torch.tensor([[False] * 5, [False] * 3 + [True] * 2]),))
    case("MHA.is_causal", lambda: Fn(lambda m, q: m.a(q, q, q, attn_mask=nn.Transformer.generate_square_subsequent_mask(5),
                                                      is_causal=True, need_weights=False),
                                     a=nn.MultiheadAttention(E, 2, batch_first=True)), lambda s: (randn(s, 2, 5, E),))
    case("MHA.kdim_vdim", lambda: Fn(lambda m, q, k, v: m.a(q, k, v), a=nn.MultiheadAttention(E, 2, kdim=6, vdim=3)),
         lambda s: (randn(s, 5, 2, E), randn(s + 1, 4, 2, 6), randn(s + 2, 4, 2, 3)))
    case("MHA.bias_kv_zero_attn", lambda: Fn(lambda m, q, k, v: m.a(q, k, v), a=nn.MultiheadAttention(E, 2, add_bias_kv=True,
                                                                                                       add_zero_attn=True, dropout=0.2)), qkv(False))
    case("MHA.unbatched", lambda: Fn(lambda m, q: m.a(q, q, q), a=nn.MultiheadAttention(E, 2)), lambda s: (randn(s, 5, E),))
    case("MHA.fastpath_bf_self_noweights", lambda: Fn(lambda m, q: m.a(q, q, q, need_weights=False)[0],
                                                       a=nn.MultiheadAttention(E, 2, batch_first=True)), lambda s: (randn(s, 2, 5, E),))

    T = dict(d_model=E, nhead=2, dim_feedforward=16, dropout=0.1)
    src = lambda s: (randn(s, 2, 5, E),)  # noqa: E731
    case("TransformerEncoderLayer", lambda: nn.TransformerEncoderLayer(batch_first=True, **T), src)
    case("TransformerEncoderLayer.norm_first_gelu", lambda: nn.TransformerEncoderLayer(batch_first=True, norm_first=True, activation="gelu", **T), src)
    case("TransformerEncoderLayer.seq_first_fn_act", lambda: nn.TransformerEncoderLayer(activation=F.silu, **T), src)
    case("TransformerEncoder.masks", lambda: Fn(lambda m, x, kpm: m.e(x, mask=nn.Transformer.generate_square_subsequent_mask(5),
                                                                     src_key_padding_mask=kpm, is_causal=True),
                                                e=nn.TransformerEncoder(nn.TransformerEncoderLayer(batch_first=True, **T), 2,
                                                                        enable_nested_tensor=False)),
         lambda s: (randn(s, 2, 5, E), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])))
    case("TransformerEncoder.nested_kpm", lambda: Fn(lambda m, x, kpm: m.e(x, src_key_padding_mask=kpm),
                                                     e=nn.TransformerEncoder(nn.TransformerEncoderLayer(batch_first=True, **T), 2,
                                                                             enable_nested_tensor=True, norm=nn.LayerNorm(E))),
         lambda s: (randn(s, 2, 5, E), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])))
    case("TransformerEncoder.plain", lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(batch_first=True, **T), 2), src)
    case("TransformerDecoderLayer", lambda: Fn(lambda m, x, mem: m.d(x, mem), d=nn.TransformerDecoderLayer(batch_first=True, **T)),
         lambda s: (randn(s, 2, 4, E), randn(s + 5, 2, 5, E)))
    case("TransformerDecoder.masks_norm_first", lambda: Fn(
        lambda m, x, mem, kpm: m.d(x, mem, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4), tgt_is_causal=True,
                                   memory_key_padding_mask=kpm),
        d=nn.TransformerDecoder(nn.TransformerDecoderLayer(batch_first=True, norm_first=True, **T), 2, norm=nn.LayerNorm(E))),
        lambda s: (randn(s, 2, 4, E), randn(s + 5, 2, 5, E), torch.tensor([[False] * 5, [False] * 2 + [True] * 3])))
    case("Transformer", lambda: Fn(lambda m, a, b: m.t(a, b, tgt_mask=m.t.generate_square_subsequent_mask(4)),
                                   t=nn.Transformer(num_encoder_layers=1, num_decoder_layers=1, batch_first=True, **T)),
         lambda s: (randn(s, 2, 5, E), randn(s + 5, 2, 4, E)))
    case("Transformer.seq_first_kpm", lambda: Fn(lambda m, a, b, kpm: m.t(a, b, src_key_padding_mask=kpm, memory_key_padding_mask=kpm),
                                                 t=nn.Transformer(num_encoder_layers=1, num_decoder_layers=1, **T)),
         lambda s: (randn(s, 5, 2, E), randn(s + 5, 4, 2, E), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])))

    sdpa_in = lambda s: tuple(randn(s + i, 2, 2, 5, 4) for i in range(3))  # noqa: E731
    case("F.sdpa", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v)), sdpa_in)
    case("F.sdpa.causal_scale", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)), sdpa_in)
    case("F.sdpa.bool_mask", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 5, dtype=torch.bool).tril())), sdpa_in)
    case("F.sdpa.float_mask_dropout", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.zeros(5, 5), dropout_p=0.2 if m.training else 0.0)), sdpa_in)
    case("F.sdpa.gqa", lambda: Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True)), sdpa_in)
    case("F.multi_head_attention_forward", lambda: Fn(lambda m, q: F.multi_head_attention_forward(
        q, q, q, 8, 2, m.a.in_proj_weight, m.a.in_proj_bias, None, None, False, 0.0, m.a.out_proj.weight, m.a.out_proj.bias,
        training=m.training), a=nn.MultiheadAttention(8, 2)), lambda s: (randn(s, 5, 2, 8),))


mha_cases()


# ---------------------------------------------------------------- dropout and activations
for D, shp in (("Dropout", (4, 6)), ("Dropout1d", (2, 3, 6)), ("Dropout2d", (2, 3, 4, 4)), ("Dropout3d", (2, 3, 2, 3, 3)),
               ("AlphaDropout", (4, 6)), ("FeatureAlphaDropout", (2, 3, 4, 4))):
    case(D, lambda D=D: getattr(nn, D)(0.3), x_(*shp))
case("Dropout.inplace", lambda: nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5, inplace=True)), x_(4, 6))
case("F.dropout.training_arg", lambda: Fn(lambda m, x: F.dropout(x, 0.4, training=m.training) + F.dropout(x, p=0.0)), x_(4, 6))

ACT_ARGS = {"Threshold": (0.1, 20.0), "Softmax": (1,), "Softmin": (1,), "LogSoftmax": (1,), "GLU": (), "Hardtanh": (-0.5, 0.5),
            "MultiheadAttention": None}
for A in torch.nn.modules.activation.__all__:
    if ACT_ARGS.get(A, ()) is None:
        continue
    shp = (2, 3, 4, 4) if A == "Softmax2d" else (3, 6)
    case(f"act.{A}", lambda A=A: getattr(nn, A)(*ACT_ARGS.get(A, ())), x_(*shp))
case("act.PReLU.channels", lambda: nn.PReLU(3), x_(2, 3, 4))
case("act.ReLU.inplace_after_linear", lambda: nn.Sequential(nn.Linear(6, 6), nn.ReLU(inplace=True), nn.Linear(6, 2)), x_(4, 6))
case("act.Softmax.dim_none", lambda: nn.Softmax(), x_(3, 6))
case("act.RReLU.train_random", lambda: nn.RReLU(0.1, 0.3), x_(3, 6))
case("act.CELU.alpha", lambda: nn.CELU(0.5), x_(3, 6))
case("act.GELU.tanh", lambda: nn.GELU("tanh"), x_(3, 6))
case("act.Softplus.beta", lambda: nn.Softplus(beta=2, threshold=1), x_(3, 6))

# ---------------------------------------------------------------- shape and resampling modules
case("Upsample.nearest", lambda: nn.Upsample(scale_factor=2), x_(2, 3, 4, 4))
case("Upsample.bilinear_ac", lambda: nn.Upsample(size=(7, 5), mode="bilinear", align_corners=True), x_(2, 3, 4, 4))
case("UpsamplingNearest2d", lambda: nn.UpsamplingNearest2d(scale_factor=2), x_(2, 3, 4, 4))
case("UpsamplingBilinear2d", lambda: nn.UpsamplingBilinear2d(size=6), x_(2, 3, 4, 4))
for mode, shp, extra in (("nearest", (2, 3, 5), {}), ("linear", (2, 3, 5), {"align_corners": False}),
                         ("bilinear", (2, 3, 4, 5), {}), ("bicubic", (2, 3, 4, 5), {"align_corners": True}),
                         ("trilinear", (2, 3, 3, 4, 4), {}), ("area", (2, 3, 6, 6), {}),
                         ("nearest-exact", (2, 3, 5, 5), {}), ("bilinear", (2, 3, 6, 6), {"antialias": True})):
    case(f"F.interpolate.{mode}{'.aa' if extra.get('antialias') else ''}.scale",
         lambda mode=mode, extra=extra: Fn(lambda m, x: F.interpolate(x, scale_factor=1.5, mode=mode, **extra)), x_(*shp))
    case(f"F.interpolate.{mode}{'.aa' if extra.get('antialias') else ''}.size",
         lambda mode=mode, extra=extra, n=len(shp) - 2: Fn(lambda m, x: F.interpolate(x, size=(3,) * n, mode=mode, **extra)), x_(*shp))
case("F.interpolate.recompute_scale", lambda: Fn(lambda m, x: F.interpolate(x, scale_factor=0.7, mode="bilinear",
                                                                            recompute_scale_factor=True)), x_(2, 3, 6, 6))
case("F.interpolate.size_from_tensor", lambda: Fn(lambda m, x, y: F.interpolate(x, size=y.shape[-2:], mode="nearest") + y),
     lambda s: (randn(s, 2, 3, 4, 4), randn(s + 1, 2, 3, 8, 8)))
for mode in ("bilinear", "nearest", "bicubic"):
    for pad in ("zeros", "border", "reflection"):
        case(f"F.grid_sample.{mode}.{pad}", lambda mode=mode, pad=pad: Fn(lambda m, x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad,
                                                                                                      align_corners=False)),
             lambda s: (randn(s, 2, 3, 5, 5), rand(s + 1, 2, 4, 4, 2) * 2.4 - 1.2))
case("F.affine_grid+grid_sample", lambda: Fn(lambda m, x, t: F.grid_sample(x, F.affine_grid(t, list(x.shape), align_corners=True),
                                                                           align_corners=True)),
     lambda s: (randn(s, 2, 3, 5, 5), torch.eye(2, 3).expand(2, 2, 3) + 0.1 * randn(s, 2, 2, 3)))
case("F.grid_sample.3d", lambda: Fn(lambda m, x, g: F.grid_sample(x, g, align_corners=True)),
     lambda s: (randn(s, 1, 2, 3, 4, 4), rand(s + 1, 1, 2, 3, 3, 3) * 2 - 1))
case("PixelShuffle", lambda: nn.PixelShuffle(2), x_(2, 8, 3, 3))
case("PixelUnshuffle", lambda: nn.PixelUnshuffle(2), x_(2, 2, 4, 4))
case("ChannelShuffle", lambda: nn.ChannelShuffle(2), x_(2, 4, 3, 3))
case("Fold", lambda: nn.Fold(output_size=(4, 5), kernel_size=2), x_(2, 12, 12))
case("Unfold", lambda: nn.Unfold(kernel_size=2, dilation=1, padding=1, stride=2), x_(2, 3, 5, 5))
case("Fold(Unfold)", lambda: nn.Sequential(nn.Unfold(2, stride=2), nn.Fold((4, 4), 2, stride=2)), x_(2, 3, 4, 4))
case("Flatten", lambda: nn.Flatten(), x_(2, 3, 4))
case("Flatten.dims", lambda: nn.Flatten(0, 1), x_(2, 3, 4))
case("Unflatten", lambda: nn.Unflatten(1, (2, 3)), x_(2, 6, 4))
case("Unflatten.named", lambda: nn.Sequential(nn.Unflatten(1, torch.Size([3, 2]))), x_(2, 6))
for P in ("ReflectionPad", "ReplicationPad", "ZeroPad", "ConstantPad", "CircularPad"):
    for d in (1, 2, 3):
        cls = getattr(nn, f"{P}{d}d", None)
        if cls is None:
            continue
        args = (1, 0.5) if P == "ConstantPad" else (1,)
        case(f"{P}{d}d", lambda cls=cls, args=args: cls(*args), x_(*((2, 3) + (4,) * d)))
case("ReflectionPad2d.tuple", lambda: nn.ReflectionPad2d((1, 2, 0, 1)), x_(2, 3, 4, 4))
for mode in ("constant", "reflect", "replicate", "circular"):
    case(f"F.pad.{mode}", lambda mode=mode: Fn(lambda m, x: F.pad(x, (1, 2, 2, 1), mode=mode)), x_(2, 3, 4, 4))
case("F.pad.negative", lambda: Fn(lambda m, x: F.pad(x, (-1, 1))), x_(2, 3, 4))


# ---------------------------------------------------------------- losses
def loss_cases():
    N, C = 4, 5
    xy = lambda s: (randn(s, N, C), randn(s + 1, N, C))  # noqa: E731
    target = lambda s: randint(s + 7, 0, C, N)  # noqa: E731
    pm1 = lambda s, *shape: (randint(s + 3, 0, 2, *shape) * 2 - 1).float()  # noqa: E731
    spec = {
        "L1Loss": (xy, {}), "MSELoss": (xy, {}), "SmoothL1Loss": (xy, {"beta": 0.5}), "HuberLoss": (xy, {"delta": 0.7}),
        "NLLLoss": (lambda s: (F.log_softmax(randn(s, N, C), 1), target(s)), {"weight": torch.rand(C), "ignore_index": 2}),
        "CrossEntropyLoss": (lambda s: (randn(s, N, C), target(s)), {"weight": torch.rand(C), "ignore_index": 1,
                                                                     "label_smoothing": 0.1}),
        "PoissonNLLLoss": (xy, {"log_input": True, "full": True}),
        "GaussianNLLLoss": (lambda s: (randn(s, N, C), randn(s + 1, N, C), rand(s + 2, N, C) + 0.1), {"full": True}),
        "KLDivLoss": (lambda s: (F.log_softmax(randn(s, N, C), 1), F.softmax(randn(s + 1, N, C), 1)), {}),
        "BCELoss": (lambda s: (rand(s, N, C) * 0.9 + 0.05, rand(s + 1, N, C)), {"weight": torch.rand(C)}),
        "BCEWithLogitsLoss": (xy, {"pos_weight": torch.rand(C) + 0.5}),
        "HingeEmbeddingLoss": (lambda s: (randn(s, N, C), pm1(s, N, C)), {"margin": 0.5}),
        "MultiLabelMarginLoss": (lambda s: (randn(s, N, C), torch.tensor([[3, 0, -1, 1, 1], [0, 1, 2, 3, 4],
                                                                          [1, -1, 0, 0, 0], [4, 2, -1, 0, 0]])), {}),
        "SoftMarginLoss": (lambda s: (randn(s, N, C), pm1(s, N, C)), {}),
        "MultiLabelSoftMarginLoss": (lambda s: (randn(s, N, C), rand(s + 1, N, C).round()), {"weight": torch.rand(C)}),
        "CosineEmbeddingLoss": (lambda s: (randn(s, N, C), randn(s + 1, N, C), pm1(s, N)), {"margin": 0.2}),
        "MarginRankingLoss": (lambda s: (randn(s, N), randn(s + 1, N), pm1(s, N)), {"margin": 0.1}),
        "MultiMarginLoss": (lambda s: (randn(s, N, C), target(s)), {"p": 2, "margin": 0.5, "weight": torch.rand(C)}),
        "TripletMarginLoss": (lambda s: (randn(s, N, C), randn(s + 1, N, C), randn(s + 2, N, C)), {"swap": True, "p": 1.5}),
        "TripletMarginWithDistanceLoss": (lambda s: (randn(s, N, C), randn(s + 1, N, C), randn(s + 2, N, C)),
                                          {"distance_function": nn.PairwiseDistance(), "margin": 0.5, "swap": True}),
        "CTCLoss": (lambda s: (F.log_softmax(randn(s, 8, 2, C), 2), randint(s + 1, 1, C, 2, 3), torch.tensor([8, 6]),
                               torch.tensor([3, 2])), {"blank": 0, "zero_infinity": True}),
    }
    special = {"NLLLoss2d", "LinearCrossEntropyLoss"}  # deprecated alias; below (needs sizes)
    missing = {n for n in torch.nn.modules.loss.__all__} - set(spec) - special
    assert not missing, f"loss classes without a case: {missing}"
    if hasattr(nn, "LinearCrossEntropyLoss"):
        for reduction in ("mean", "sum", "none"):
            case(f"loss.LinearCrossEntropyLoss.{reduction}", lambda reduction=reduction: nn.LinearCrossEntropyLoss(
                C + 1, C, bias=True, reduction=reduction, ignore_index=2, label_smoothing=0.1), lambda s: (randn(s, N, C + 1), target(s)))
    for name, (inputs, options) in spec.items():
        cls = getattr(nn, name)
        for reduction in ("mean", "sum", "none"):
            case(f"loss.{name}.{reduction}", lambda cls=cls, reduction=reduction: cls(reduction=reduction), inputs)
        if options:
            case(f"loss.{name}.options", lambda cls=cls, options=options: cls(**options), inputs)
    case("loss.CrossEntropyLoss.prob_target_smooth", lambda: nn.CrossEntropyLoss(label_smoothing=0.2),
         lambda s: (randn(s, N, C), F.softmax(randn(s + 1, N, C), 1)))
    case("loss.CrossEntropyLoss.4d_ignore", lambda: nn.CrossEntropyLoss(ignore_index=0),
         lambda s: (randn(s, 2, C, 3, 3), randint(s + 1, 0, C, 2, 3, 3)))
    case("loss.NLLLoss.all_ignored_sum", lambda: nn.NLLLoss(ignore_index=1, reduction="sum"),
         lambda s: (F.log_softmax(randn(s, N, C), 1), torch.ones(N, dtype=torch.long)))
    case("loss.KLDivLoss.log_target_batchmean", lambda: nn.KLDivLoss(reduction="batchmean", log_target=True),
         lambda s: (F.log_softmax(randn(s, N, C), 1), F.log_softmax(randn(s + 1, N, C), 1)))
    case("loss.CTCLoss.concat_targets", lambda: nn.CTCLoss(),
         lambda s: (F.log_softmax(randn(s, 8, 2, C), 2), randint(s + 1, 1, C, 5), [8, 7], [3, 2]))
    case("AdaptiveLogSoftmaxWithLoss", lambda: nn.AdaptiveLogSoftmaxWithLoss(6, 10, cutoffs=[4, 7], div_value=2.0),
         lambda s: (randn(s, 5, 6), randint(s + 1, 0, 10, 5)))
    case("F.cross_entropy.functional", lambda: Fn(lambda m, x, t: F.cross_entropy(x, t, reduction="mean", label_smoothing=0.05)
                                                  + F.nll_loss(F.log_softmax(x, -1), t) + F.mse_loss(x, x.detach() * 0.5)),
         lambda s: (randn(s, N, C), target(s)))
    case("PairwiseDistance", lambda: nn.PairwiseDistance(p=3, keepdim=True), lambda s: (randn(s, N, C), randn(s + 1, N, C)))
    case("CosineSimilarity", lambda: nn.CosineSimilarity(dim=1), lambda s: (randn(s, N, C), randn(s + 1, N, C)))


loss_cases()


# ---------------------------------------------------------------- containers
def container_cases():
    case("Sequential", lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), x_(4, 6))
    case("Sequential.ordered_slice", lambda: Fn(lambda m, x: m.s[1:](m.s[0](x)) + m.s[-1](m.s[:-1](x)) + len(m.s),
                                                s=nn.Sequential(__import__("collections").OrderedDict(
                                                    a=nn.Linear(6, 6), b=nn.Tanh(), c=nn.Linear(6, 6)))), x_(4, 6))

    def mlist(m, x):
        for i, layer in enumerate(m.layers):
            x = layer(x) + (i if i % 2 else 0)
        for a, b in zip(m.layers[::2], m.layers[1::2]):
            x = a(b(x))
        return x, m.layers[-1].weight.sum()
    case("ModuleList", lambda: Fn(mlist, layers=nn.ModuleList([nn.Linear(6, 6) for _ in range(4)])), x_(4, 6))

    def mdict(m, x):
        out = 0
        for k, v in m.d.items():
            out = out + v(x) * len(k)
        return out + m.d["b"](x) + sum(1 for k in m.d.keys() if k in m.d) + ("a" in m.d)
    case("ModuleDict", lambda: Fn(mdict, d=nn.ModuleDict({"a": nn.Linear(6, 3), "b": nn.Linear(6, 3)})), x_(4, 6))

    def plist(m, x):
        for p in m.ps:
            x = x * p
        return x + m.ps[1] + len(m.ps)
    case("ParameterList", lambda: Fn(plist, ps=nn.ParameterList([nn.Parameter(torch.randn(6)) for _ in range(3)])), x_(4, 6))

    def pdict(m, x):
        for k, p in m.pd.items():
            x = x + p * len(k)
        return x * m.pd["w"] + sum(v.sum() for v in m.pd.values())
    case("ParameterDict", lambda: Fn(pdict, pd=nn.ParameterDict({"w": nn.Parameter(torch.randn(6)), "bb": nn.Parameter(torch.randn(6))})),
         x_(4, 6))

    def children_iter(m, x):
        for name, mod in m.s.named_children():
            x = mod(x)
        n = sum(p.numel() for p in m.s.parameters())
        return x * n + sum(b.sum() for b in m.s.buffers())
    case("named_children_parameters", lambda: Fn(children_iter, s=nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6))), x_(4, 6))


container_cases()


# ---------------------------------------------------------------- nn.utils, nn.init, distributions
def utils_cases():
    def clip_step(m, x):
        loss = m.net(x).pow(2).mean()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(m.net.parameters(), 0.1)
        nn.utils.clip_grad_value_(m.net.parameters(), 0.05)
        return loss.detach(), norm
    case("utils.clip_grad_norm_step", lambda: Fn(clip_step, net=nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))),
         x_(4, 6), modes=("train",))
    case("utils.clip_grad_norm_foreach_inf", lambda: Fn(lambda m, x: (m.net(x).sum().backward(),
                                                                      nn.utils.clip_grad_norm_(m.net.parameters(), 0.5, norm_type="inf", foreach=False))[1],
                                                        net=nn.Linear(6, 3)), x_(4, 6), modes=("train",))
    case("utils.get_total_norm", lambda: Fn(lambda m, x: nn.utils.get_total_norm([m.l(x), x * 2], 2.0), l=nn.Linear(6, 3)), x_(4, 6))
    P = nn.utils.parametrizations
    case("param.weight_norm", lambda: P.weight_norm(nn.Linear(6, 4)), x_(3, 6))
    case("param.weight_norm_conv_dim1", lambda: P.weight_norm(nn.Conv1d(3, 4, 3), dim=1), x_(2, 3, 6))
    case("param.spectral_norm", lambda: P.spectral_norm(nn.Linear(6, 4)), x_(3, 6))
    case("param.orthogonal", lambda: P.orthogonal(nn.Linear(6, 4)), x_(3, 6))
    case("param.orthogonal_cayley", lambda: P.orthogonal(nn.Linear(5, 5), orthogonal_map="cayley"), x_(3, 5))
    case("param.cached", lambda: Fn(lambda m, x: cached_call(m.l, x), l=P.weight_norm(nn.Linear(6, 4))), x_(3, 6))
    case("utils.weight_norm_old", lambda: nn.utils.weight_norm(nn.Linear(6, 4)), x_(3, 6))
    case("utils.spectral_norm_old", lambda: nn.utils.spectral_norm(nn.Linear(6, 4)), x_(3, 6))

    class Sym(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(-1, -2)
    case("param.register_custom", lambda: nn.utils.parametrize.register_parametrization(nn.Linear(5, 5), "weight", Sym()), x_(3, 5))
    case("utils.parameters_to_vector", lambda: Fn(lambda m, x: m.l(x).sum() * nn.utils.parameters_to_vector(m.l.parameters()).sum(),
                                                  l=nn.Linear(6, 3)), x_(4, 6))
    case("utils.vector_to_parameters", lambda: Fn(vec_roundtrip, l=nn.Linear(6, 3)), x_(4, 6), modes=("eval",))
    case("utils.stateless.functional_call", lambda: Fn(lambda m, x: torch.func.functional_call(
        m.l, {"weight": m.l.weight * 2, "bias": m.l.bias}, (x,)), l=nn.Linear(6, 3)), x_(4, 6))
    case("utils.fuse_conv_bn_eval", lambda: Fn(lambda m, x: m.c(x), c=nn.utils.fusion.fuse_conv_bn_eval(
        nn.Conv2d(3, 4, 3).eval(), nn.BatchNorm2d(4).eval())), x_(2, 3, 5, 5))

    def init_in_forward(m, x):
        w = torch.empty(6, 4)
        nn.init.xavier_uniform_(w)
        b = torch.empty(4)
        nn.init.zeros_(b)
        nn.init.constant_(m.extra, 0.5)
        k = torch.empty(4, 6)
        nn.init.kaiming_normal_(k, nonlinearity="relu")
        o = torch.empty(4, 4)
        nn.init.orthogonal_(o)
        t = torch.empty(4)
        nn.init.trunc_normal_(t, std=0.02)
        e = torch.empty(4, 4)
        nn.init.eye_(e)
        u = torch.empty(4)
        nn.init.uniform_(u, -0.1, 0.1)
        n = torch.empty(4)
        nn.init.normal_(n, 0.0, 0.5)
        return x @ w + b + (x @ k.t()) @ o @ e + m.extra + t + u + n + nn.init.calculate_gain("leaky_relu", 0.2)
    case("init.in_forward", lambda: Fn(init_in_forward, extra=nn.Parameter(torch.zeros(4), requires_grad=False)), x_(3, 6))

    def reset_in_forward(m, x):
        m.l.reset_parameters()
        return m.l(x)
    case("init.reset_parameters", lambda: Fn(reset_in_forward, l=nn.Linear(6, 4)), x_(3, 6), modes=("eval",))

    D = torch.distributions

    def normal(m, x):
        d = D.Normal(m.l(x), F.softplus(m.s) + 0.1)
        s = d.sample()
        r = d.rsample()
        return d.log_prob(s), d.entropy(), r, d.mean, d.stddev, d.cdf(r.detach())
    case("dist.Normal", lambda: Fn(normal, l=nn.Linear(6, 3), s=nn.Parameter(torch.randn(3))), x_(4, 6))

    def categorical(m, x):
        d = D.Categorical(logits=m.l(x))
        s = d.sample()
        return d.log_prob(s), d.entropy(), s, d.probs
    case("dist.Categorical", lambda: Fn(categorical, l=nn.Linear(6, 5)), x_(4, 6))
    case("dist.Categorical.probs_validate", lambda: Fn(lambda m, x: D.Categorical(probs=F.softmax(m.l(x), -1), validate_args=True)
                                                       .log_prob(torch.tensor([0, 1, 2, 3])), l=nn.Linear(6, 5)), x_(4, 6))
    case("dist.Bernoulli_Independent", lambda: Fn(lambda m, x: D.Independent(D.Bernoulli(logits=m.l(x)), 1)
                                                  .log_prob((x[:, :3] > 0).float()), l=nn.Linear(6, 3)), x_(4, 6))
    case("dist.MultivariateNormal", lambda: Fn(lambda m, x: D.MultivariateNormal(m.l(x), scale_tril=torch.eye(3) * 2)
                                               .log_prob(x[:, :3]), l=nn.Linear(6, 3)), x_(4, 6))
    case("dist.kl_Normal", lambda: Fn(lambda m, x: D.kl_divergence(D.Normal(m.l(x), 1.0), D.Normal(0.0, 2.0)), l=nn.Linear(6, 3)),
         x_(4, 6))


def cached_call(layer, x):
    with nn.utils.parametrize.cached():
        return layer(x) + layer(x * 2)


def vec_roundtrip(m, x):
    v = nn.utils.parameters_to_vector(m.l.parameters())
    nn.utils.vector_to_parameters(v * 0.5, m.l.parameters())
    return m.l(x)


utils_cases()


# ---------------------------------------------------------------- small models mixing the above
def model_cases():
    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                          nn.MaxPool2d(2), nn.Conv2d(8, 8, 3), nn.AdaptiveAvgPool2d(1))
            self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(8, 4))

        def forward(self, x):
            return F.log_softmax(self.head(self.features(x)), dim=-1)
    case("model.ConvNet", ConvNet, x_(2, 3, 8, 8))

    class LSTMTagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 6, padding_idx=0)
            self.lstm = nn.LSTM(6, 8, batch_first=True, bidirectional=True)
            self.out = nn.Linear(16, 5)
            self.loss = nn.CrossEntropyLoss(ignore_index=-100)

        def forward(self, ids, tags):
            h, _ = self.lstm(self.emb(ids))
            logits = self.out(h)
            return self.loss(logits.view(-1, 5), tags.view(-1)), logits.argmax(-1)
    case("model.LSTMTagger", LSTMTagger, lambda s: (randint(s, 0, 20, 2, 6), randint(s + 1, 0, 5, 2, 6)))


model_cases()


def functional_cases():
    two = lambda s: (randn(s, 4, 6), randn(s + 1, 4, 6))  # noqa: E731
    for name, fn in (("normalize", lambda m, x, y: F.normalize(x, dim=-1) + F.normalize(y, p=1, dim=0)),
                     ("cosine_similarity", lambda m, x, y: F.cosine_similarity(x, y, dim=-1, eps=1e-6)),
                     ("pairwise_distance", lambda m, x, y: F.pairwise_distance(x, y, keepdim=True)),
                     ("cdist", lambda m, x, y: torch.cdist(x, y) + torch.cdist(x, y, p=1)),
                     ("gumbel_softmax", lambda m, x, y: F.gumbel_softmax(x, tau=0.5, hard=True) * y),
                     ("layer_norm_group_norm", lambda m, x, y: F.layer_norm(x, (6,)) + F.group_norm(y.view(4, 6, 1), 2).view(4, 6)),
                     ("batch_norm_functional", lambda m, x, y: F.batch_norm(x, torch.zeros(6), torch.ones(6), training=m.training)),
                     ("softmax_dtype_logsigmoid", lambda m, x, y: F.softmax(x, -1, dtype=torch.float64).float() + F.logsigmoid(y)),
                     ("glu_hardtanh_rrelu", lambda m, x, y: F.glu(torch.cat([x, y], -1)) + F.hardtanh(x, -0.2, 0.2)
                      + F.rrelu(y, training=False)),
                     ("linear_bilinear", lambda m, x, y: F.linear(x, y[:3]) + F.bilinear(x[:, :3], y[:, :2], torch.ones(3, 3, 2)).sum()),
                     ("unfold_fold", lambda m, x, y: F.fold(F.unfold(x.view(1, 1, 4, 6), 2), (4, 6), 2)),
                     ("embedding_bag_functional", lambda m, x, y: F.embedding_bag(torch.tensor([[0, 2], [1, 3]]), x, mode="max")),
                     ("pdist_triu", lambda m, x, y: F.pdist(x) + torch.triu_indices(4, 4, 1)[0].float().sum()),
                     ("local_response_norm", lambda m, x, y: F.local_response_norm(x.view(1, 4, 6), 2)),
                     ("max_pool_with_indices", lambda m, x, y: F.max_pool1d(x.view(1, 4, 6), 2, return_indices=True)),
                     ("adaptive_max_pool_indices", lambda m, x, y: F.adaptive_max_pool1d(x.view(1, 4, 6), 2, return_indices=True)),
                     ("alpha_dropout_feature", lambda m, x, y: F.alpha_dropout(x, 0.2, m.training) + F.feature_alpha_dropout(y, 0.2, m.training)),
                     ("channel_shuffle_pixel", lambda m, x, y: F.pixel_shuffle(F.channel_shuffle(x.view(1, 4, 2, 3), 2), 2)),
                     ("celu_selu_mish", lambda m, x, y: F.celu(x) + F.selu(y) + F.mish(x) + F.hardswish(y) + F.silu(x, inplace=False)),
                     ("threshold_inplace", lambda m, x, y: F.threshold(x * 1, 0.1, 2.0) + F.relu_(y * 1) + F.leaky_relu(x, 0.3)),
                     ("ctc_functional", lambda m, x, y: F.ctc_loss(F.log_softmax(x.view(4, 1, 6), -1), torch.tensor([[1, 2]]),
                                                                   torch.tensor([4]), torch.tensor([2]))),
                     ("margin_losses", lambda m, x, y: F.margin_ranking_loss(x[:, 0], y[:, 0], torch.ones(4))
                      + F.hinge_embedding_loss(x, torch.ones(4, 6)) + F.soft_margin_loss(x, torch.ones(4, 6))),
                     ("kl_div_poisson", lambda m, x, y: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean")
                      + F.poisson_nll_loss(x, y.abs())),
                     ("one_hot_scatter", lambda m, x, y: torch.zeros(4, 6).scatter_(1, x.argmax(-1, keepdim=True), 1.0) * y
                      + F.one_hot(y.argmax(-1), 6)),
                     ):
        case(f"F.{name}", lambda fn=fn: Fn(fn), two)

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.out = nn.Linear(6, 10, bias=False)
            self.out.weight = self.emb.weight
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))

        def forward(self, ids):
            self.steps += 1
            return self.out(torch.tanh(self.emb(ids))) * self.steps
    case("model.tied_weights_buffer_update", Tied, ids)

    def sgd_like(m, x):
        loss = m.l(x).square().mean()
        grads = torch.autograd.grad(loss, list(m.l.parameters()))
        with torch.no_grad():
            for p, g in zip(m.l.parameters(), grads):
                p.sub_(0.1 * g)
        return loss.detach()
    case("autograd.grad_manual_sgd", lambda: Fn(sgd_like, l=nn.Linear(6, 3)), x_(4, 6), modes=("train",))

    def ckpt(m, x):
        return torch.utils.checkpoint.checkpoint(m.s, x, use_reentrant=False)
    case("utils.checkpoint", lambda: Fn(ckpt, s=nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 2))), x_(4, 6))

    def hooks():
        m = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
        m[0].register_forward_hook(lambda mod, inp, out: out * 2)
        m[2].register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
        return m
    case("module_hooks", hooks, x_(4, 6))
    case("named_modules_apply", lambda: Fn(lambda m, x: sum(mod(x).sum() for name, mod in m.d.named_modules() if isinstance(mod, nn.Linear)),
                                           d=nn.Sequential(nn.Linear(6, 6), nn.Sequential(nn.Linear(6, 6)))), x_(4, 6))


functional_cases()
CASES = [c for c in CASES if c is not None]


# ================================================================ running
def flat(x):
    leaves, _ = pytree.tree_flatten(x)
    return leaves


def prep_inputs(args, mode):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and mode == "train":
            a = a.clone().requires_grad_(True)
        out.append(a)
    return tuple(out)


def run_calls(c: Case, mode: str, wrap, counter=None):
    """Three calls of a fresh module; `counter` (a backend) has its graph count recorded after each call
    in `counter.per_call`."""
    torch.manual_seed(0)
    m = c.make()
    if isinstance(m, nn.Module):
        m.train(mode == "train")
    f = wrap(m)
    results = []
    for call in range(3):
        args = prep_inputs(c.inputs(call), mode)
        torch.manual_seed(100 + call)
        if mode == "eval":
            with torch.no_grad():
                out = f(*args)
            results.append(("out", flat(out)))
            if counter is not None:
                counter.per_call.append(counter.graph_count)
            continue
        for p in m.parameters():
            p.grad = None
        out = f(*args)
        outs = flat(out)
        loss = [o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        if loss:
            sum(loss).backward()
        grads = [a.grad for a in args if isinstance(a, torch.Tensor)] + [p.grad for p in m.parameters()]
        results.append(("out", [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]))
        results.append(("grads", grads))
        if counter is not None:
            counter.per_call.append(counter.graph_count)
    results.append(("state", [t.detach().clone() for t in m.state_dict().values()]))
    return results


def max_diff(got, want):
    """Largest abs difference normalised by magnitude (inf on a structure/type/shape mismatch)."""
    worst = 0.0
    if len(got) != len(want):
        return math.inf
    for (kg, g), (kw, w) in zip(got, want):
        if kg != kw or len(g) != len(w):
            return math.inf
        for a, b in zip(g, w):
            if isinstance(b, torch.Tensor):
                if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
                    return math.inf
                if b.numel() == 0:
                    continue
                if b.layout != torch.strided or a.layout != torch.strided:
                    a, b = a.to_padded_tensor(0.0) if a.is_nested else a, b.to_padded_tensor(0.0) if b.is_nested else b
                a64, b64 = a.double(), b.double()
                both_nan = a64.isnan() & b64.isnan()
                if (a64.isnan() != b64.isnan()).any():
                    return math.inf
                d = ((a64 - b64).abs() / (1 + b64.abs())).masked_fill(both_nan, 0).max().item()
                worst = max(worst, d)
            elif (a is None) != (b is None):
                return math.inf
            elif b is not None and type(a) is not type(b):
                return math.inf
            elif b is not None and not isinstance(b, torch.Tensor) and a != b and not (isinstance(b, float) and math.isclose(a, b, rel_tol=1e-5)):
                return math.inf
    return worst


class BreakLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.msgs = []

    def emit(self, r):
        if r.name.endswith("graph_breaks"):
            self.msgs.append(" ".join(r.getMessage().split())[:220])


class Counter(CountingBackend):
    """A counting backend (graphs, per-call graph counts, tensor ops in all graphs) that compiles each graph
    with `inner` (None: runs it as Python, like `eager`)."""

    def __init__(self, inner=None):
        super().__init__()
        self.inner = inner
        self.per_call = []

    def __call__(self, gm, example_inputs):
        fn = super().__call__(gm, example_inputs)
        return fn if self.inner is None else self.inner(gm, example_inputs)

    @property
    def ops(self):
        return sum(self.op_count(i) for i in range(len(self.graphs)))


def stock(c, mode):
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    cb = Counter()
    try:
        res = run_calls(c, mode, lambda m: torch.compile(m, backend=cb), cb)
        return res, cb, sum(counters["graph_break"].values()), dict(counters["graph_break"]), None
    except Exception as e:  # noqa: BLE001
        return None, cb, sum(counters["graph_break"].values()), dict(counters["graph_break"]), e
    finally:
        torch._dynamo.reset()


def fj(c, mode, backend):
    framejit.reset()
    cb = Counter(None if backend == "eager" else framejit.lookup_backend(backend))
    log = BreakLog()
    lg = logging.getLogger("framejit")
    lg.addHandler(log)
    framejit.set_logs("graph_breaks")
    e0 = framejit.stats()["eager_frames"]
    err = None
    res = None
    try:
        res = run_calls(c, mode, lambda m: framejit.compile(m, backend=cb), cb)
    except Exception as e:  # noqa: BLE001
        err = e
        err.tb = traceback.format_exc()
    finally:
        framejit.set_logs("")
        lg.removeHandler(log)
    eager = framejit.stats()["eager_frame_reasons"][e0:]
    return res, cb, log.msgs, eager, err


def run_case(c, mode, args):
    t0 = time.time()
    try:
        want = run_calls(c, mode, lambda m: m)
        eerr = None
    except Exception as e:  # noqa: BLE001
        want, eerr = None, e
    if args.no_stock:
        sres, scb, sb, sreasons, serr = None, None, "-", {}, None
    else:
        sres, scb, sb, sreasons, serr = stock(c, mode)
    res, fcb, breaks, eager, err = fj(c, mode, args.backend)
    g, sg = fcb.graph_count, (scb.graph_count if scb is not None else "-")
    if eerr is not None:
        status = "OK" if err is not None and type(err) is type(eerr) else "CRASH"
        diff = "-"
    elif err is not None:
        status, diff = "CRASH", "-"
    else:
        diff = max_diff(res, want)
        scale = c.rtol * (50 if args.backend == "onnxrt" else 1)
        if diff > scale:
            status = "DIFF"
        elif eager:
            status = "EAGER"
        elif isinstance(sg, int) and serr is None and g > sg:
            # more graphs, but more of the work in graphs (stock ran nn code eagerly): captures more
            status = "MORE+" if fcb.ops > scb.ops else "MORE"
        elif isinstance(sg, int) and serr is None and g < sg:
            status = "FEWER"
        else:
            status = "OK"
    sdiff = "-" if sres is None or want is None else f"{max_diff(sres, want):.1e}"
    sops = f"{scb.per_call} ops={scb.ops}" if scb is not None else ""
    row = (f"ROW {status:5} {c.name}.{mode} | stock g={sg} {sops} b={sb}{' ERR ' + type(serr).__name__ if serr else ''} sdiff={sdiff} | "
           f"framejit g={g} {fcb.per_call} ops={fcb.ops} b={len(breaks)} eager={len(eager)} "
           f"diff={diff if isinstance(diff, str) else f'{diff:.1e}'}"
           f"{' eagerERR ' + type(eerr).__name__ if eerr else ''} | {time.time() - t0:.1f}s")
    print(row, flush=True)
    detail = []
    if err is not None:
        detail.append(f"    ERR {type(err).__name__}: {str(err)[:300]}")
        if args.verbose:
            detail.append(err.tb)
    if serr is not None and args.verbose:
        detail.append(f"    stock ERR {type(serr).__name__}: {str(serr)[:200]}")
    for e in eager[:3]:
        detail.append(f"    EAGER {e.get('function')} {e.get('location')}: {str(e.get('reason'))[:250]}")
    for b in breaks[:4 if status != "OK" else 0]:
        detail.append(f"    BREAK {b}")
    if status in ("MORE", "MORE+", "FEWER") or args.verbose:
        for k, v in list(sreasons.items())[:3]:
            detail.append(f"    STOCK-BREAK {v}x {k[:200]}")
    for d in detail:
        print(d, flush=True)
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="eager", choices=["eager", "onnxrt"])
    ap.add_argument("--modes", default="eval,train")
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--no-stock", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    modes = args.modes.split(",")
    chosen = [c for c in CASES if not args.k or any(c.name == k[1:] if k.startswith("=") else k in c.name for k in args.k)]
    if args.list:
        print("\n".join(c.name for c in chosen), len(chosen))
        return
    tally: dict[str, int] = {}
    t0 = time.time()
    for c in chosen:
        for mode in modes:
            if mode in c.modes:
                s = run_case(c, mode, args)
                tally[s] = tally.get(s, 0) + 1
    print(f"SUMMARY backend={args.backend} runs={sum(tally.values())} cases={len(chosen)} "
          + " ".join(f"{k}={v}" for k, v in sorted(tally.items())) + f" in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
