"""Custom autograd Functions applied with grad on are captured, and their own backward runs
(NOTE [Custom autograd functions in the graph]).

Each test compares gradients with eager on fresh inputs over two or more calls (shapes, values and which
inputs require grad change), and asserts the graph and break counts. The backwards differ on purpose from
autograd's derivative of the forward (a scale by 2, a straight-through estimator, a halved input
gradient), so a graph that differentiated the forward instead would fail.
"""
from __future__ import annotations

import os

import pytest
import torch
from torch.autograd.function import once_differentiable

import framejit

os.environ.setdefault("TRITON_INTERPRET", "1")  # triton kernels run on CPU tensors (as tests/backends)

SCALE = [2.0]


class Scale2(torch.autograd.Function):
    """sin(x) * k whose backward is twice the derivative; k is a Python number."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x.sin() * k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() * ctx.k * 2, None


class STE(torch.autograd.Function):
    """Rounding with a straight-through gradient (autograd's own derivative of round is 0)."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


class Multi(torch.autograd.Function):
    """Three outputs, one non-differentiable; gradients only where needs_input_grad says."""

    @staticmethod
    def forward(ctx, x, y):
        index = x.argmax(-1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(x, y)
        return x * y, index, x + y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_product, grad_index, grad_sum):
        x, y = ctx.saved_tensors
        grad_x = grad_product * y + grad_sum if ctx.needs_input_grad[0] else None
        grad_y = grad_product * x * 3 + grad_sum if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class Matmul(torch.autograd.Function):
    """The setup_context style: forward without ctx."""

    @staticmethod
    def forward(x, w):
        return x @ w

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        ctx.save_for_backward(x, w)
        ctx.rows = x.shape[0]

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        assert grad.shape[0] == ctx.rows
        return (grad @ w.t()) * 0.5, x.t() @ grad


class MaskedSoftmax(torch.autograd.Function):
    """transformers' XSoftmax (deberta-v2, sew-d): an in-place op on a value the forward made."""

    @staticmethod
    def forward(ctx, x, mask, dim):
        ctx.dim = dim
        rmask = ~(mask.to(torch.bool))
        output = x.masked_fill(rmask, torch.tensor(torch.finfo(x.dtype).min))
        output = torch.softmax(output, ctx.dim)
        output.masked_fill_(rmask, 0)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad):
        (output,) = ctx.saved_tensors
        return torch._softmax_backward_data(grad, output, ctx.dim, output.dtype) * 2, None, None


class WritesItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


class GradReverse(torch.autograd.Function):
    """Returns a view of its input; the gradient is reversed and scaled."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad * ctx.alpha, None


class WithCount(torch.autograd.Function):
    """A tuple output holding a Python int: the backward gets None for it."""

    @staticmethod
    def forward(ctx, x):
        return x * 1, 3

    @staticmethod
    def backward(ctx, grad, grad_count):
        assert grad_count is None
        return grad * 4


class GlobalScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        return grad * SCALE[0]


class PrintingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        print("backward ran")
        return grad * 5


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 7


def _counts(fn, *args):
    explained = framejit.explain(fn, backend="eager")(*args)  # what is captured does not depend on the backend
    return explained.graph_count, explained.graph_break_count


def _grads(fn, inputs):
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*inputs)
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    return out, [t.grad for t in inputs], loss.grad_fn


def _check(fn, compiled, inputs):
    expected, expected_grads, _ = _grads(fn, inputs)
    got, got_grads, grad_fn = _grads(compiled, inputs)
    torch.testing.assert_close(got, expected)
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e)
    return grad_fn


def _steps(x, y):
    return Scale2.apply(x * 2, 3) + STE.apply(y * 1.5)


@pytest.mark.parametrize("backend", ["eager", "triton"])  # onnxrt: the next tests
def test_the_custom_backward_runs_in_one_graph(backend):
    def fn(x, y):
        return _steps(x, y).sum()

    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    for n in (4, 7):
        grad_fn = _check(fn, compiled, [torch.randn(3, n, requires_grad=True), torch.randn(3, n, requires_grad=True)])
        if backend != "eager":  # the backend's joint ran (not an eager fallback of the graph)
            assert "Backward" in type(grad_fn).__name__ and "Sum" not in type(grad_fn).__name__
    assert _counts(fn, torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)) == (1, 0)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_ctx_features_and_needs_input_grad(backend):
    def fn(x, y, w):
        product, index, total = Multi.apply(x, y)
        out = Matmul.apply(MaskedSoftmax.apply(product + total, (x > 0).int(), -1), w)
        return out.sum() + index.float().sum(), index

    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    for n, y_grad, w_grad in ((4, True, True), (4, False, True), (6, True, False)):
        inputs = [torch.randn(3, n, requires_grad=True), torch.randn(3, n, requires_grad=y_grad),
                  torch.randn(n, 2, requires_grad=w_grad)]
        _check(fn, compiled, inputs)
    assert _counts(fn, torch.randn(3, 4, requires_grad=True), torch.randn(3, 4),
                   torch.randn(4, 2, requires_grad=True)) == (1, 0)


def test_apply_with_no_input_requiring_grad_is_captured():
    def fn(x, w):
        return (Scale2.apply(x, 2) * w).sum()

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 5):
        _check(fn, compiled, [torch.randn(n), torch.randn(n, requires_grad=True)])
    assert _counts(fn, torch.randn(3), torch.randn(3, requires_grad=True)) == (1, 0)


def test_views_constant_outputs_and_checkpointed_layers():
    linear = torch.nn.Linear(4, 4)

    def block(h):
        return GradReverse.apply(linear(h), 0.5).relu()

    def fn(x):
        a, count = WithCount.apply(x * 1)
        return torch.utils.checkpoint.checkpoint(block, a * count, use_reentrant=False).sum()

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (2, 5):
        x = torch.randn(n, 4, requires_grad=True)
        _check(fn, compiled, [x])
        expected = linear.weight.grad.clone()
        linear.weight.grad = None
        fn(x).backward()  # the compiled call's weight gradient equals eager's
        torch.testing.assert_close(linear.weight.grad, expected / 2)
        linear.weight.grad = None
    assert _counts(fn, torch.randn(2, 4, requires_grad=True)) == (1, 0)


def test_a_global_the_backward_reads_is_guarded():
    def fn(x):
        return GlobalScale.apply(x).sum()

    framejit.reset()
    compiled = framejit.compile(fn, backend="onnxrt")
    try:
        for scale in (2.0, 2.0, 5.0):
            SCALE[0] = scale
            _check(fn, compiled, [torch.randn(4, requires_grad=True)])
    finally:
        SCALE[0] = 2.0
    assert _counts(fn, torch.randn(4, requires_grad=True)) == (1, 0)


@pytest.mark.parametrize("unsupported", [PrintingBackward, Dirty, WritesItsInput])
def test_what_cannot_be_captured_breaks_with_eager_gradients(unsupported, capsys):
    def fn(x, y):
        a = Scale2.apply(x, 2)
        b = unsupported.apply(y * 1)
        return (a.sum() + b.sum()) * 2

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 5):
        _check(fn, compiled, [torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)])
    if unsupported is PrintingBackward:
        assert capsys.readouterr().out == "backward ran\n" * 4  # eager's and the compiled run's, both calls
    captured = unsupported is Dirty  # NOTE [Inputs marked dirty]: now one graph, as stock
    # otherwise the apply is the break's step and its forward a frame of its own, compiled (NOTE [Custom
    # Function forwards at breaks]): 3 graphs (stock: PrintingBackward 3, WritesItsInput 1)
    assert _counts(fn, torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)) == ((1, 0) if captured else (3, 1))
