"""Training gaps of issue 14 (fourth pass): onnxrt backward graphs that left ops to torch between ORT parts.

torchlib translates none of `convolution_backward` of a transposed convolution, `avg_pool{2,3}d_backward`,
`_adaptive_avg_pool{2,3}d_backward`, `_embedding_bag_backward`, `_embedding_bag_per_sample_weights_backward`
and CPU flash attention's backward (its forward is kept in torch in training: NOTE [Flash attention in
training]), so the backward of a net with nn.ConvTranspose*d, nn.AvgPool*d, nn.AdaptiveAvgPool*d,
nn.EmbeddingBag or F.scaled_dot_product_attention ran those ops in torch between ORT parts (logged on
eager_fallback). onnxrt joints now trace them as ops torchlib translates (NOTE [Convolution gradients as
convolutions] in onnxrt/conv_backward.py, NOTE [Pooling gradients as convolutions and products] in
onnxrt/pool_backward.py, NOTE [EmbeddingBag gradients as scatter-adds] in onnxrt/embedding_bag.py, NOTE
[Flash attention as math in training graphs] in onnxrt/attention_training.py).

Each decomposition is compared with eager's op in float64 (atol/rtol 1e-10: only the order of additions
differs). Each model trains for 3 steps (forward, loss, backward, AdamW) eagerly and through onnxrt from the
same weights on changing data; losses, input gradients, parameters and AdamW's state match eager within
test_training_backends.TOL (atol 2e-4, rtol 2e-3: float32 after 3 AdamW steps), every backward call ran as
ORT sessions (assert_backward_in_backend), and each backward program is one ORT part with nothing in torch but
views and copies (the reasons eager_fallback does not log).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framejit
from framejit import config
from framejit.backends.onnxrt import partition
from tests.backends.test_training_backends import (  # noqa: F401 (_count_ort_runs: the autouse fixture)
    TOL, Recording, _count_ort_runs, assert_backward_in_backend)

aten = torch.ops.aten

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]

EXACT = dict(atol=1e-10, rtol=1e-10)
QUIET_REASONS = {partition.FREE_OP_REASON, partition.MOVEMENT_REASON, partition.SIZE_REASON}


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _decomposition(op):
    from framejit.backends.onnxrt.training import decompositions
    assert op in decompositions(), f"{op} is not decomposed in onnxrt joints"
    return decompositions()[op]


# ---- the decompositions against eager's ops ----------------------------------------------------------------
# (spatial sizes, kernel, stride, padding, dilation, output_padding, groups, channels in, channels out)
TRANSPOSED = [
    ((5,), (3,), [2], [1], [1], [1], 1, 4, 6),
    ((6, 5), (3, 2), [2, 1], [1, 0], [1, 2], [1, 0], 2, 4, 6),
    ((4, 4), (3, 3), [2, 2], [0, 1], [3, 1], [2, 1], 1, 3, 5),  # output_padding >= stride (dilation 3)
    ((5, 5), (4, 4), [3, 3], [2, 2], [1, 1], [0, 2], 4, 8, 4),
    ((3, 4, 5), (2, 3, 2), [2, 1, 3], [1, 1, 0], [1, 2, 1], [1, 0, 2], 2, 4, 4),
]


@pytest.mark.parametrize("case", TRANSPOSED, ids=lambda c: f"{len(c[0])}d-s{c[2]}-p{c[3]}-d{c[4]}-op{c[5]}-g{c[6]}")
def test_transposed_convolution_backward_matches_eager(case):
    space, kernel, stride, padding, dilation, output_padding, groups, cin, cout = case
    gen = _gen(len(space) + groups)
    x = torch.randn(3, cin, *space, generator=gen, dtype=torch.float64)
    w = torch.randn(cin, cout // groups, *kernel, generator=gen, dtype=torch.float64)
    y = aten.convolution(x, w, None, stride, padding, dilation, True, output_padding, groups)
    grad = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    decomposed = _decomposition(aten.convolution_backward.default)
    for mask in ([True, True, True], [False, True, False], [True, False, False]):
        args = (grad, x, w, [cout], stride, padding, dilation, True, output_padding, groups, mask)
        expected, actual = aten.convolution_backward(*args), decomposed(*args)
        assert actual is not NotImplemented
        for k, (e, a) in enumerate(zip(expected, actual)):
            if mask[k]:
                assert a.shape == e.shape
                torch.testing.assert_close(a, e, **EXACT)
            else:
                assert a is None


def _avg_pool_cases(dims: int):
    kernels = [(3, 2, 1), (2, 2, 0), (3, 1, 1), (4, 3, 2), ([3, 2, 2][:dims], [2, 3, 1][:dims], [1, 0, 1][:dims])]
    for (kernel, stride, padding), ceil_mode, count_include_pad, divisor in [
            (k, c, i, d) for k in kernels for c in (False, True) for i in (True, False) for d in (None, 3)]:
        yield kernel, stride, padding, ceil_mode, count_include_pad, divisor


@pytest.mark.parametrize("dims", [2, 3])
def test_avg_pool_backward_matches_eager(dims):
    forward = {2: aten.avg_pool2d, 3: aten.avg_pool3d}[dims]
    backward = {2: aten.avg_pool2d_backward, 3: aten.avg_pool3d_backward}[dims].default
    decomposed = _decomposition(backward)
    compared = 0
    for space in ([7, 6, 5], [5, 8, 4], [4, 4, 4]):
        for case in _avg_pool_cases(dims):
            for lead in ([2, 3], [3]):  # batched, unbatched
                x = torch.randn(*lead, *space[:dims], generator=_gen(compared), dtype=torch.float64)
                try:
                    y = forward(x, *case)
                except RuntimeError:  # eager refuses it (padding over half the kernel)
                    continue
                grad = torch.randn(y.shape, generator=_gen(compared), dtype=torch.float64)
                torch.testing.assert_close(decomposed(grad, x, *case), backward(grad, x, *case), **EXACT,
                                           msg=lambda m: f"{space[:dims]} {lead} {case}: {m}")
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("dims", [2, 3])
def test_adaptive_avg_pool_backward_matches_eager(dims):
    forward = {2: aten._adaptive_avg_pool2d, 3: aten._adaptive_avg_pool3d}[dims]
    backward = {2: aten._adaptive_avg_pool2d_backward, 3: aten._adaptive_avg_pool3d_backward}[dims].default
    decomposed = _decomposition(backward)
    # output smaller (overlapping windows), global, equal, larger than the input
    for space, out in (([7, 6, 5], [3, 4, 2]), ([8, 8, 3], [1, 1, 1]), ([5, 9, 2], [5, 2, 2]), ([4, 4, 3], [6, 3, 5])):
        for lead in ([2, 3], [3]):
            x = torch.randn(*lead, *space[:dims], generator=_gen(len(lead)), dtype=torch.float64)
            y = forward(x, out[:dims])
            grad = torch.randn(y.shape, generator=_gen(7), dtype=torch.float64)
            torch.testing.assert_close(decomposed(grad, x), backward(grad, x), **EXACT)


BAGS = [  # offsets, include_last_offset: an empty bag, trailing empty bags, indices past the last offset
    (torch.tensor([0, 2, 2, 4, 8]), False), (torch.tensor([0, 2, 2, 4, 8, 10]), True),
    (torch.tensor([0, 3, 3, 7]), True), (torch.tensor([0, 0, 5, 10, 10]), False)]


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
def test_embedding_bag_backward_matches_eager(mode):
    backward = _decomposition(aten._embedding_bag_backward.default)
    per_sample = _decomposition(aten._embedding_bag_per_sample_weights_backward.default)
    weight = torch.randn(10, 3, generator=_gen(0), dtype=torch.float64, requires_grad=True)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4, 4])
    for (offsets, include_last), padding_idx, weighted in [
            (b, p, w) for b in BAGS for p in (-1, 4, 9) for w in ((False, True) if mode == 0 else (False,))]:
        sample_weights = torch.randn(10, generator=_gen(1), dtype=torch.float64) if weighted else None
        out = [t.detach() for t in aten._embedding_bag(weight, indices, offsets, False, mode, False, sample_weights,
                                                       include_last, padding_idx)]
        grad = torch.randn(out[0].shape, generator=_gen(2), dtype=torch.float64)
        args = (grad, indices, offsets, out[1], out[2], out[3], 10, False, mode, False, sample_weights, padding_idx)
        where = f"offsets {offsets.tolist()} padding_idx {padding_idx} weighted {weighted}"
        torch.testing.assert_close(backward(*args), aten._embedding_bag_backward(*args), **EXACT,
                                   msg=lambda m: f"{where}: {m}")
        if weighted:
            args = (grad, weight.detach(), indices, offsets, out[1], mode, padding_idx)
            torch.testing.assert_close(per_sample(*args), aten._embedding_bag_per_sample_weights_backward(*args),
                                       **EXACT, msg=lambda m: f"{where}: {m}")


# ---- training through onnxrt ---------------------------------------------------------------------------------
def _adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6, weight_decay=0.01)


def train_as_eager(make, batch, steps: int = 3, input_grad: bool = True) -> Recording:
    """`steps` steps of forward, loss, backward and AdamW eagerly and through onnxrt (new data each step);
    losses, input gradients, parameters and optimizer state compared after every step."""
    torch.manual_seed(0)
    model = make().train()
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [_adamw(model), _adamw(fast_model)]
    for step in range(steps):
        args = batch(_gen(10 + step))
        results = []
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            inputs = [a.clone().requires_grad_(input_grad and a.is_floating_point()) for a in args]
            loss = call(*inputs).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            results.append((loss.detach(), [a.grad for a in inputs]))
        (want_loss, want_grads), (loss, grads) = results
        torch.testing.assert_close(loss, want_loss, **TOL, msg=lambda m: f"step {step} loss: {m}")
        for got, want in zip(grads, want_grads):
            torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"step {step} input gradient: {m}")
        for (name, p), q in zip(fast_model.named_parameters(), model.parameters()):
            torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"step {step} {name}: {m}")
            for key, value in opts[0].state[q].items():
                torch.testing.assert_close(opts[1].state[p][key], value, **TOL)
    assert_backward_in_backend(recording, steps)
    return recording


def assert_backward_in_one_part(recording: Recording) -> None:
    """Every backward program: one ORT part, nothing in torch but views and copies."""
    backwards = [half for joint in recording.joints() for half in joint.compiled_backwards]
    assert backwards
    for half in backwards:
        for row in half.summary():
            loud = {name: why for name, why in row["eager_nodes"].items() if why not in QUIET_REASONS}
            assert not row["eager_graph"] and row["parts"] == 1 and not loud, row


def assert_forward_in_ort(recording: Recording, allowed: tuple = ()) -> None:
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            for row in half.summary():
                loud = {name: why for name, why in row["eager_nodes"].items()
                        if why not in QUIET_REASONS and not name.startswith(allowed)}
                assert not row["eager_graph"] and not loud, row


class TransposedConvNet(nn.Module):
    """Strided, padded, dilated, grouped transposed convs with output_padding, 1d and 2d, with and without bias."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.t1 = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.t2 = nn.ConvTranspose2d(6, 2, (2, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1), bias=False)
        self.t3 = nn.ConvTranspose1d(2, 3, 3, stride=3, output_padding=2, dilation=2)

    def forward(self, x):
        h = torch.relu(self.t1(torch.tanh(self.c1(x))))
        h = self.t2(h)
        return self.t3(h.flatten(2))


def test_transposed_convolutions_train_with_the_backward_in_one_ort_part():
    """Before: each transposed conv's convolution_backward ran in torch between ORT parts."""
    recording = train_as_eager(TransposedConvNet, lambda g: (torch.randn(2, 3, 5, 4, generator=g),))
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


class PoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 4, 3)
        self.p1 = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.p2 = nn.AvgPool1d(2)
        self.p3 = nn.AvgPool3d(2, stride=1, padding=1)
        self.head = nn.LazyLinear(3)

    def forward(self, x):
        h = torch.tanh(self.c(x))
        a = self.p1(h)                                   # [2, 4, 5, 4]
        b = self.p2(h.flatten(2))                        # 1-d pool over the flattened map
        c = self.p3(h.unsqueeze(1))                      # a 3-d pool
        return self.head(torch.cat([a.flatten(1), b.flatten(1), c.flatten(1)], 1))


def test_average_pools_train_with_the_backward_in_one_ort_part():
    """Before: avg_pool2d_backward (1-d and 2-d pools) and avg_pool3d_backward ran in torch."""
    def make():
        model = PoolNet()
        model(torch.randn(2, 2, 10, 9))  # materialise the lazy head
        return model
    recording = train_as_eager(make, lambda g: (torch.randn(2, 2, 10, 9, generator=g),))
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


class AdaptivePoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 4, 3)
        self.p1 = nn.AdaptiveAvgPool2d((3, 4))  # overlapping windows of two sizes
        self.p2 = nn.AdaptiveAvgPool2d(1)
        self.p3 = nn.AdaptiveAvgPool1d(5)
        self.head = nn.Linear(4 * 12 + 4 + 4 * 5, 2)

    def forward(self, x):
        h = torch.tanh(self.c(x))
        parts = [self.p1(h).flatten(1), self.p2(h).flatten(1), self.p3(h.flatten(2)).flatten(1)]
        return self.head(torch.cat(parts, 1))


def test_adaptive_average_pools_train_with_the_backward_in_one_ort_part():
    """Before: _adaptive_avg_pool2d_backward ran in torch."""
    recording = train_as_eager(AdaptivePoolNet, lambda g: (torch.randn(2, 2, 9, 10, generator=g),))
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.sum = nn.EmbeddingBag(12, 4, mode="sum")
        self.mean = nn.EmbeddingBag(12, 4, mode="mean", padding_idx=3)
        self.max = nn.EmbeddingBag(12, 4, mode="max", include_last_offset=True)
        self.head = nn.Linear(12, 2)

    def forward(self, indices, offsets, weights):
        last = torch.cat([offsets, offsets.new_full((1,), indices.shape[0])])
        h = [self.sum(indices, offsets, per_sample_weights=weights), self.mean(indices, offsets),
             self.max(indices, last)]
        return self.head(torch.tanh(torch.cat(h, 1)))


def _bag_batch(g: torch.Generator) -> tuple:
    """9 indices (padding 3 among them) in 4 bags, one of them empty, at offsets that change per step."""
    indices = torch.randint(0, 12, (9,), generator=g)
    indices[int(torch.randint(0, 9, (), generator=g))] = 3
    starts = sorted(torch.randint(1, 9, (3,), generator=g).tolist())
    starts[1] = starts[0]  # an empty bag
    return indices, torch.tensor([0, *starts]), torch.rand(9, generator=g)


def test_embedding_bags_train_with_the_backward_in_one_ort_part():
    """Sum with per_sample_weights (whose gradient is asked for), mean with padding_idx, max with
    include_last_offset. Before: _embedding_bag_backward and the per-sample-weights gradient ran in torch.
    The forward's _embedding_bag stays in torch (NOTE [EmbeddingBag gradients as scatter-adds])."""
    recording = train_as_eager(Bags, _bag_batch)
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording, allowed=("_embedding_bag",))


# ---- onnxrt: NOTE [prims views before refunctionalizing] -------------------------------------------------------
def test_instance_norm_with_running_stats_is_evaluated_in_ort_under_no_grad():
    """nn.InstanceNorm2d(track_running_stats=True) in train mode: 3 training steps, each followed by a no_grad
    call (train mode: batch statistics, running statistics updated). Outputs and state (running statistics)
    match eager after every call, and the no_grad calls ran in an ORT program with only the statistics'
    write-backs (copy_) in torch. Before: lowering failed ('Found a custom (non-ATen) operator whose output
    has alias annotations: prims::broadcast_in_dim') and every no_grad call ran eagerly."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, bias=False), nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                          nn.Flatten(), nn.Linear(3 * 4 * 4, 2)).train()
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [_adamw(model), _adamw(fast_model)]
    for step in range(3):
        x, probe = torch.randn(2, 2, 6, 6, generator=_gen(step)), torch.randn(3, 2, 6, 6, generator=_gen(9 + step))
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            call(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            want, got = model(probe), fast(probe)
        torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"step {step} no_grad call: {m}")
        for (name, value), expected in zip(fast_model.state_dict().items(), model.state_dict().values()):
            torch.testing.assert_close(value, expected, **TOL, msg=lambda m: f"step {step} {name}: {m}")
    assert_backward_in_backend(recording)
    # the no_grad calls' entry: batch 3 after training on batch 2, so its batch size is symbolic (automatic
    # dynamic reads every guard of the newest entry at a recompile, here grad mode and the size): the sizes it
    # computes are read in torch and passed to ORT
    inference = [row for compiled in recording.compiled for row in compiled.summary()
                 if row["signature"][0][1] != torch.Size([2, 2, 6, 6])]
    assert inference and not any(row["eager_graph"] for row in inference), inference
    for row in inference:
        kinds = {why.split()[0] for why in row["eager_nodes"].values() if why not in QUIET_REASONS}
        assert "aten::copy_" in kinds and kinds <= {"aten::copy_", "computes"}, row["eager_nodes"]


# ---- onnxrt: NOTE [Flash attention as math in training graphs] -------------------------------------------------
@pytest.mark.parametrize("sizes", [(3, 5), (5, 3), (4, 4)], ids=lambda s: f"L{s[0]}-S{s[1]}")
def test_flash_attention_and_its_backward_match_eager(sizes):
    forward = _decomposition(aten._scaled_dot_product_flash_attention_for_cpu.default)
    backward = _decomposition(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
    rows, cols = sizes
    gen = _gen(rows * 10 + cols)
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64) for n in (rows, cols, cols))
    mask = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask[1], mask[0, 0] = float("-inf"), float("-inf")  # a row masked everywhere, one masked entry
    masks = (None, mask, mask.expand(2, 1, rows, cols))
    for causal, attn_mask, scale in [(c, m, s) for c in (False, True) for m in masks for s in (None, 0.3)]:
        kwargs = dict(attn_mask=attn_mask, scale=scale)
        want = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, **kwargs)
        got = forward(q, k, v, 0.0, causal, **kwargs)
        for g, w in zip(got, want):  # output and logsumexp
            torch.testing.assert_close(g, w, **EXACT)
        grad = torch.randn(want[0].shape, generator=gen, dtype=torch.float64)
        args = (grad, q, k, v, *want, 0.0, causal)
        expected = aten._scaled_dot_product_flash_attention_for_cpu_backward(*args, **kwargs)
        for g, w in zip(backward(*args, **kwargs), expected):
            torch.testing.assert_close(g, w, **EXACT)


class AttentionBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.qkv, self.out = nn.LayerNorm(16), nn.Linear(16, 48, bias=False), nn.Linear(16, 16)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + self.out((causal + masked).transpose(1, 2).reshape(b, t, 16))


def _attention_batch(g: torch.Generator) -> tuple:
    mask = torch.rand(5, 5, generator=g) > 0.3
    mask[2] = False  # a query that attends to nothing: output 0 as the kernel gives
    return torch.randn(2, 5, 16, generator=g), mask


def test_attention_trains_with_forward_and_backward_in_one_ort_part_each():
    """Causal and boolean-masked F.scaled_dot_product_attention. Before: the flash attention op (forward) and
    its backward ran in torch between ORT parts."""
    recording = train_as_eager(AttentionBlock, _attention_batch)
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)
    for joint in recording.joints():
        for half in joint.compiled_forwards:
            assert all(row["parts"] == 1 for row in half.summary())


# ---- onnxrt: NOTE [Replication-pad gradients as scatter-adds] ---------------------------------------------------
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_replication_pad_backward_matches_eager(dims):
    forward = getattr(aten, f"replication_pad{dims}d")
    backward = getattr(aten, f"replication_pad{dims}d_backward").default
    decomposed = _decomposition(backward)
    space = [3, 4, 5][-dims:] if dims > 1 else [7]
    for padding in ([2, 1] * dims, [0, 3] * dims, [-1, 2] * dims, list(range(2 * dims))):  # crops, unequal sides
        for lead in ([2, 3], [3]):
            x = torch.randn(*lead, *space, generator=_gen(dims), dtype=torch.float64)
            grad = torch.randn(forward(x, padding).shape, generator=_gen(dims + 1), dtype=torch.float64)
            torch.testing.assert_close(decomposed(grad, x, padding), backward(grad, x, padding), **EXACT)


class PaddedConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pad2, self.conv = nn.ReplicationPad2d((1, 2, 0, 1)), nn.Conv2d(2, 3, 3)
        self.pad1, self.pad3 = nn.ReplicationPad1d(2), nn.ReplicationPad3d(1)

    def forward(self, x):
        h = torch.tanh(self.conv(self.pad2(x)))
        return self.pad1(h.flatten(2)).sum(-1) + self.pad3(h.unsqueeze(1)).mean((1, 2, 3, 4))[:, None]


def test_replication_pads_train_with_the_backward_in_one_ort_part():
    """Before: replication_pad{1,2,3}d_backward ran in torch between ORT parts."""
    recording = train_as_eager(PaddedConvNet, lambda g: (torch.randn(2, 2, 5, 6, generator=g),))
    assert_backward_in_one_part(recording)
    assert_forward_in_ort(recording)
