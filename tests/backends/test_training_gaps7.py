"""Training gaps of issue 14 (seventh pass, h14h16): an adversarial user's training loops on onnxrt and triton.

Each loop trains an eager model and a `framejit.compile`d twin from the same weights and data (3 steps of
forward, loss, backward, optimizer step) and compares losses, gradients, parameters and buffers after every
step (test_training_gaps6.train_twins, tolerances test_training_backends.TOL) and checks that the backward
ran in the backend.
"""
from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framejit
from framejit import config, logs
from tests.backends.test_training_backends import _count_ort_runs  # noqa: F401 (the autouse fixture)
from tests.backends.test_training_backends import TOL, Recording, assert_backward_in_backend
from tests.backends.test_training_gaps6 import _sgd, train_twins

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


@pytest.fixture
def fallback_log(caplog):
    """A function returning the messages logged on `eager_fallback` so far."""
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    yield lambda: [r.getMessage() for r in caplog.records if r.name.endswith("eager_fallback")]
    logs.set_logs("")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---- NOTE [Cumulative BatchNorm momentum] (capture/batchnorm_average.py) ------------------------------------------
class CumulativeNorm(nn.Module):
    def __init__(self, momentum):
        super().__init__()
        self.stem = nn.Linear(5, 6)
        self.norm = nn.BatchNorm1d(6, momentum=momentum)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(F.relu(self.norm(self.stem(x))))


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("momentum", [None, 0.3], ids=["cumulative", "exponential"])
def test_batchnorm_cumulative_average_compiles_once_and_trains_as_eager(backend, momentum, fallback_log):
    """Before (momentum=None): `1.0 / float(num_batches_tracked)` broke the frame, the graph after the break
    recompiled with the float as an input and then ran eagerly (a float momentum changing every call)."""
    start = framejit.stats()
    recording = train_twins(lambda: CumulativeNorm(momentum), lambda g: (torch.randn(4, 5, generator=g),),
                            backend, _sgd, steps=4)
    stats = framejit.stats()
    assert stats["frames_traced"] - start["frames_traced"] == 1
    assert len(recording.compiled) == 1
    assert not fallback_log()


@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 5), (2, 4, 3, 3)], ids=["1d", "1d_seq", "2d"])
def test_batchnorm_cumulative_running_stats_match_eager_exactly_in_float64(shape):
    """The running statistics of the cumulative average agree with eager's kernel within summation-order rounding."""
    torch.manual_seed(0)
    norm = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[len(shape)](4, momentum=None).double()
    twin = copy.deepcopy(norm)
    fast = framejit.compile(twin, backend="onnxrt")
    for step in range(3):
        x = torch.randn(*shape, generator=_gen(step), dtype=torch.float64) * (step + 1) + step
        torch.testing.assert_close(fast(x), norm(x), rtol=1e-13, atol=1e-13)
        for name, want in norm.state_dict().items():
            torch.testing.assert_close(twin.state_dict()[name], want, rtol=1e-14, atol=1e-15, msg=name)


# ---- NOTE [Float64 erf, gelu and hardtanh_backward] (onnxrt/float64_math.py) --------------------------------------
def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def ordered(t):
        i = t.view(torch.int64)
        return torch.where(i < 0, -(i & (2 ** 63 - 1)), i)
    return (ordered(a) - ordered(b)).abs()


def _float64_probe(seed: int) -> torch.Tensor:
    gen = _gen(seed)
    tiny = 10 ** (torch.rand(5000, generator=gen, dtype=torch.float64) * -300)
    specials = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 0.84375, -0.84375, 1.25, -1.25, 6.0, -6.0,
                1 / 0.35, -1 / 0.35, 2.0 ** -28, -(2.0 ** -28), 5e-324, -5e-324, 27.0, -40.0]
    return torch.cat([torch.randn(40000, generator=gen, dtype=torch.float64) * 3,
                      torch.rand(20000, generator=gen, dtype=torch.float64) * 16 - 8,
                      tiny * torch.where(torch.rand(5000, generator=gen) < 0.5, -1.0, 1.0).double(),
                      torch.tensor(specials, dtype=torch.float64)])


def test_float64_erf_and_gelu_run_in_ort_within_eagers_rounding():
    """Before: ORT has no double Erf: erf and gelu ran in torch (node-level fallback)."""
    from framejit.backends.onnxrt import onnxrt
    x0 = _float64_probe(0)
    compiled = {name: onnxrt(torch.fx.symbolic_trace(fn), [x0])
                for name, fn in (("erf", lambda t: torch.erf(t)), ("gelu", lambda t: F.gelu(t)))}
    for seed in (0, 1):
        x = _float64_probe(seed)
        got, want = compiled["erf"](x), torch.erf(x)
        assert torch.equal(got.isnan(), want.isnan())
        finite = ~want.isnan()
        assert _ulps(got[finite], want[finite]).max() <= 2
        assert torch.equal(torch.signbit(got[finite]), torch.signbit(want[finite]))
        got, want = compiled["gelu"](x), F.gelu(x)
        assert torch.equal(got.isnan(), want.isnan())
        finite = x.isfinite()
        # 1 + erf(x) cancels for negative x as in eager's kernel: an ulp of erf is an ulp of 1 times |x| there
        assert ((got - want)[finite].abs() <= x[finite].abs() * 2.0 ** -51).all()
        torch.testing.assert_close(got[~finite], want[~finite], equal_nan=True, rtol=0, atol=0)
    for c in compiled.values():
        (row,) = c.summary()
        assert row["parts"] == 1 and not row["eager_nodes"], row


class Float64Mlp(nn.Module):
    def __init__(self, activation):
        super().__init__()
        self.inner, self.outer = nn.Linear(4, 6), nn.Linear(6, 2)
        self.activation = activation

    def forward(self, x):
        return self.outer(self.activation(self.inner(x) * 2))


FLOAT64_TRAINED = {"gelu": nn.GELU(), "hardtanh": nn.Hardtanh(-0.3, 0.7), "relu6": nn.ReLU6(),
                   "gelu_tanh": nn.GELU(approximate="tanh")}


@pytest.mark.parametrize("name", sorted(FLOAT64_TRAINED))
def test_float64_training_with_erf_gelu_and_hardtanh_runs_every_node_in_ort(name, fallback_log):
    """Before: gelu ran in torch in the forward and the whole backward graph ran eagerly (Erf of doubles);
    hardtanh_backward (hardtanh, relu6) ran in torch (torchlib mixed a float32 constant into double Mul)."""
    torch.manual_seed(0)
    model = Float64Mlp(FLOAT64_TRAINED[name]).double()
    twin = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(twin, backend=recording)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for step in range(3):
        x = torch.randn(5, 4, generator=_gen(step), dtype=torch.float64)
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            opt.zero_grad()
            call(x).square().sum().backward()
        for want, got in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-13, atol=1e-15)
        for opt in opts:
            opt.step()
    assert_backward_in_backend(recording, steps=3)
    rows = [row for joint in recording.joints() for half in joint.compiled_forwards + joint.compiled_backwards
            for row in half.summary()]
    assert rows and all(row["parts"] == 1 for row in rows), rows
    assert all("a free op" in why for row in rows for why in row["eager_nodes"].values()), rows
    assert not fallback_log()


# ---- NOTE [bfloat16 rounding in the interpreter] (triton/codegen.py), NOTE [Scalars of reduced-precision
# addition on CPU] (triton/lowering_pointwise.py) ------------------------------------------------------------------
BF16_PROGRAMS = {
    "cast": lambda x: x.to(torch.bfloat16).float() * 3,
    "scalar_chain": lambda x: (x.to(torch.bfloat16) * 1.5 + 0.3) * 1.1 - 0.7,
    "reversed": lambda x: 0.3 - x.to(torch.bfloat16) * 2,
}


@pytest.mark.parametrize("name", sorted(BF16_PROGRAMS))
def test_bfloat16_kernels_round_as_eager(name):
    """Before: the interpreter truncated float32 to bfloat16 (30-50% of elements an ulp below eager), and add/sub
    of a scalar kept it in float32 where eager's CPU kernel rounds it to bfloat16 first (14-22%)."""
    fn = BF16_PROGRAMS[name]
    fast = framejit.compile(fn, backend="triton")
    for seed in (0, 1):
        x = torch.randn(3000, generator=_gen(seed)) * 4
        got, want = fast(x), fn(x)
        assert got.dtype == want.dtype and torch.equal(got, want), (got != want).sum()


class AutocastBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(torch.tanh(self.a(x)) * 1.5 + 0.25)


def test_bfloat16_autocast_training_on_triton_matches_eager_bit_for_bit():
    """Before: outputs and every gradient differed from eager's at bf16 rounding (0.004 to 0.04 off)."""
    torch.manual_seed(0)
    model = AutocastBlock()
    twin = copy.deepcopy(model)
    recording = Recording("triton")
    fast = framejit.compile(twin, backend=recording)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for step in range(3):
        x = torch.randn(6, 8, generator=_gen(step))
        outs = []
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            opt.zero_grad()
            out = call(x)
            out.float().square().mean().backward()
            outs.append(out.detach())
        assert outs[0].dtype == outs[1].dtype == torch.bfloat16 and torch.equal(outs[0], outs[1])
        for want, got in zip(model.parameters(), twin.parameters()):
            assert torch.equal(got.grad, want.grad), (got.grad - want.grad).abs().max()
        for opt in opts:
            opt.step()
    assert_backward_in_backend(recording, steps=3)


# ---- an adversarial user's training loops (found no gap at 8cd138d; kept as coverage) -----------------------------
class TiedEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.mix = nn.Linear(6, 6)
        self.out = nn.Linear(6, 10, bias=False)
        self.out.weight = self.emb.weight  # weight tying

    def forward(self, t):
        return self.out(torch.tanh(self.mix(self.emb(t))))


LOOPS = {
    "groupnorm": (lambda: nn.Sequential(nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(),
                                        nn.Linear(64, 2)), lambda g: (torch.randn(2, 2, 6, 6, generator=g),)),
    "instancenorm_tracked": (lambda: nn.Sequential(nn.Conv1d(3, 4, 3), nn.InstanceNorm1d(4, track_running_stats=True),
                                                   nn.Flatten(), nn.Linear(24, 2)),
                             lambda g: (torch.randn(2, 3, 8, generator=g),)),
    "layernorm_plain_prelu": (lambda: nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6, elementwise_affine=False),
                                                    nn.PReLU(6), nn.Linear(6, 2)),
                              lambda g: (torch.randn(3, 5, generator=g),)),
    "tied_padded_embedding": (TiedEmbedding, lambda g: (torch.randint(0, 10, (2, 3), generator=g),)),
}


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_training_loops_match_eager(name, backend, fallback_log):
    make, batch = LOOPS[name]
    train_twins(make, batch, backend, _sgd)
    assert not fallback_log()


@pytest.mark.parametrize("kind", ["clip", "accumulate", "keep_zeroed_grads"])
def test_loop_mechanics_match_eager(kind):
    """Gradient clipping, accumulation over 2 micro-batches, zero_grad(set_to_none=False), on triton."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    recording = Recording("triton")
    fast = framejit.compile(twin, backend=recording)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]
    for step in range(3):
        grads = []
        for call, module, opt in ((model, model, opts[0]), (fast, twin, opts[1])):
            if kind == "keep_zeroed_grads":
                opt.zero_grad(set_to_none=False)
            micro = 2 if kind == "accumulate" else 1
            for k in range(micro):
                x = torch.randn(4, 5, generator=_gen(10 * step + k))
                (call(x).square().mean() / micro).backward()
            if kind == "clip":
                torch.nn.utils.clip_grad_norm_(module.parameters(), 0.05)
            grads.append([p.grad.clone() for p in module.parameters()])
            opt.step()
            if kind != "keep_zeroed_grads":
                opt.zero_grad()
        for got, want in zip(grads[1], grads[0]):
            torch.testing.assert_close(got, want, **TOL)
        for got, want in zip(twin.parameters(), model.parameters()):
            torch.testing.assert_close(got, want, **TOL)
    assert_backward_in_backend(recording, 3)
