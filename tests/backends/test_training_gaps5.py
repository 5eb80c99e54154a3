"""Training gaps of issue 14 (fifth pass): onnxrt training graphs that left ops to torch between ORT parts.

Each decomposition is compared with eager's op in float64 (atol/rtol 1e-10), special values included; each
model trains for 3 steps (forward, loss, backward, AdamW) eagerly and through onnxrt from the same weights on
changing data (test_training_gaps4.train_as_eager: losses, input gradients, parameters and AdamW state within
test_training_backends.TOL), every backward call ran as ORT sessions, and each backward program is one ORT part
with nothing in torch but views and copies.
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framejit
from framejit import config
from tests.backends.test_training_backends import _count_ort_runs  # noqa: F401 (the autouse fixture)
from tests.backends.test_training_backends import TOL, Recording, assert_backward_in_backend
from tests.backends.test_training_gaps4 import (
    EXACT, _decomposition, _gen, assert_backward_in_one_part, assert_forward_in_ort, train_as_eager)

aten = torch.ops.aten

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


def _special(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """x with NaNs, -infs and tied maxima at random places."""
    x = x.clone()
    flat = x.view(-1)
    order = torch.randperm(flat.numel(), generator=gen)
    flat[order[:3]], flat[order[3:6]], flat[order[6:12]] = float("nan"), float("-inf"), 1.5
    return x


# ---- NOTE [Max-pool gradients from recomputed argmaxes] ---------------------------------------------------------
@pytest.mark.parametrize("dims", [2, 3])
def test_max_pool_backward_matches_eager(dims):
    forward = {2: aten.max_pool2d_with_indices, 3: aten.max_pool3d_with_indices}[dims]
    backward = {2: aten.max_pool2d_with_indices_backward, 3: aten.max_pool3d_with_indices_backward}[dims]
    decomposed = _decomposition(backward.default)
    gen = _gen(dims)
    compared = 0
    for space in ([7, 6, 5], [5, 8, 4]):
        for kernel, stride, padding, dilation, ceil_mode in itertools.product([2, 3], [1, 2], [0, 1], [1, 2],
                                                                               [False, True]):
            for lead, kind in itertools.product(([2, 3], [3]), ("plain", "special", "all -inf", "channels_last")):
                x = torch.randn(*lead, *space[:dims], generator=gen, dtype=torch.float64)
                if kind == "special":
                    x = _special(x, gen)
                elif kind == "all -inf":
                    x = torch.full_like(x, float("-inf"))
                elif kind == "channels_last" and x.dim() == 4:
                    x = _special(x, gen).contiguous(memory_format=torch.channels_last)
                args = ([kernel] * dims, [stride] * dims, [padding] * dims, [dilation] * dims, ceil_mode)
                try:
                    y, indices = forward(x, *args)
                except RuntimeError:  # eager refuses it (padding over half the kernel)
                    continue
                grad = torch.randn(y.shape, generator=gen, dtype=torch.float64)
                torch.testing.assert_close(decomposed(grad, x, *args, indices), backward(grad, x, *args, indices),
                                           **EXACT, msg=lambda m: f"{space[:dims]} {args} {lead} {kind}: {m}")
                compared += 1
    assert compared > 300


@pytest.mark.parametrize("dims", [2, 3])
def test_adaptive_max_pool_backward_matches_eager(dims):
    forward = {2: aten.adaptive_max_pool2d, 3: aten.adaptive_max_pool3d}[dims]
    backward = {2: aten.adaptive_max_pool2d_backward, 3: aten.adaptive_max_pool3d_backward}[dims]
    decomposed = _decomposition(backward.default)
    gen = _gen(dims)
    # output smaller (overlapping windows), global, equal, larger than the input
    for space, out in (([7, 6, 5], [3, 4, 2]), ([8, 8, 3], [1, 1, 1]), ([5, 9, 2], [5, 2, 2]), ([4, 4, 3], [6, 3, 5])):
        for lead, special in itertools.product(([2, 3], [3]), (False, True)):
            x = torch.randn(*lead, *space[:dims], generator=gen, dtype=torch.float64)
            x = _special(x, gen) if special else x
            y, indices = forward(x, out[:dims])
            grad = torch.randn(y.shape, generator=gen, dtype=torch.float64)
            torch.testing.assert_close(decomposed(grad, x, indices), backward(grad, x, indices), **EXACT)
            values, found = _decomposition(forward.default)(x, out[:dims])  # values and eager's indices
            torch.testing.assert_close(values, y, **EXACT, equal_nan=True)
            assert torch.equal(found, indices)


class MaxPoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 4, 3)
        self.p1 = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.p2 = nn.MaxPool1d(2, dilation=2)
        self.p3 = nn.MaxPool3d(2, stride=1, padding=1)
        self.p4 = nn.AdaptiveMaxPool2d((3, 2))
        self.head = nn.LazyLinear(3)

    def forward(self, x):
        h = torch.tanh(self.c(x))
        parts = [self.p1(h), self.p2(h.flatten(2)), self.p3(h.unsqueeze(1)), self.p4(h)]
        return self.head(torch.cat([p.flatten(1) for p in parts], 1))


def test_max_pools_train_with_the_backward_in_one_ort_part():
    """MaxPool1d/2d/3d and AdaptiveMaxPool2d. Before: the partitioner recomputed max_pool2d_with_indices
    (3d: max_pool3d_with_indices) in the backward for its indices, which ran in torch."""
    def make():
        model = MaxPoolNet()
        model(torch.randn(2, 2, 10, 9))  # materialise the lazy head
        return model
    recording = train_as_eager(make, lambda g: (torch.randn(2, 2, 10, 9, generator=g),))
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


# ---- onnxrt: int64 sums of bools (translate._counts_bools) -------------------------------------------------------
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5))
        self.register_buffer("class_weight", torch.tensor([1.0, 0.5, 2.0, 1.5, 0.75]))

    def forward(self, x, target):
        logits = self.body(x)
        return (F.cross_entropy(logits, target)
                + F.cross_entropy(logits, torch.where(target < 0, 1, target), weight=self.class_weight,
                                  label_smoothing=0.1, ignore_index=1)
                + F.nll_loss(F.log_softmax(logits, 1), target, weight=self.class_weight))


def _classifier_batch(g: torch.Generator) -> tuple:
    target = torch.randint(0, 5, (7,), generator=g)
    target[int(torch.randint(0, 7, (), generator=g))] = -100  # ignored by the default ignore_index
    return torch.randn(7, 6, generator=g), target


def test_cross_entropy_trains_with_forward_and_backward_in_ort():
    """cross_entropy (ignore_index, class weights, label smoothing) and nll_loss. Before: the count of targets
    that are not ignore_index (an int64 sum of bools) ran in torch between ORT parts of the forward."""
    recording = train_as_eager(Classifier, _classifier_batch)
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


def test_a_count_of_bools_past_float32_precision_runs_in_ort_exactly():
    """An int64 sum of bools is a count (at most the input's size): ORT's sum gives eager's count past 2**24
    (the first count float32 cannot hold), in an ORT part."""
    recording = Recording("onnxrt")
    fast = framejit.compile(lambda m, x: (m.sum(), m.sum(1), x.sum()), backend=recording)
    for size in (2 ** 24 + 1, 2 ** 24 + 3):
        m = torch.ones(1, size, dtype=torch.bool)
        m[0, 5] = False
        got, want = fast(m, torch.ones(3)), (m.sum(), m.sum(1), torch.ones(3).sum())
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w)
    for compiled in recording.compiled:
        for row in compiled.summary():
            assert not row["eager_graph"] and row["parts"] == 1 and not row["eager_nodes"], row


# ---- onnxrt: xlogy as eager's kernel (semantics._rewrite_xlogy) ---------------------------------------------------
def test_xlogy_of_special_values_matches_eager_in_one_ort_part():
    recording = Recording("onnxrt")
    fast = framejit.compile(lambda x, y: torch.xlogy(x, y) * 2, backend=recording)
    special = [0.0, -0.0, 1.0, -1.0, 2.5, float("nan"), float("inf"), float("-inf"), 1e-30]
    for dtype in (torch.float64, torch.float32):
        values = torch.tensor(special, dtype=dtype)
        x, y = values.view(-1, 1).expand(9, 9), values.view(1, -1).expand(9, 9)
        got, want = fast(x, y), torch.xlogy(x, y) * 2
        torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
        numbers = ~want.isnan()
        assert torch.equal(got[numbers].signbit(), want[numbers].signbit())  # -0.0 where eager gives it
    for compiled in recording.compiled:
        for row in compiled.summary():
            assert not row["eager_graph"] and row["parts"] == 1 and not row["eager_nodes"], row


class Distiller(nn.Module):
    """A student's log-probabilities against a teacher's (targets with exact zeros: xlogy(0, 0) terms)."""

    def __init__(self):
        super().__init__()
        self.student, self.teacher = nn.Linear(6, 5), nn.Linear(6, 5)

    def forward(self, x, keep):
        soft = F.softmax(self.teacher(x), 1)
        sparse = soft.detach() * keep  # eager's gradient of a target at 0 is NaN: this one is detached
        log_probs = F.log_softmax(self.student(x), 1)
        return (F.kl_div(log_probs, soft, reduction="batchmean")
                + F.kl_div(log_probs, sparse / sparse.sum(1, keepdim=True), reduction="sum"))


def test_kl_div_trains_with_forward_and_backward_in_ort():
    """F.kl_div with a target that requires grad (the teacher trains too) and one that holds zeros. Before: xlogy
    ran in torch in the forward."""
    def batch(g):
        keep = (torch.rand(7, 5, generator=g) > 0.3).float()
        keep[:, 0] = 1.0
        return torch.randn(7, 6, generator=g), keep
    recording = train_as_eager(Distiller, batch, input_grad=False)
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


# ---- onnxrt: NOTE [cumprod as a masked product]; max.dim of bools (semantics._rewrite_bool_reduction) -----------
def _one_program(recording: Recording) -> None:
    """Every program: no eager graph, one ORT part, nothing in torch but views and copies."""
    from tests.backends.test_training_gaps4 import QUIET_REASONS
    for compiled in recording.compiled:
        for row in compiled.summary():
            loud = {name: why for name, why in row["eager_nodes"].items() if why not in QUIET_REASONS}
            assert not row["eager_graph"] and row["parts"] == 1 and not loud, row


def test_cumprod_matches_eager_bit_for_bit_in_one_ort_part():
    """cumprod over each dim, float32 (eager multiplies in double) and float64, with zeros, -0.0, infinities
    and NaN; equal to eager's values and signs."""
    recording = Recording("onnxrt")
    fn = lambda x: (x.cumprod(0), x.cumprod(1), x.cumprod(-1, dtype=torch.float64))  # noqa: E731
    fast = framejit.compile(fn, backend=recording)
    for dtype, seed in itertools.product((torch.float32, torch.float64), (0, 1)):
        x = torch.randn(6, 40, generator=_gen(seed), dtype=dtype) * 1.3
        x[1, 3], x[2, 5], x[3, 7], x[4, 1], x[5, 0] = 0.0, float("inf"), float("nan"), -0.0, float("-inf")
        for got, want in zip(fast(x), fn(x)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)
            numbers = ~want.isnan()
            assert torch.equal(got[numbers].signbit(), want[numbers].signbit())
    _one_program(recording)


def test_max_and_min_over_bools_run_in_ort():
    recording = Recording("onnxrt")
    fn = lambda m: (m.max(1), m.min(0, keepdim=True), m.max(1).values & m[:, 0])  # noqa: E731
    fast = framejit.compile(fn, backend=recording)
    for seed in range(3):
        m = torch.rand(5, 6, generator=_gen(seed)) > 0.6
        m[0], m[1] = False, True  # ties everywhere: the first index, as eager
        for got, want in zip(torch.utils._pytree.tree_leaves(fast(m)), torch.utils._pytree.tree_leaves(fn(m))):
            assert got.dtype == want.dtype and torch.equal(got, want)
    _one_program(recording)


class Products(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)

    def forward(self, x):
        h = torch.tanh(self.a(x)) * x.sum(1, keepdim=True)
        return self.b(h.cumprod(1)) + h.prod(1, keepdim=True) + x.prod()


def test_prod_and_cumprod_train_with_forward_and_backward_in_ort():
    """prod (one dim, all dims) and cumprod, with inputs holding exact zeros (their backward's special case).
    Before: cumprod (forward, and in prod's and cumprod's backward) ran in torch as prims.prod, and cumprod's
    backward took max.dim of a bool mask (an invalid ORT graph, retried in torch)."""
    def batch(g):
        x = torch.randn(5, 4, generator=g)
        x[1, 2] = 0.0
        x[3, :2] = 0.0
        return (x,)
    recording = train_as_eager(Products, batch)
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


# ---- onnxrt: NOTE [Constants in their own dtype] ---------------------------------------------------------------------
NUMBERS_IN_GRAPHS = {
    "mul": lambda x: x * 0.1, "add": lambda x: x + 0.1, "rsub": lambda x: 0.7 - x, "where": lambda x: torch.where(
        x > 0, x, 0.1), "masked_fill": lambda x: x.masked_fill(x > 0.5, 0.1), "clamp": lambda x: x.clamp(0.1, 0.7),
    "full": lambda x: torch.full(x.shape, 1 / 3, dtype=x.dtype) + x, "scale": lambda x: x * (1 / 0.75),
}


@pytest.mark.parametrize("name", sorted(NUMBERS_IN_GRAPHS))
def test_numbers_in_float64_graphs_are_not_rounded_to_float32(name):
    """torchlib made the tensor of a Python float a float32 Constant cast to float64: results 1e-9 to 1e-8 off
    eager's. Now equal to eager's bit for bit, over two shapes, in one ORT part."""
    fn = NUMBERS_IN_GRAPHS[name]
    recording = Recording("onnxrt")
    fast = framejit.compile(fn, backend=recording)
    for k, shape in enumerate([(64, 33), (64, 33), (5, 7, 3)]):
        x = torch.randn(shape, generator=_gen(k), dtype=torch.float64)
        assert torch.equal(fast(x), fn(x)), (name, shape)
    for compiled in recording.compiled:
        for row in compiled.summary():
            assert not row["eager_graph"] and row["parts"] == 1 and not row["eager_nodes"], row


def test_large_int64_numbers_in_graphs_keep_their_low_bits():
    """The exact constants hold int64 numbers float32 cannot (torchlib's path did too: a twin)."""
    def f(x):
        return x + (2 ** 40 + 1), torch.full((3,), 2 ** 50 + 3) * x

    fast = framejit.compile(f, backend="onnxrt")
    for n in (3, 3, 5):
        x = torch.arange(3, dtype=torch.int64) * n - n
        for got, want in zip(fast(x), f(x)):
            assert torch.equal(got, want), (got, want)


# ---- onnxrt: NOTE [Dropout's draw apart from its product] ---------------------------------------------------------
def test_dropout_decomposition_draws_eagers_mask():
    decomposed = _decomposition(aten.native_dropout.default)
    for shape, p, dtype in itertools.product([(7,), (64, 33), (2, 3, 5, 8), (1000, 17)], [0.1, 0.5, 0.9],
                                             [torch.float32, torch.float64]):
        x = torch.randn(shape, generator=_gen(len(shape)), dtype=dtype)
        torch.manual_seed(3)
        want = aten.native_dropout(x, p, True)
        torch.manual_seed(3)
        got = decomposed(x, p, True)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), (shape, p, dtype)
    # eager draws a non-contiguous input's mask in its own order; p of 0 or 1 and train=False are eager's special
    # cases: the op is kept whole
    # an empty input (eager returns it with a mask of its dtype) and another device (CUDA draws otherwise) too
    x = torch.randn(6, 8)
    for args in ((x.t(), 0.5, True), (x, 0.0, True), (x, 1.0, True), (x, 0.5, False), (x.half(), 0.5, True),
                 (x[:0], 0.5, True), (x.to("meta"), 0.5, True)):
        assert decomposed(*args) is NotImplemented


def test_compiled_dropout_and_its_gradients_equal_eagers_bit_for_bit():
    """Elementwise products only, so ORT computes eager's bits: the output and the input gradients of a
    dropout of a product equal eager's exactly (the scale 1 / (1 - p) in float64 too: NOTE [Constants in their
    own dtype]), over two calls per seed (the generator advances as in eager), changing shapes, p and dtype.
    Before: the dropout ran in torch after an ORT part, and float64's scale was rounded to float32."""
    def f(x, w, p):
        return F.dropout(x * w, p, True)

    recording = Recording("onnxrt")
    fast = framejit.compile(f, backend=recording)
    for run, (shape, p) in enumerate([((64, 33), 0.25), ((64, 33), 0.25), ((7, 5, 9), 0.6), ((7, 5, 9), 0.6)]):
        args = [torch.randn(shape, generator=_gen(run + k), dtype=torch.float64 if run > 1 else torch.float32)
                for k in range(2)]
        results = []
        for call in (f, fast):
            torch.manual_seed(run // 2)
            x, w = (a.clone().requires_grad_() for a in args)
            outs = [call(x, w, p) for _ in range(2)]
            torch.autograd.backward(outs, [torch.randn(shape, generator=_gen(k), dtype=x.dtype) for k in (7, 8)])
            results.append((*outs, x.grad, w.grad))
        for got, want in zip(results[1], results[0]):
            assert got.dtype == want.dtype and torch.equal(got, want), (run, shape, p)
    assert_backward_in_backend(recording, 4)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            for row in half.summary():  # only the draw (empty, bernoulli) in torch
                assert not row["eager_graph"] and row["parts"] == 1, row
                assert {name.rstrip("_0123456789") for name in row["eager_nodes"]} == {"empty", "bernoulli"}, row


class DropoutBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.qkv, self.out = nn.LayerNorm(16), nn.Linear(16, 48), nn.Linear(16, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.2), nn.Linear(32, 16))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
        h = x + self.drop(self.out(attention.transpose(1, 2).reshape(b, t, 16)))
        return h + self.drop(self.mlp(h))


def test_dropout_trains_as_eager_with_the_forward_in_one_ort_part():
    """nn.Dropout and attention dropout in train mode, each call made from the same seed as eager's: the same
    masks, so losses, gradients and weights match eager's. Before: every native_dropout ran in torch between
    ORT parts (this forward: 5 parts); now its draw runs in torch and the forward is one ORT part."""
    torch.manual_seed(0)
    model = DropoutBlock().train()
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, fast_model)]
    for step in range(3):
        x = torch.randn(2, 5, 16, generator=_gen(step))
        losses = []
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            torch.manual_seed(100 + step)
            loss = call(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **TOL)
        for (name, p), q in zip(fast_model.named_parameters(), model.parameters()):
            torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"step {step} {name}: {m}")
    assert_backward_in_backend(recording, 3)
    assert_backward_in_one_part(recording)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            for row in half.summary():
                assert not row["eager_graph"] and row["parts"] == 1, row


class AttentionDropout(nn.Module):
    """Cross attention (5 queries, 7 keys) with a float mask, and causal self-attention, both with dropout_p."""

    def __init__(self):
        super().__init__()
        self.q, self.kv, self.out = nn.Linear(12, 12), nn.Linear(12, 24), nn.Linear(12, 12)

    def forward(self, x, memory, mask):
        q = self.q(x).view(2, 5, 3, 4).transpose(1, 2)
        k, v = self.kv(memory).view(2, 7, 2, 3, 4).permute(2, 0, 3, 1, 4)
        crossed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.4)
        selfed = F.scaled_dot_product_attention(crossed, crossed, crossed, dropout_p=0.2, is_causal=True)
        return self.out(selfed.transpose(1, 2).reshape(2, 5, 12))


def test_attention_dropout_trains_as_eager_in_one_ort_part():
    """scaled_dot_product_attention with dropout_p > 0 in training: the CPU kernel is the math with a dropout of
    the attention weights; each draw runs in torch, the rest of the forward in one ORT part, and 3 AdamW steps
    (every call from the same seed as eager's) give eager's losses, input gradients and weights. Before: each
    attention dropout ran in torch between ORT parts."""
    def batch(gen):
        mask = torch.randn(5, 7, generator=gen).clamp(max=0.5).log1p().nan_to_num(neginf=-1e4, nan=-1e4)
        return torch.randn(2, 5, 12, generator=gen), torch.randn(2, 7, 12, generator=gen), mask

    torch.manual_seed(0)
    model = AttentionDropout().train()
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, fast_model)]
    for step in range(3):
        args = batch(_gen(20 + step))
        results = []
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            torch.manual_seed(200 + step)
            x, memory = (a.clone().requires_grad_() for a in args[:2])
            loss = call(x, memory, args[2]).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            results.append((loss.detach(), x.grad, memory.grad))
        for got, want in zip(*reversed(results)):
            torch.testing.assert_close(got, want, **TOL)
        for (name, p), q in zip(fast_model.named_parameters(), model.parameters()):
            torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"step {step} {name}: {m}")
    assert_backward_in_backend(recording, 3)
    assert_backward_in_one_part(recording)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            for row in half.summary():
                assert not row["eager_graph"] and row["parts"] == 1, row


# ---- onnxrt: NOTE [grid_sample gradients as scatter-adds] ---------------------------------------------------------
EDGE_GRID = torch.tensor([-1.0, 1.0, 0.0, -1.5, 1.5, 2.0, -3.0, 1 / 3, -1 / 3, 0.5, -0.5, 5.0], dtype=torch.float64)


@pytest.mark.parametrize("mode", [0, 1], ids=["bilinear", "nearest"])
def test_grid_sampler_backward_decomposition_matches_eager(mode):
    """float64 against eager's grid_sampler_2d_backward: zeros/border/reflection, align_corners, inputs with a
    size-1 side, grids reaching far outside; for bilinear (and nearest with align_corners) also a grid of exact
    corners, borders and reflection points (eager's gradient there: 0 at a clipped border, the sign of one
    reflection at exactly one span)."""
    decomposed = _decomposition(aten.grid_sampler_2d_backward.default)
    for padding, align, (h, w) in itertools.product((0, 1, 2), (False, True), [(5, 7), (1, 4), (6, 1), (4, 4)]):
        gen = _gen(h * 10 + w + padding)
        inp = torch.randn(2, 3, h, w, dtype=torch.float64, generator=gen)
        grids = [torch.rand(2, 4, 6, 2, dtype=torch.float64, generator=gen) * 3.2 - 1.6]
        if mode == 0 or align:  # nearest without align_corners: NOTE (ties of the fused multiply-add)
            grids.append(torch.stack(torch.meshgrid(EDGE_GRID, EDGE_GRID, indexing="ij"), -1).expand(2, 12, 12, 2))
        for grid in grids:
            grad_out = torch.randn(2, 3, *grid.shape[1:3], dtype=torch.float64, generator=gen)
            want = aten.grid_sampler_2d_backward(grad_out, inp, grid, mode, padding, align, [True, True])
            got = decomposed(grad_out, inp, grid, mode, padding, align, [True, True])
            for g, e in zip(got, want):
                torch.testing.assert_close(g, e, **EXACT, msg=lambda m: f"{padding} {align} {(h, w)}: {m}")
    x = torch.randn(1, 2, 3, 3)
    grid = torch.rand(1, 2, 2, 2) * 2 - 1
    assert decomposed(x, x, grid, 2, 0, False, [True, True]) is NotImplemented  # bicubic keeps the op
    assert decomposed(x.half(), x.half(), grid.half(), mode, 0, False, [True, True]) is NotImplemented


class Warp(nn.Module):
    """A spatial transformer: a conv, a predicted affine grid, grid_sample (bilinear, reflection) and a second
    one (nearest, border) of the warped features."""

    def __init__(self):
        super().__init__()
        self.conv, self.loc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4 * 6 * 7, 6)

    def forward(self, x):
        h = self.conv(x).relu()
        theta = self.loc(h.flatten(1)).view(-1, 2, 3) * 0.3 + torch.tensor([[1.1, 0.1, 0.0], [-0.1, 0.9, 0.2]])
        grid = F.affine_grid(theta, list(h.shape), align_corners=False)
        warped = F.grid_sample(h, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        again = F.grid_sample(warped, grid * 1.3, mode="nearest", padding_mode="border", align_corners=True)
        return warped + again


def test_grid_sample_trains_with_the_backward_in_one_ort_part():
    """3 AdamW steps vs eager (losses, input gradients, weights); before: grid_sampler_2d_backward ran in torch
    between ORT parts of the backward (no torchlib translation)."""
    recording = train_as_eager(Warp, lambda gen: [torch.randn(2, 3, 6, 7, generator=gen)])
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


# ---- onnxrt: NOTE [log1p without cancellation] ---------------------------------------------------------------------
def _log1p_inputs(dtype, count: int) -> torch.Tensor:
    tiny = -40 if dtype == torch.float32 else -300
    magnitudes = torch.logspace(tiny, 30, count, dtype=torch.float64)
    special = torch.tensor([0.0, -0.0, -1.0, float("inf"), -float("inf"), float("nan"), -2.0], dtype=torch.float64)
    uniform = torch.rand(count, generator=_gen(count), dtype=torch.float64) * 2 - 1
    return torch.cat([magnitudes, -magnitudes[magnitudes < 1], uniform, special]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_log1p_runs_in_ort_within_three_ulps_of_eager(dtype):
    """log1p ran in torch (torchlib's log(1 + x) gave 0 for 1e-10). Now in one ORT part: within 3 ulp of eager's
    over magnitudes from the smallest to 1e30 of both signs, special values and signs of zero as eager's."""
    recording = Recording("onnxrt")
    fast = framejit.compile(torch.log1p, backend=recording)
    for count in (20001, 50001):
        x = _log1p_inputs(dtype, count)
        got, want = fast(x), torch.log1p(x)
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan) and torch.equal(got[~nan].signbit(), want[~nan].signbit())
        finite = torch.isfinite(want)
        assert torch.equal(got[~finite & ~want.isnan()], want[~finite & ~want.isnan()])
        ulp = torch.finfo(dtype).eps * want[finite].abs().clamp(min=torch.finfo(dtype).tiny)
        assert ((got[finite] - want[finite]).abs() / ulp).max() <= 3
    for compiled in recording.compiled:
        for row in compiled.summary():
            assert not row["eager_graph"] and row["parts"] == 1 and not row["eager_nodes"], row


class PreferenceLoss(nn.Module):
    """A DPO-style loss: logsigmoid of scaled score differences, and a softplus-smoothed margin."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(10, 1)

    def forward(self, chosen, rejected):
        margin = (self.score(chosen) - self.score(rejected)).squeeze(-1)
        return -F.logsigmoid(0.7 * margin) + 0.1 * F.logsigmoid(-margin).exp()


def test_logsigmoid_trains_in_one_ort_part():
    """3 AdamW steps vs eager; before: log_sigmoid's log1p ran in torch between ORT parts of the forward."""
    recording = train_as_eager(PreferenceLoss, lambda gen: [torch.randn(8, 10, generator=gen) * 3,
                                                            torch.randn(8, 10, generator=gen) * 3])
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            assert all(row["parts"] == 1 for row in half.summary())


# ---- onnxrt: NOTE [Euclidean cdist as differences] ----------------------------------------------------------------
def test_cdist_decompositions_match_eager():
    """float64 against eager's _cdist_forward and _cdist_backward (both inputs' gradients, a zero distance)."""
    forward, backward = (_decomposition(op) for op in (aten._cdist_forward.default, aten._cdist_backward.default))
    for shape1, shape2 in [((5, 3), (7, 3)), ((2, 4, 6), (2, 9, 6)), ((1, 1), (3, 1)), ((3, 2, 5, 4), (3, 2, 6, 4))]:
        gen = _gen(len(shape1) * 10 + shape1[-1])
        x1, x2 = (torch.randn(s, dtype=torch.float64, generator=gen) for s in (shape1, shape2))
        x2[..., 0, :] = x1[..., 0, :]
        want = aten._cdist_forward(x1, x2, 2.0, None)
        torch.testing.assert_close(forward(x1, x2, 2.0, None), want, **EXACT)
        grad = torch.randn(want.shape, dtype=torch.float64, generator=gen)
        for args in ((grad, x1, x2, 2.0, want), (grad.mT.contiguous(), x2, x1, 2.0, want.mT.contiguous())):
            torch.testing.assert_close(backward(*args), aten._cdist_backward(*args), **EXACT)
    x = torch.randn(4, 3)
    assert forward(x, x, 1.0, None) is NotImplemented and forward(x.half(), x.half(), 2.0, None) is NotImplemented


class Prototypes(nn.Module):
    """A prototype classifier: embeddings scored by minus their euclidean distance to learned prototypes."""

    def __init__(self):
        super().__init__()
        self.embed, self.prototypes = nn.Linear(12, 6), nn.Parameter(torch.randn(5, 6))

    def forward(self, x, labels):
        return F.cross_entropy(-torch.cdist(self.embed(x).tanh(), self.prototypes), labels)


def test_cdist_trains_with_forward_and_backward_in_one_ort_part():
    """3 AdamW steps vs eager; before: _cdist_forward and _cdist_backward ran in torch between ORT parts."""
    recording = train_as_eager(Prototypes, lambda gen: [torch.randn(9, 12, generator=gen),
                                                        torch.randint(0, 5, (9,), generator=gen)])
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            assert all(row["parts"] == 1 for row in half.summary())
