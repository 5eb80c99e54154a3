"""A graph break inside a custom autograd Function's forward (NOTE [Custom Function forwards at breaks]):
the apply runs as the break's Python step, with the forward's own frame through framejit's hook, so the
user functions it calls are captured (hhuntHF6 MED-3: they ran as plain Python, unrecorded).

Each test runs eager and framejit on fresh inputs (three calls; sizes and Python state change), compares
outputs, every gradient and the grad_fn's name, and counts framejit's graphs.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

import framejit
from framejit import capture
from tests.helpers import CountingBackend


class Rev(torch.autograd.Function):
    """A reversible-style forward over user blocks, with a data-dependent break per block."""

    @staticmethod
    def forward(ctx, x, layers):
        for layer in layers:
            s = int(x.sum() > 0)
            x = layer(x) * (1 + s)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y.cos(), None


class Blk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.n = nn.Linear(8, 8), nn.LayerNorm(8)

    def forward(self, x):
        return self.n(torch.nn.functional.gelu(self.a(x)) + x)


class M(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.layers = nn.ModuleList([Blk() for _ in range(3)])

    def forward(self, x):
        return Rev.apply(self.pre(x), self.layers).tanh()


def _run(fn, x):
    x = x.clone().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out, x.grad, type(out.grad_fn).__name__


def test_user_blocks_inside_a_breaking_forward_are_compiled():
    torch.manual_seed(0)
    model = M()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager_before = capture.eager_frame_count()
    for batch in (2, 3, 5):
        x = torch.randn(batch, 8)
        want, want_grad, _ = _run(model, x)
        want_params = [p.grad for p in model.parameters()]  # the blocks get none: backward returns None
        model.zero_grad(set_to_none=True)
        got, got_grad, _ = _run(compiled, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grad, want_grad)
        got_params = [p.grad for p in model.parameters()]
        torch.testing.assert_close(got_params, want_params)
        model.zero_grad(set_to_none=True)
    assert capture.eager_frame_count() == eager_before
    # pre + tanh, and the blocks' bodies captured inside the forward (stock: 4 graphs of 1, 4, 4, 1 ops)
    assert backend.graph_count >= 4
    assert max(backend.op_count(i) for i in range(backend.graph_count)) >= 4


class Scale(torch.autograd.Function):
    """ctx features under a break: needs_input_grad, materialize, non-differentiable outputs, state."""

    calls = 0

    @staticmethod
    def forward(ctx, x, w, k=3.0):
        Scale.calls += 1
        ctx.set_materialize_grads(False)
        ctx.k = k + Scale.calls
        if int(x.sum() > 0):  # data-dependent break
            y = helper(x, w) * ctx.k
        else:
            y = helper(x, w) - ctx.k
        mask = y > 0
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(x, w)
        return y, mask

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, grad_mask):
        x, w = ctx.saved_tensors
        gx = grad * w * ctx.k if ctx.needs_input_grad[0] else None
        gw = (grad * x).sum(0) if ctx.needs_input_grad[1] else None
        return gx, gw, None


def helper(x, w):
    return (x * w).sin() + x


def test_ctx_features_and_function_state_under_a_break():
    def fn(x, w, k):
        y, mask = Scale.apply(x * 2, w, k)
        return y * mask, type(y.grad_fn).__name__

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for i, n in enumerate((4, 6, 9)):
        x, w = torch.randn(n, 5), torch.randn(5)
        results = []
        for f in (fn, compiled):
            Scale.calls = i * 10
            xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_(i != 1)
            out, name = f(xr, wr, float(n))
            out.sum().backward()
            results.append((out, name, xr.grad, wr.grad, Scale.calls))
        (out0, name0, gx0, gw0, c0), (out1, name1, gx1, gw1, c1) = results
        torch.testing.assert_close(out1, out0)
        torch.testing.assert_close(gx1, gx0)
        assert (gw0 is None) == (gw1 is None)
        if gw0 is not None:
            torch.testing.assert_close(gw1, gw0)
        assert name1 == name0 == "ScaleBackward"
        assert c1 == c0
    # `helper` inside the forward is captured (its sin), besides x * 2 and y * mask
    assert any(any(n.target in ("sin", torch.sin) for n in gm.graph.nodes) for gm in backend.graphs)


class Registering(torch.autograd.Function):
    registered: list = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Registering.registered.append(cls.__name__)


class Sub(Registering):
    @staticmethod
    def forward(ctx, x):
        return x * 2 if int(x.sum() > 0) else x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 5


def test_a_class_with_init_subclass_runs_plain_and_is_recorded():
    def fn(x):
        return Sub.apply(x + 1) - 1

    compiled = framejit.compile(fn, backend=CountingBackend())
    before = capture.eager_frame_count()
    registered = list(Registering.registered)
    for n in (3, 4, 7):
        x = torch.randn(n)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = fn(xe), compiled(xc)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xc.grad, xe.grad)
    assert Registering.registered == registered  # no subclass was made behind the user's back
    records = capture.eager_frames_since(before)
    assert any("__init_subclass__" in r["reason"] and r["function"] == "Sub.forward" for r in records)


class Counted(torch.autograd.Function):
    """Its forward breaks (a print) and its values depend on the class identities eager gives."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        print("forward", x.shape[0])
        own = isinstance(ctx, Counted._backward_cls)
        return x * (2 if own else -7)

    @staticmethod
    def backward(ctx, grad):
        ctx._forward_cls.calls += 1
        return grad * (2 if type(ctx) is Counted._backward_cls and ctx._forward_cls is Counted else -15)


def _counted(x):
    y = Counted.apply(x)
    return y * (1 if isinstance(y.grad_fn, Counted._backward_cls) and not Counted.__subclasses__() else 5)


def test_the_function_class_is_the_users_own_in_forward_backward_and_grad_fn(capsys):
    """revAR HIGH-1: the forward ran through a subclass of the user's Function, so `type(ctx)`, `y.grad_fn`'s
    class and `ctx._forward_cls` were the subclass's: code testing them gave other values and gradients, and
    `ctx._forward_cls.calls += 1` wrote the subclass. Now the class's own forward is swapped for the apply."""
    compiled = framejit.compile(_counted, backend="eager")
    for n in (3, 3, 5):
        x = torch.randn(n)
        runs = []
        for fn in (_counted, compiled):
            before = Counted.calls
            runs.append((*_run(fn, x), Counted.calls - before, capsys.readouterr().out))
        (out, grad, name, calls, printed), (w_out, w_grad, w_name, w_calls, w_printed) = runs[1], runs[0]
        torch.testing.assert_close(out, w_out)
        torch.testing.assert_close(grad, w_grad)
        assert (name, calls, printed) == (w_name, w_calls, w_printed)
    assert isinstance(vars(Counted)["forward"], staticmethod) and vars(Counted)["forward"].__func__.__name__ == "forward"
    assert Counted.forward.__code__.co_filename == __file__  # the user's own forward, put back after each apply
