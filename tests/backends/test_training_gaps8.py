"""Training gaps of issue 14 (eighth pass, h14train): the previous session's known gaps on onnxrt and triton.

Each test trains (or calls) an eager model and a `framejit.compile`d twin from the same weights on the same
data, over 3 or more steps with changing batch sizes, and compares outputs, gradients, parameters, buffers
and exceptions bit for bit where eager's kernel is deterministic.
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
from tests.backends.test_training_backends import Recording, assert_backward_in_backend

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]
BACKENDS = ["eager", "onnxrt", "triton"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


@pytest.fixture
def logged(caplog):
    """A function returning the messages logged on `eager_fallback` and `output_code` so far."""
    logs.set_logs("eager_fallback,output_code")
    caplog.set_level(logging.INFO, logger="framejit")
    yield lambda: [r.getMessage() for r in caplog.records]
    logs.set_logs("")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    differ = int((got != want).sum())
    assert differ == 0, f"{what}: {differ} of {want.numel()} elements differ"


def _train_bit_for_bit(make, backend, sizes, make_opt, compile_step=False, dtype=torch.bfloat16):
    """Eager and compiled twins trained on batches of `sizes` rows; everything equal after every step."""
    torch.manual_seed(0)
    model = make().to(dtype)
    twin = copy.deepcopy(model)
    recording = Recording(backend) if backend != "eager" else "eager"
    fast = framejit.compile(twin, backend=recording)
    opts = [make_opt(model), make_opt(twin)]
    steppers = [opts[0].step, framejit.compile(opts[1].step, backend=backend) if compile_step else opts[1].step]
    for step, rows in enumerate(sizes):
        x = torch.randn(rows, 8, generator=_gen(step)).to(dtype)
        outs = []
        for call, opt in ((model, opts[0]), (fast, opts[1])):
            opt.zero_grad()
            out = call(x)
            out.float().square().mean().backward()
            outs.append(out.detach())
        _same(outs[1], outs[0], f"step {step} output")
        for (name, want), got in zip(model.named_parameters(), twin.parameters()):
            _same(got.grad, want.grad, f"step {step} gradient of {name}")
        for stepper in steppers:
            stepper()
        for (name, want), got in zip(model.state_dict().items(), twin.state_dict().values()):
            _same(got, want, f"step {step} {name}")
    if backend == "triton":
        assert_backward_in_backend(recording, len(sizes))
    elif backend == "onnxrt":  # ORT runs no bfloat16 here: all of a bfloat16 forward may run in torch
        joints = recording.joints()
        assert joints and sum(j.stats["backward"] for j in joints) == len(sizes)


# ---- NOTE [Reduced-precision kernels kept whole on CPU] (backends/reduced_cpu.py) ---------------------------------
class NormGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = nn.Linear(8, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(F.gelu(self.norm(self.a(x))))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_reduced_precision_layer_norm_and_gelu_train_as_eager_bit_for_bit(backend, dtype, logged):
    """Before: triton's lowered layer_norm backward and gelu gave bfloat16 gradients an ulp apart (10-150
    elements of each gradient; onnxrt: the norm's weight and bias gradients, torch._decomp's decompositions)."""
    _train_bit_for_bit(NormGelu, backend, (6, 9, 4), lambda m: torch.optim.SGD(m.parameters(), lr=0.1,
                                                                                 momentum=0.9), dtype=dtype)
    if backend == "triton":
        assert any("Reduced-precision kernels kept whole on CPU" in m for m in logged())


def test_float32_layer_norm_and_gelu_still_lower_on_triton(logged):
    """The fallback is for reduced precision on CPU only: float32 keeps its fused kernels (no extern fallback)."""
    recording = Recording("triton")
    model = NormGelu()
    fast = framejit.compile(model, backend=recording)
    for rows in (5, 3):
        x = torch.randn(rows, 8, generator=_gen(rows))
        fast(x).sum().backward()
        torch.testing.assert_close(fast(x), model(x))
    assert not any("kept whole" in m for m in logged())
    halves = [c for j in recording.joints() for c in (*j.compiled_forwards, *j.compiled_backwards)]
    assert halves and all(getattr(c, "fallbacks", []) == [] for c in halves)


# ---- NOTE [Scalars of reduced-precision addition on CPU] (triton/lowering_pointwise.py) ---------------------------
ALPHA_PROGRAMS = {
    "scalar": lambda x: torch.add(x, 0.1, alpha=3),
    "scalar_sub": lambda x: x.sub(0.7, alpha=-2.5) * 2,
    "tensor": lambda x: torch.add(x, x.flip(0), alpha=0.3),
}


@pytest.mark.parametrize("name", sorted(ALPHA_PROGRAMS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_reduced_precision_add_with_alpha_is_eagers(backend, name):
    """Before (triton): 38 of 1000 elements of torch.add(bf16, 0.1, alpha=3) an ulp off eager, whose kernel
    rounds by the element's place (vector body: one fused multiply-add; each row's tail: alpha*b rounded)."""
    fn = ALPHA_PROGRAMS[name]
    fast = framejit.compile(fn, backend=backend)
    for n in (1000, 77, 3001):
        x = (torch.randn(n, generator=_gen(n)) * 4).bfloat16()
        _same(fast(x), fn(x), f"{n} elements")


class Shifted(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)).add(0.1, alpha=3))


OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.05),
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, foreach=False),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_reduced_precision_optimizer_steps_compiled_match_eager(backend, optimizer):
    """Compiled optimizer steps on bfloat16 parameters. Before: SGD's `param.add_(grad, alpha=-lr)` an ulp
    apart on triton; on onnxrt AdamW's and Adam's state and parameters (22 of 128 elements of exp_avg after one
    step: torch.onnx's type promotion rewrote `exp_avg.lerp_(g, 0.1)` with the weight rounded to bfloat16, and
    decomposed `lerp`/`addcdiv` ran in torch piece by piece)."""
    _train_bit_for_bit(Shifted, backend, (6, 9, 4, 7), OPTIMIZERS[optimizer], compile_step=True)


# ---- NOTE [Dtypes eager's batch norm rejects] (backends/eager_raises.py) ------------------------------------------
class NormOfStats(nn.Module):
    def __init__(self, momentum, stats_dtype, weight_dtype=torch.float32):
        super().__init__()
        self.stem = nn.Linear(5, 3)
        self.norm = nn.BatchNorm1d(3, momentum=momentum)
        self.norm.running_mean = self.norm.running_mean.to(stats_dtype)
        self.norm.running_var = self.norm.running_var.to(stats_dtype)
        self.norm.weight.data = self.norm.weight.data.to(weight_dtype)

    def forward(self, x):
        return self.norm(self.stem(x)).relu()


def _outcome(call, x):
    try:
        out = call(x)
        out.sum().backward()
        return out.detach()
    except Exception as e:  # noqa: BLE001 (the exception is the result compared)
        return (type(e), str(e))


@pytest.mark.parametrize("stats", [torch.float64, torch.bfloat16, torch.float16], ids=["f64", "bf16", "f16"])
@pytest.mark.parametrize("momentum", [0.1, None], ids=["exponential", "cumulative"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_stats_of_another_dtype_raise_as_eager(backend, momentum, stats):
    """Before: onnxrt and triton returned values (momentum=0.1: every call; None: the first call) where eager
    raises RuntimeError('expected scalar type Float but found Double') on every call."""
    torch.manual_seed(0)
    model = NormOfStats(momentum, stats)
    twin = copy.deepcopy(model)
    fast = framejit.compile(twin, backend=backend)
    for step, rows in enumerate((4, 6, 3)):
        x = torch.randn(rows, 5, generator=_gen(step))
        want, got = _outcome(model, x), _outcome(fast, x)
        assert isinstance(want, tuple) and got == want, (step, got, want)
        for (name, expected), actual in zip(model.state_dict().items(), twin.state_dict().values()):
            _same(actual, expected, f"step {step} {name}")


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_batch_norm_of_a_reduced_input_with_float32_stats_still_lowers(backend, logged):
    """What eager accepts (bfloat16 input, float32 parameters and statistics) is not sent to eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3))
    model[0].to(torch.bfloat16)
    fast = framejit.compile(copy.deepcopy(model), backend=backend)
    for rows in (4, 6):
        x = torch.randn(rows, 5, generator=_gen(rows)).bfloat16()
        torch.testing.assert_close(fast(x), model(x), atol=0.05, rtol=0.05)
    assert not any("batch norm rejects" in m for m in logged())
