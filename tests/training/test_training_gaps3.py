"""Issue 14, third pass of training gaps: scheduled learning rates in compiled optimizer steps lowered by
onnxrt and triton (NOTE [Float inputs as tensors] in backends/float_inputs.py); a gradient of a gradient on a
signature's first call (NOTE [Double backward on a signature's first call] in backends/joint_function.py);
in-place changes of joint outputs checked only by the backwards that read them (NOTE [Checks where eager's
backward reaches] in backends/joint_outputs.py).

Each test runs the same code eagerly and compiled from the same state and compares values (and optimizer
state) after every step, with the graph counts, and asserts that the graph serving the changing value
really ran in the backend (ORT programs without eager graphs, Triton kernels), one program for every value.
Triton runs in its interpreter on CPU (TRITON_INTERPRET=1): sizes are tiny.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the triton backend's kernels run on CPU tensors

import pytest
import torch

import framejit
from framejit.capture import eager_frames
from tests.helpers import RecordingBackend, optimizers_as_shipped, second_order, tanh_sum


@pytest.fixture(autouse=True)
def optimizers_as_torch_ships_them():
    with optimizers_as_shipped():  # see its docstring
        yield


def assert_lowered(backend: str, compiled) -> None:
    """`compiled` ran in the backend, one program for every value of its float inputs: onnxrt, one ORT
    program (one signature) with only the in-place write-backs in torch; triton, kernels."""
    inner = getattr(compiled, "compiled", compiled)
    if backend == "onnxrt":
        from framejit.backends.onnxrt import OnnxrtCompiled
        assert isinstance(inner, OnnxrtCompiled)
        rows = inner.summary()
        assert len(rows) == 1, rows
        assert not rows[0]["eager_graph"] and rows[0]["ort_nodes"] > 0
        assert {reason.split()[0] for reason in rows[0]["eager_nodes"].values()} <= {"aten::copy_"}
    else:
        from framejit.backends.triton.runtime import CompiledGraph
        assert isinstance(inner, CompiledGraph), getattr(inner, "reason", inner)
        assert inner.kernel_count > 0


def make_params(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3, 4, generator=g).requires_grad_(), torch.randn(4, generator=g).requires_grad_()]


def set_grads(step: int, *param_lists) -> None:
    g = torch.Generator().manual_seed(100 + step)
    grads = [torch.randn(p.shape, generator=g) for p in param_lists[0]]
    for params in param_lists:
        for p, grad in zip(params, grads):
            p.grad = grad.clone()


def warmup(opt, step: int) -> None:
    """A hand-written warmup: the loop writes each group's lr."""
    for group in opt.param_groups:
        group["lr"] = 0.02 * min(1.0, (step + 1) / 3)


SCHEDULES = {
    "step_lr": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
    # changes the momentum (SGD) or beta1 (Adam) with the lr: both become graph inputs
    "one_cycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=8),
    "warmup": None,
}
OPTIMIZERS = {
    "adamw": lambda ps, fe: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=fe),
    "adam": lambda ps, fe: torch.optim.Adam(ps, lr=0.01, weight_decay=0.05, foreach=fe),
    "sgd": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=fe),
}
CASES = [  # (backend, optimizer, foreach, schedule): each optimizer, both paths, each schedule, both backends
    ("onnxrt", "adamw", True, "cosine"), ("onnxrt", "adam", False, "one_cycle"), ("onnxrt", "sgd", False, "step_lr"),
    ("triton", "adamw", False, "warmup"), ("triton", "sgd", True, "one_cycle"),
]


def run_scheduled(backend_name: str, name: str, foreach: bool, schedule: str, steps: int = 5):
    params = make_params(len(name) + foreach)
    eager_params = [p.detach().clone().requires_grad_() for p in params]
    compiled_params = [p.detach().clone().requires_grad_() for p in params]
    eager_opt, compiled_opt = OPTIMIZERS[name](eager_params, foreach), OPTIMIZERS[name](compiled_params, foreach)
    make = SCHEDULES[schedule]
    schedulers = [make(o) for o in (eager_opt, compiled_opt)] if make is not None else []
    backend = RecordingBackend(backend_name)
    step = framejit.compile(compiled_opt.step, backend=backend)
    counts, lrs = [], set()
    for i in range(steps):
        if make is None:
            warmup(eager_opt, i)
            warmup(compiled_opt, i)
        set_grads(i, eager_params, compiled_params)
        assert step() == eager_opt.step()  # None from both
        for s in schedulers:
            s.step()
        for pc, pe in zip(compiled_params, eager_params):
            torch.testing.assert_close(pc, pe, rtol=1e-5, atol=1e-6)
            for key, value in eager_opt.state[pe].items():
                torch.testing.assert_close(compiled_opt.state[pc][key], value, rtol=1e-5, atol=1e-6)
        lrs.add(compiled_opt.param_groups[0]["lr"])
        counts.append(backend.graph_count)
    assert len(lrs) >= 3  # the lr really changed
    return backend, counts


@pytest.mark.parametrize("backend,name,foreach,schedule", CASES,
                         ids=["-".join([b, n, "foreach" if f else "single", s]) for b, n, f, s in CASES])
def test_scheduled_update_is_lowered_once_for_every_lr(backend, name, foreach, schedule):
    """Step 1 creates the state (graph 1, constant lr); from step 2 the lr (and OneCycleLR's momentum or
    beta1) is a float graph input (graph 2) that the backend lowers once, as a 0-d tensor input: later steps
    reuse that program. Before: graph 2 ran eagerly (onnxrt: 'a float input changes between calls';
    triton: 'a graph input is not a tensor')."""
    before = eager_frames.count()
    compiled, counts = run_scheduled(backend, name, foreach, schedule)
    assert counts == [1, 2, 2, 2, 2]
    assert eager_frames.count() == before
    floats = [n for n in compiled.graphs[-1].graph.nodes if n.op == "placeholder" and n.meta.get("dynamic_float")]
    assert len(floats) == (2 if schedule == "one_cycle" else 1)
    assert_lowered(backend, compiled.compiled[-1])


def _temperature(x, t, xi):
    h = torch.tanh(x * t) + (1 - t * 2) * x.sum(0) - t
    return h, xi * t, (x.double() * -t).sum(), torch.lerp(x, h, t / 4)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_a_float_argument_that_changes_is_a_tensor_input_of_one_program(backend):
    """A float argument that changes on every call (a temperature): from the second graph on it is one
    lowered program for every value, with eager's dtypes (int tensor * float: float32; float64 math stays
    float64) and values, 0.0 and negative values included; with a weight that requires grad the same
    graph trains (forward and backward through the joint) with eager's gradients."""
    recording = RecordingBackend(backend)
    compiled = framejit.compile(_temperature, backend=recording)
    for i, t in enumerate([0.5, 0.25, 1.5, 0.0, -2.0]):
        x, xi = torch.randn(2, 3, generator=torch.Generator().manual_seed(i)), torch.arange(3)
        expected, actual = _temperature(x, t, xi), compiled(x, t, xi)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype
            torch.testing.assert_close(a, e)
    assert recording.graph_count == 2
    assert_lowered(backend, recording.compiled[-1])

    def scaled(x, w, t):
        return (torch.sigmoid(x @ w * t) * (1 - t)).sum()
    recording = RecordingBackend(backend)
    compiled = framejit.compile(scaled, backend=recording)
    w0 = torch.randn(3, 3)
    for i, t in enumerate([0.5, 0.25, 1.5]):
        x = torch.randn(2, 3)
        we, wc = w0.clone().requires_grad_(), w0.clone().requires_grad_()
        expected, actual = scaled(x, we, t), compiled(x, wc, t)
        torch.testing.assert_close(actual, expected)
        expected.backward()
        actual.backward()
        torch.testing.assert_close(wc.grad, we.grad)
    assert recording.graph_count == 2
    from framejit.backends.joint import JointGraph
    inner = recording.compiled[-1].compiled  # the joint served the calls (onnxrt makes it on first use)
    assert isinstance(inner._joint if backend == "onnxrt" else inner, JointGraph)


# ---- NOTE [Double backward on a signature's first call] ---------------------------------------------------
def _leaves(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, generator=g).requires_grad_(), torch.randn(4, generator=g).requires_grad_()


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("leaf", [True, False], ids=["leaf_input", "non_leaf_input"])
def test_a_gradient_of_a_gradient_on_the_first_call_raises(backend, leaf):
    """On a signature's first call (AOT autograd's callable) too, a gradient of a gradient with respect to an
    input the forward did not save raises the double-backward error, where it returned None (eager: the
    second derivative); first-order gradients with create_graph=True stay eager's, and a later plain
    backward of the same signature trains as eager."""
    compiled = framejit.compile(tanh_sum, backend=backend)
    for seed in (0, 1):  # two signatures' first calls: contiguous, then a transposed x
        x, w = _leaves(seed)
        if seed:
            x = x.detach().t().contiguous().t().requires_grad_()
        ex, ew = (t.detach().clone().requires_grad_() for t in (x, w))
        want, want_gg = second_order(tanh_sum, ex if leaf else ex * 1, ew)
        assert want_gg is not None  # eager: the second derivative
        with pytest.raises(RuntimeError, match="double backward"):
            second_order(compiled, x if leaf else x * 1, w)
        (g,) = torch.autograd.grad(compiled(x if leaf else x * 1, w), w, create_graph=True)
        torch.testing.assert_close(g, want)
        compiled(x if leaf else x * 1, w).backward()
        tanh_sum(ex if leaf else ex * 1, ew).backward()
        torch.testing.assert_close(w.grad, ew.grad)


# ---- NOTE [Checks where eager's backward reaches] (backends/joint_outputs.py) ------------------------------
def _exp_and_sum(x, w):
    h = x @ w
    return torch.exp(h), (h * 3).sum()  # exp saves its result; the sum's backward never reads it


def _hidden_and_heads(x, w):
    h = x @ w  # returned, and saved by the next matmul (whose backward only the first loss reaches)
    return (h @ w.t()).sum(), torch.tanh(h).sum(), h  # tanh saves its own result, not h


def _step(fn, x, w, scenario: str, kinds: list, hidden: bool):
    """One call and one backward; the outputs and gradients, or the error's type and first words."""
    if hidden:
        first, b, a = fn(x, w)  # a: the output changed; first: the loss whose backward reads it
    else:
        a, b = fn(x, w)
        first = a.sum()
    kinds.append(type(b.grad_fn).__name__)
    try:
        if scenario != "unchanged":
            a.add_(1)
        loss = {"second_only": b, "both": first + b, "first_only": first, "unchanged": first + b}[scenario]
        loss.backward()
        return [a.detach(), b.detach(), x.grad, w.grad]
    except RuntimeError as exc:
        return type(exc), str(exc).split(":")[0][:50]


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("hidden", [False, True], ids=["saved_by_its_own_node", "saved_by_a_later_node"])
def test_a_changed_output_fails_only_the_backwards_that_read_it(backend, hidden):
    """An output that eager's autograd saves (exp's result; a hidden state the next matmul saves), changed in
    place before a backward: eager raises only when the backward reaches the node that saved it, not for a
    backward of another output alone; so does the joint now, on its first call (AOT autograd's callable) and
    on lean calls, with eager's gradients. Before: any backward through the joint raised."""
    fn = _hidden_and_heads if hidden else _exp_and_sum
    compiled = framejit.compile(fn, backend=backend)
    scenarios = ["second_only", "both", "second_only", "first_only", "unchanged", "second_only"]
    kinds = []
    for seed, scenario in enumerate(scenarios):
        g = torch.Generator().manual_seed(seed)
        x, w = torch.randn(2, 3, generator=g), torch.randn(3, 4, generator=g).requires_grad_()
        x.requires_grad_()
        ex, ew = (t.detach().clone().requires_grad_() for t in (x, w))
        expected = _step(fn, ex, ew, scenario, [], hidden)
        actual = _step(compiled, x, w, scenario, kinds, hidden)
        if isinstance(expected[0], type):
            assert actual == expected, scenario
        else:
            torch.testing.assert_close(actual, expected)
    assert kinds == ["CompiledFunctionBackward"] + ["LeanJointBackward"] * 5
