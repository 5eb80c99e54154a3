"""Training through the onnxrt and triton backends (issue 14): forward and backward both run compiled.

Each case trains two copies of one model from the same weights on the same data for 3 steps (forward,
loss, backward, AdamW): one eagerly, one under `framejit.compile(model, backend=...)`. Losses and every
parameter and buffer must match eager within the stated tolerances, and the test proves the backward
ran in the backend: every joint graph (framejit/backends/joint.py) that ran a backward ran it as ORT
sessions (OrtPart.runs) or generated Triton kernels (CompiledGraph.runs), once per backward call.

Tolerances: float32 losses and parameters after 3 AdamW steps (lr 1e-2), atol 2e-4 / rtol 2e-3 (the
backends reorder reductions and fuse ops; AdamW divides by the square root of the second moment, so
gradient differences of 1e-6 become parameter differences of about 1e-5 per step). AdamW's eps is 1e-6
rather than 1e-8: a bias followed by BatchNorm has a gradient that is zero up to rounding (1e-9), which
AdamW with eps 1e-8 would turn into a full-size step in a direction set by rounding noise.
Triton kernels run in Triton's interpreter here (tests/backends/conftest.py), so triton cases use the
smallest zoo models only.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F

import framejit
from framejit.backends import joint as joint_mod
from framejit.backends.checks import unchecked
from framejit.backends.onnxrt.runtime import OrtPart
from framejit.backends.triton.runtime import CompiledGraph
from tests.helpers import without_dropout
from tests.models import zoo

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOL = dict(atol=2e-4, rtol=2e-3)
STEPS = 3

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]


class Recording:
    """The named backend, keeping what it returned for each graph."""

    def __init__(self, name: str):
        self.name, self.compiled = name, []

    def __call__(self, gm, example_inputs):
        compiled = framejit.lookup_backend(self.name)(gm, example_inputs)
        self.compiled.append(compiled)
        return compiled

    def joints(self) -> list:
        found = []
        for compiled in map(unchecked, self.compiled):  # NOTE [Run-time checks as outputs]: entry checks wrap it
            candidate = compiled if isinstance(compiled, joint_mod.JointGraph) else (
                getattr(compiled, "_joint", None) or getattr(compiled, "_training", None))
            if candidate is not None:
                found.append(candidate)
        return found


@pytest.fixture(autouse=True)
def _count_ort_runs(monkeypatch):
    """Each OrtPart counts its session runs in `runs` (proof that a program ran in ONNX Runtime). Its
    `__call__` is wrapped: programs call parts through it, and it is `forward` itself (NOTE [Per-call path]
    in onnxrt/compiler.py), so a wrapped `forward` alone would count nothing."""
    original = OrtPart.__call__

    def counted(self, *args):
        self.runs = getattr(self, "runs", 0) + 1
        return original(self, *args)
    monkeypatch.setattr(OrtPart, "__call__", counted)


def _backend_runs(compiled) -> int:
    """How many times `compiled` (a forward or backward half) ran in its backend, not eagerly."""
    if isinstance(compiled, CompiledGraph):
        return compiled.runs
    programs = [p for p in getattr(compiled, "programs", {}).values() if p is not None]
    programs += [p for entries in getattr(compiled, "dynamic_programs", {}).values() for _, p in entries]
    runs = [max((getattr(m, 'runs', 0) for m in p.graph_module.modules() if isinstance(m, OrtPart)), default=0)
            for p in programs]
    return sum(runs)


def assert_backward_in_backend(recording: Recording, steps: int = STEPS) -> None:
    joints = recording.joints()
    assert joints, "no graph was compiled for training"
    backward_calls = 0
    for graph in joints:
        calls = graph.stats["backward"]
        backward_calls += calls
        ran = sum(_backend_runs(c) for c in graph.compiled_backwards)
        assert ran == calls, f"{recording.name}: {calls} backward call(s), {ran} ran in the backend"
        ran_forward = sum(_backend_runs(c) for c in graph.compiled_forwards)
        assert ran_forward == graph.stats["forward"]
    assert backward_calls >= steps


def _loss(out) -> torch.Tensor:
    tensors = [t for t in zoo.output_tensors(out) if t.is_floating_point() and t.requires_grad]
    return sum(t.square().mean() for t in tensors)


def train(model, batches, step_fn=None) -> tuple[list, torch.nn.Module]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6)
    losses = []
    for args, kwargs in batches:
        loss = (step_fn or (lambda m, a, k: _loss(m(*a, **k))))(model, args, kwargs)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, model


def compare_training(model: torch.nn.Module, batches, backend: str, loss_fn=None, tol=TOL) -> Recording:
    without_dropout(model.train())
    compiled_model = copy.deepcopy(model)
    recording = Recording(backend)
    fast = framejit.compile(compiled_model, backend=recording)
    eager_losses, _ = train(model, batches, loss_fn)
    losses, _ = train(fast, batches, loss_fn)
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), **tol)
    assert_same_state(compiled_model, model, tol)
    assert_backward_in_backend(recording)
    return recording


def assert_same_state(compiled_model: torch.nn.Module, model: torch.nn.Module, tol=TOL) -> None:
    """Parameters and buffers of the compiled copy equal the eager model's, entry by entry."""
    for (name, expected), (_, actual) in zip(model.state_dict().items(), compiled_model.state_dict().items()):
        torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{name}: {m}")


def _zoo_batches(case) -> list:
    return [(case.make_inputs(seed), {}) for seed in range(STEPS)]


ONNXRT_ZOO = zoo.names()
TRITON_ZOO = ["mlp", "gpt", "gru_cell"]


@pytest.mark.parametrize("name", ONNXRT_ZOO)
def test_zoo_training_onnxrt(name):
    case = zoo.get(name, "small")
    compare_training(case.model, _zoo_batches(case), "onnxrt")


@pytest.mark.parametrize("name", TRITON_ZOO)
def test_zoo_training_triton(name):
    case = zoo.get(name, "small")
    compare_training(case.model, _zoo_batches(case), "triton")


# ---- autograd semantics through joint graphs (both backends) -------------------------------------------
BACKENDS = ["onnxrt", "triton"]


def _leaves(seed: int, *shapes) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen).requires_grad_() for shape in shapes]


def _grads_match(fn, backend: str, shapes, seeds=(0, 1), **backward_kwargs) -> Recording:
    """fn(*leaves) eagerly and compiled on fresh leaves per seed: outputs and the leaves' grads match."""
    recording = Recording(backend)
    fast = framejit.compile(fn, backend=recording)
    for seed in seeds:
        eager_in, compiled_in = _leaves(seed, *shapes), _leaves(seed, *shapes)
        expected, actual = fn(*eager_in), fast(*compiled_in)
        torch.testing.assert_close(actual, expected, **TOL)
        _loss(expected).backward(**backward_kwargs)
        _loss(actual).backward(**backward_kwargs)
        for e, a in zip(eager_in, compiled_in):
            torch.testing.assert_close(a.grad, e.grad, **TOL)
    return recording


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_region_and_detach_inside_the_graph(backend):
    def fn(x, w):
        with torch.no_grad():
            scale = (x @ w.t()).sum()  # no gradient flows through scale
        y = torch.tanh(x @ w.t())
        return y * scale + (y * 2).detach() * w.sum()
    recording = _grads_match(fn, backend, [(3, 4), (5, 4)])
    assert_backward_in_backend(recording, steps=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_activation_written_in_place_and_saved_for_the_backward(backend):
    """NOTE [Inputs written in place are saved as their clone]: `h.mul_(w)` on an activation that requires grad
    saves h's old value for w's gradient; the write-back of the new h into the input raised 'modified by an
    inplace operation' at the backward where eager succeeds. Two shapes, h's version and value after. NOTE
    [Inputs the graph writes, saved by eager]: sin saves the new h, so a user's write of h before the
    backward raises eager's error (the last call)."""
    def fn(h, w):
        h.mul_(w)
        return h.sin().sum() + (h * w).sum()
    recording = Recording(backend)
    fast = framejit.compile(fn, backend=recording)
    for seed, rows, write in ((0, 3, False), (1, 3, False), (2, 5, False), (3, 5, True)):
        results = []
        for run in (fn, fast):
            raw, w = _leaves(seed, (rows, 4), (4,))
            h = raw * 1
            loss = run(h, w)
            if write:
                with torch.no_grad():
                    h.add_(1)
            try:
                loss.backward()
                error = None
            except RuntimeError as exc:
                error = str(exc)
            results.append((loss.detach(), h.detach(), h._version, raw.grad, w.grad, error))
        torch.testing.assert_close(results[1][:5], results[0][:5], **TOL)
        assert results[1][5] == results[0][5] and (results[0][5] is not None) == write
    assert_backward_in_backend(recording, steps=2)
    # review revJ HIGH-1: a user's clone of an input the graph never writes is not saved in its place, so writing
    # the input before the backward still raises eager's error (mul saves x for w's gradient)
    def saves_x(x, w):
        return (x * w).sum() + x.clone().sum()
    fast = framejit.compile(saves_x, backend=backend)
    for seed in (3, 4):
        errors = []
        for run in (saves_x, fast):
            x, w = _leaves(seed, (3, 4), (4,))
            x = x.detach()
            loss = run(x, w)
            x.add_(1)
            with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
                loss.backward()
            errors.append((str(info.value).split(":")[0], w.grad is None))
        assert errors[1] == errors[0]
    # review revO HIGH-1: a weight written under no_grad in the function, then used (linear saves it): every
    # backward raised, the version kept at the call being the backend's (2), not eager's count (1) set after it.
    # SGD steps with changing batch sizes; the user's write of the weight before the last backward raises as eager
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        lin = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
        def clipped(x):
            with torch.no_grad():
                lin.weight.clamp_(-0.4, 0.4)
            return lin(x).pow(2).sum()
        run = framejit.compile(clipped, backend=backend) if compiled else clipped
        steps = []
        for seed, rows in ((0, 3), (1, 5), (2, 3)):
            opt.zero_grad()
            x = _leaves(seed, (rows, 4))[0]
            loss = run(x)
            if seed == 2:
                with torch.no_grad():
                    lin.weight.add_(1)
            try:
                loss.backward()
                opt.step()
                error = None
            except RuntimeError as exc:
                error = str(exc)
            steps.append((loss.detach(), x.grad, lin.weight.detach().clone(), lin.bias.detach().clone(), error))
        results.append(steps)
    for eager, fast in zip(*results):
        torch.testing.assert_close(fast[:4], eager[:4], **TOL)
        assert fast[4] == eager[4]
    assert [step[4] is None for step in results[0]] == [True, True, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_weight_written_between_forward_and_backward(backend):
    """NOTE [Inputs eager does not save stay unsaved]: eager saves x and tanh's result for `(x * w).tanh()`, so
    writing w before the backward trains; onnxrt's joint saved w to recompute tanh and raised. Where x requires
    grad, mul saves w as well and the write raises in eager: it must raise compiled too (the last call)."""
    def fn(x, w):
        return (x * w).tanh().sum()
    recording = Recording(backend)
    fast = framejit.compile(fn, backend=recording)
    for seed, rows, x_grad in ((0, 3, False), (1, 3, False), (2, 5, False), (3, 3, True)):
        results = []
        for run in (fn, fast):
            x, w = _leaves(seed, (rows, 4), (4,))
            x.requires_grad_(x_grad)
            loss = run(x, w)
            with torch.no_grad():
                w.mul_(0.9)
            try:
                loss.backward()
                error = None
            except RuntimeError as exc:
                error = str(exc).split(":")[0]
            results.append((loss.detach(), w.grad, x.grad, error))
        torch.testing.assert_close(results[1][:3], results[0][:3], **TOL)
        assert results[1][3] == results[0][3] and (results[0][3] is not None) == x_grad
    assert_backward_in_backend(recording, steps=3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_aliasing_an_input_stays_a_view(backend):
    def fn(x, w):
        return torch.relu(x @ w), x.view(-1), w.t()
    recording = Recording(backend)
    fast = framejit.compile(fn, backend=recording)
    for seed in (0, 1):
        x, w = _leaves(seed, (3, 4), (4, 2))
        out, flat, wt = fast(x, w)
        assert flat._base is x and wt._base is w  # views of the inputs, as in eager
        (out.sum() + (flat * 3).sum() + wt.square().sum()).backward()
        ex, ew = _leaves(seed, (3, 4), (4, 2))
        eo, ef, ewt = fn(ex, ew)
        (eo.sum() + (ef * 3).sum() + ewt.square().sum()).backward()
        torch.testing.assert_close(x.grad, ex.grad, **TOL)
        torch.testing.assert_close(w.grad, ew.grad, **TOL)
    assert_backward_in_backend(recording, steps=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_retain_graph_backward_twice(backend):
    def fn(x, w):
        return torch.sigmoid(x @ w).square()
    recording = Recording(backend)
    fast = framejit.compile(fn, backend=recording)
    x, w = _leaves(0, (3, 4), (4, 2))
    ex, ew = _leaves(0, (3, 4), (4, 2))
    out, expected = fast(x, w).sum(), fn(ex, ew).sum()
    for _ in range(2):  # the second backward reuses the saved tensors; grads accumulate
        out.backward(retain_graph=True)
        expected.backward(retain_graph=True)
        torch.testing.assert_close(w.grad, ew.grad, **TOL)
        torch.testing.assert_close(x.grad, ex.grad, **TOL)
    assert_backward_in_backend(recording, steps=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_double_backward_raises_a_clear_error(backend):
    def fn(x, w):
        return torch.tanh(x @ w).sum()
    fast = framejit.compile(fn, backend=backend)
    x, w = _leaves(0, (3, 4), (4, 2))
    ex, ew = _leaves(0, (3, 4), (4, 2))
    (eager_grad,) = torch.autograd.grad(fn(ex, ew), ew, create_graph=True)
    eager_grad.sum().backward()  # eager supports a gradient of a gradient
    (grad,) = torch.autograd.grad(fast(x, w), w, create_graph=True)
    torch.testing.assert_close(grad, eager_grad, **TOL)  # first order: as eager
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_parameters_and_batchnorm_running_stats(backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8, bias=False), torch.nn.BatchNorm1d(8), torch.nn.GELU(),
                                torch.nn.Linear(8, 3))
    model[3].bias.requires_grad_(False)  # a frozen parameter gets no grad, as in eager
    batches = [((torch.randn(5, 6, generator=torch.Generator().manual_seed(s)),), {}) for s in range(STEPS)]
    recording = compare_training(model, batches, backend)
    assert recording.compiled[0] is not None
    assert model[3].bias.grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_split_by_a_graph_break_trains(backend, capsys):
    class TwoGraphs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            print("between graphs")  # a graph break
            return self.b(h).square()

    torch.manual_seed(0)
    batches = [((torch.randn(3, 4, generator=torch.Generator().manual_seed(s)),), {}) for s in range(STEPS)]
    own_code = framejit.stats()["graphs_own_code"]
    recording = compare_training(TwoGraphs(), batches, backend)
    # the graph before the break passes h (requires grad) on, and the code after the print hands h only to the
    # graph after it: both keep the backend's joint (NOTE [Joints kept across a plain break], kept_joints.py)
    assert framejit.stats()["graphs_own_code"] == own_code
    assert [g.stats["backward"] for g in recording.joints()] == [STEPS, STEPS]
    assert capsys.readouterr().out.count("between graphs") == 2 * STEPS


# ---- transformers models from tiny configs (tests/models/hf/catalog.py) ---------------------------------
HF_ONNXRT = ["gpt2", "llama", "vit"]
# five transformers models per backend (issue 14): bert and distilbert train 3 AdamW steps in
# test_training_gaps2.py, compared with the float64 run (NOTE [AdamW rounding] there: eager float32 itself
# differs from it by up to 2.6e-3 in a few word-embedding elements, so eager and compiled float32 are not
# compared element by element after AdamW). The same split for triton, whose kernels run in Triton's
# interpreter here.
HF_TRITON = ["gpt2", "llama", "vit"]


def _hf_case(name: str):
    from tests.models.hf import catalog, harness
    harness.silence_transformers()
    arch = catalog.get(name)
    model = arch.build()
    model.config.use_cache = False  # outputs are tensors only (no cache objects)
    batches = [((), arch.make_inputs(seed)) for seed in range(STEPS)]
    return model, batches


@pytest.mark.parametrize("name", HF_ONNXRT)
def test_transformers_training_onnxrt(name):
    model, batches = _hf_case(name)
    compare_training(model, batches, "onnxrt")


@pytest.mark.parametrize("name", HF_TRITON)
def test_transformers_training_triton(name):
    model, batches = _hf_case(name)
    compare_training(model, batches, "triton")


def test_onnxrt_joints_recompute_pointwise_ops_instead_of_saving_them():
    """NOTE [Recomputation for ORT programs]: the forward of Linear-GELU-Linear saves the first Linear's
    result, not the GELU of it (the backward recomputes it); gradients equal eager's on two batches."""
    from framejit.backends.onnxrt import onnxrt

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    compiled = onnxrt(torch.fx.symbolic_trace(model), [torch.randn(5, 8)])
    for seed in (1, 2):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(seed))
        got, want = compiled(x), reference(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        got.square().mean().backward()
        want.square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    joint = compiled.training_graph()
    forward, backward = joint.compiled_forwards[0].gm, joint.compiled_backwards[0].gm
    saved = next(n for n in forward.graph.nodes if n.op == "output").args[0][1:]
    assert [n.target for n in saved if n.op == "call_function"] == [torch.ops.aten.addmm.default], forward.code
    assert any(n.target is torch.ops.aten.gelu.default for n in backward.graph.nodes), backward.code
    assert joint.stats["backward"] == 2 and joint.compiled_backwards[0].session_count() >= 1, joint.stats


@pytest.mark.parametrize("name", ["onnxrt", "triton"])
def test_inputs_written_under_no_grad_get_no_gradient(name):
    # NOTE [Writes under no_grad kept in the forward graph]: b written only under no_grad and otherwise unused,
    # c read only under no_grad, d written while also used: eager leaves b.grad and c.grad None, so AdamW
    # neither decays nor steps them; framejit gave b a zero gradient (AdamW then moved b)
    def step(a, b, c, d):
        y = (d * 3).sum()
        with torch.no_grad():
            b.mul_(0.5)
            c.add_(a * 2)
            d.add_(1.0)
        return y + (a * a).sum()

    def run(fn):
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(3, generator=g).requires_grad_() for _ in range(4)]
        opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
        grads = []
        for _ in range(STEPS):
            opt.zero_grad()
            fn(*params).backward()
            grads.append([p.grad if p.grad is None else p.grad.clone() for p in params])
            opt.step()
        return grads, [p.detach() for p in params]
    recording = Recording(name)
    (grads_e, params_e), (grads_c, params_c) = run(step), run(framejit.compile(step, backend=recording))
    assert [[g is None for g in row] for row in grads_c] == [[g is None for g in row] for row in grads_e] \
        == [[False, True, True, False]] * STEPS
    torch.testing.assert_close(grads_c, grads_e)
    torch.testing.assert_close(params_c, params_e)
    assert_backward_in_backend(recording)
