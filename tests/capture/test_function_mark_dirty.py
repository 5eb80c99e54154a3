"""autograd.Function whose forward writes its argument in place and marks it dirty: NOTE [Inputs marked dirty]."""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, OnnxrtRecorder, assert_same


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def apply_then_add(x, y):
    return Double.apply(x.clone()) + y


def reads_the_written_tensor(x, y):
    z = x.clone()
    r = Double.apply(z)
    return r is z, z * 3 + r.sin() * y


def on_a_leaf(x):
    return Double.apply(x) + 1


def _run(fn, backend, make, calls=3):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    for n in range(3, 3 + calls):
        args = make(n)
        eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        expected, actual = fn(*eager_args), compiled(*args)
        assert_same(actual, expected)
        loss = [t for t in (actual if isinstance(actual, tuple) else (actual,)) if isinstance(t, torch.Tensor)][0]
        eloss = [t for t in (expected if isinstance(expected, tuple) else (expected,)) if isinstance(t, torch.Tensor)][0]
        if eloss.requires_grad:
            eloss.sum().backward()
            loss.sum().backward()
            assert_same([a.grad for a in args], [a.grad for a in eager_args])
    return compiled


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_marked_dirty_argument_in_one_graph(backend):
    counter = CountingBackend() if backend == "eager" else OnnxrtRecorder()
    for fn in (apply_then_add, reads_the_written_tensor):
        _run(fn, counter, lambda n: (torch.randn(n, requires_grad=True), torch.randn(n)))
        assert framejit.explain(fn)(torch.randn(4, requires_grad=True), torch.randn(4)).break_reasons == []
    if backend == "eager":
        assert counter.graph_count == 4  # each function: a static size, then a symbolic one


def test_marked_dirty_without_grad_and_under_no_grad_break_and_match_eager():
    counter = CountingBackend()
    _run(apply_then_add, counter, lambda n: (torch.randn(n), torch.randn(n)))
    with torch.no_grad():  # eager returns another object for a leaf that requires grad here, version 2
        _run(reads_the_written_tensor, counter, lambda n: (torch.randn(n, requires_grad=True), torch.randn(n)))
    reasons = framejit.explain(apply_then_add)(torch.randn(3), torch.randn(3)).break_reasons
    assert "mark_dirty" in str(reasons[0])
    # the apply runs at that break with Double.forward a frame of its own (NOTE [Custom Function forwards at
    # breaks]), which breaks at its ctx calls
    assert len(reasons) == 3 and all(any(f.function == "forward" for f in r.user_stack) for r in reasons[1:])


def version_and_identity(x):
    z = x.clone()
    r = Double.apply(z)
    return r, r is z, z._version  # eager: the same object, version 2 (the write, then the apply's bump)


def saved_then_written(x):
    z = x.clone()
    w = z * z  # saves z for its backward: the write makes eager's backward raise
    return w + Double.apply(z)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_version_identity_and_saved_tensor_error_as_eager(backend):
    framejit.reset()
    compiled = framejit.compile(version_and_identity, backend=backend)
    for n in (3, 4, 5):
        x = torch.randn(n, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        actual, expected = compiled(x), version_and_identity(x2)
        assert_same(actual, expected)
        actual[0].sum().backward()
        expected[0].sum().backward()
        assert_same(x.grad, x2.grad)
    compiled = framejit.compile(saved_then_written, backend=backend)
    for n in (3, 4):
        x = torch.randn(n, requires_grad=True)
        for f in (saved_then_written, compiled):
            out = f(x)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                out.sum().backward()


def test_marked_dirty_leaf_that_requires_grad_raises_as_eager():
    compiled = framejit.compile(on_a_leaf, backend=CountingBackend())
    for n in (3, 4):
        x = torch.randn(n, requires_grad=True)
        with pytest.raises(RuntimeError) as expected:
            on_a_leaf(x)
        with pytest.raises(RuntimeError) as actual:
            compiled(x)
        assert str(actual.value) == str(expected.value)
        y = torch.randn(n)  # a leaf without grad: written in place, as eager writes it
        y2 = y.clone()
        assert_same(compiled(y), on_a_leaf(y2))
        assert_same(y, y2)
