"""Custom autograd Functions with grad on, continued (NOTE [Custom autograd functions in the graph]):
keyword arguments and defaults of `apply` (NOTE [Keyword arguments of apply]) and arguments that are
neither tensors nor constants.

Each test runs eager and framejit on fresh inputs (two or more calls; values, shapes and Python arguments
change), compares outputs and every gradient, and counts framejit's graphs against stock torch.compile's
on the same calls (the reference; tests only). The backwards differ from autograd's derivative of the
forward on purpose, so a graph that differentiated the forward would fail.
"""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import framejit
from tests.capture.test_autograd_function2 import Dirty
from tests.helpers import CountingBackend, RecordingBackend

os.environ.setdefault("TRITON_INTERPRET", "1")  # triton kernels run on CPU tensors (as tests/backends)


class Keywords(torch.autograd.Function):
    """The ctx style: keywords become positional inputs; `w` gets its own gradient."""

    @staticmethod
    def forward(ctx, x, k=2.0, w=None):
        ctx.k = k
        if w is None:
            return x * k
        ctx.save_for_backward(w)
        return x * k * w

    @staticmethod
    def backward(ctx, grad):
        if len(ctx.needs_input_grad) < 3:
            return grad * ctx.k * 3, None
        (w,) = ctx.saved_tensors
        return grad * ctx.k * 3 * w, None, grad * 5 if ctx.needs_input_grad[2] else None


class Defaults(torch.autograd.Function):
    """The setup_context style: apply binds the forward's signature, defaults included."""

    @staticmethod
    def forward(x, k=2.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k * 3, None


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k * 3, None


class FromList(torch.autograd.Function):
    """Tensors in a list or tuple are no inputs of the node: they get no gradient from it."""

    @staticmethod
    def forward(ctx, x, tensors):
        ctx.save_for_backward(tensors[0])
        return x * tensors[0] + tensors[1]

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * a * 2, None


class ThroughModule(torch.autograd.Function):
    """A module argument: its weights are read by the forward (under no_grad: no weight gradient)."""

    @staticmethod
    def forward(ctx, x, module):
        return module(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 3, None


@dataclasses.dataclass
class Config:
    scale: float
    shift: float


class WithConfig(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, config):
        ctx.scale = config.scale
        return x * config.scale + config.shift

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale * 2, None


def _run(fn, args):
    args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*args)
    out.backward()
    return out, [a.grad for a in args if isinstance(a, torch.Tensor)]


def _differential(fn, calls, backend, joint=True, stock=True):
    """framejit's graph count on `calls` (each compared with eager: output, gradients, and that the graph's
    own backward ran, not an eager fallback) and stock torch.compile's on the same calls."""
    framejit.reset()
    recording = RecordingBackend(backend)
    compiled = framejit.compile(fn, backend=recording)
    for args in calls:
        expected, expected_grads = _run(fn, args)
        got, got_grads = _run(compiled, args)
        torch.testing.assert_close(got, expected)
        assert len(got_grads) == len(expected_grads)
        for g, e in zip(got_grads, expected_grads):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e)
        if backend != "eager" and joint:
            assert "Sum" not in type(got.grad_fn).__name__  # the backend's joint, not the graph run eagerly
    explained = framejit.explain(fn, backend="eager")(*calls[-1])
    if not stock:
        return recording.graph_count, explained.graph_break_count, None
    import torch._dynamo as dynamo  # the reference compiler (tests only)
    dynamo.reset()
    reference = CountingBackend()
    stock_fn = torch.compile(fn, backend=reference)
    try:
        for args in calls:
            _run(stock_fn, args)
    finally:
        dynamo.reset()
    return recording.graph_count, explained.graph_break_count, reference.graph_count


def _x(*shape):
    return torch.randn(*shape, requires_grad=True)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])  # triton: the next test's joints
def test_keyword_arguments_and_defaults_of_apply(backend):
    def fn(x, w):
        a = Keywords.apply(x, k=5.0)  # (x, 5.0): two inputs
        b = Keywords.apply(x * 2, 1.5, w=w)  # (x, 1.5, w): w gets the backward's gradient
        c = Defaults.apply(x=x * 3)  # setup_context sees (x, 2.0)
        d = Defaults.apply(x, k=4.0)
        return (a + b + c + d).sum()

    calls = [(_x(n), torch.randn(n, requires_grad=grad)) for n, grad in ((3, True), (5, True), (5, False))]
    graphs, breaks, stock = _differential(fn, calls, backend)
    assert (graphs, breaks) == (3, 0)  # n dynamic on the second call, w's requires_grad changed on the third
    assert graphs <= stock  # stock: 8 (4 graphs, 3 breaks in explain's run)


def test_keywords_eager_rejects_raise_eagers_error():
    def fn(x, w, case):
        if case == 0:
            return Keywords.apply(x, w=w)  # a gap before w: "missing required argument"
        if case == 1:
            return Keywords.apply(x, 2.0, k=3.0)
        if case == 2:
            return Keywords.apply(x, z=3.0)
        return Defaults.apply(x, 2.0, 3.0)

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for case in range(4):
        messages = []
        for f in (fn, compiled):
            with pytest.raises(TypeError) as raised:
                f(_x(3), _x(3), case)
            messages.append(str(raised.value))
        assert messages[0] == messages[1]
    # what eager accepts is captured whole, with these functions too
    assert framejit.explain(lambda x, w: Keywords.apply(x, 2.0, w=w).sum(), backend="eager")(_x(3), _x(3)).graph_break_count == 0


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_arguments_that_are_neither_tensors_nor_constants(backend):
    linear = torch.nn.Linear(3, 3)

    def fn(x, k, shift):
        a = Scale.apply(x, k)  # a float that changes per call
        b = FromList.apply(x, [x.detach() * 2, torch.ones(3)])
        c = FromList.apply(x * 2, (shift, x.detach()))
        d = ThroughModule.apply(x, linear)
        e = WithConfig.apply(x, Config(1.5, -1.0))  # Config(k, ...): stock crashes (lift_tracked_freevar_to_input)
        return (a + b + c + d + e).sum()

    calls = [(_x(2, 3), k, torch.randn(3)) for k in (2.0, 3.0, 0.5)]
    # k is a graph input from the second call on (NOTE [Dynamic floats]); onnxrt and triton run a graph
    # whose float input reaches a Function's region in eager torch (NOTE [Float inputs as tensors] does not
    # rewrite regions; logged on eager_fallback), so only their first graph is checked for its joint
    counts = _differential(fn, calls[:1], backend, stock=False)[:1] + _differential(fn, calls, backend, joint=False)
    assert counts[0] == 1
    assert linear.weight.grad is None  # no call gave the module's weight a gradient (as eager)
    assert counts[1:] == (2, 0, 2)  # the second graph: k symbolic (automatic dynamic), as stock


class WithJvp(torch.autograd.Function):
    """Forward mode: a jvp that is not autograd's derivative of the forward (3x, not 1x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() * 2

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return tangent * x.cos() * 3


class NoJvp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


@pytest.mark.parametrize("requires_grad", [True, False])
def test_forward_mode_ad_runs_the_users_jvp_or_raises_eagers_error(requires_grad):
    import torch.autograd.forward_ad as forward_ad

    def fn(x, y):
        return WithJvp.apply(x) * 2 + NoJvp.apply(y)

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    x, y = torch.randn(3, requires_grad=requires_grad), torch.randn(3, requires_grad=requires_grad)
    torch.testing.assert_close(compiled(x, y), fn(x, y))  # captured first, with no dual level open
    assert framejit.explain(fn, backend="eager")(x, y).graph_break_count == 0
    for n in (3, 4):
        x, y, tx, ty = (torch.randn(n, requires_grad=requires_grad), torch.randn(n, requires_grad=requires_grad),
                        torch.randn(n), torch.randn(n))
        results = []
        for f in (fn, compiled):
            with forward_ad.dual_level():
                try:
                    results.append(forward_ad.unpack_dual(f(forward_ad.make_dual(x, tx), y)))
                except Exception as e:  # noqa: BLE001 (compared below)
                    results.append((type(e), str(e)))
                with pytest.raises(NotImplementedError, match="jvp"):  # NoJvp with a dual input: eager's error
                    f(x, forward_ad.make_dual(y, ty))
        torch.testing.assert_close(results[1].primal, results[0].primal)
        torch.testing.assert_close(results[1].tangent, results[0].tangent)  # 6 cos(x) tx: WithJvp's own jvp
        torch.testing.assert_close(results[0].tangent, tx * x.detach().cos() * 6)


def test_mark_dirty_is_captured():
    def fn(x):
        return (Dirty.apply(x * 1) + x).sum()

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 4):
        x = _x(n)
        expected, expected_grads = _run(fn, [x])
        got, got_grads = _run(compiled, [x])
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_grads[0], expected_grads[0])
    explained = framejit.explain(fn, backend="eager")(_x(3))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)  # as stock (NOTE [Inputs marked dirty])
