"""Issue 11 (hhuntHF4 MED-2): `torch._check_tensor_all(cond)` (transformers' torch_compilable_check under a
compiler, in every deformable-attention layer of RT-DETR) is a check in the graph, not a data-dependent
break (NOTE [Tensor checks speculated] in speculated_checks.py). Differential: eager vs compiled on fresh
inputs of changing sizes; a failing check raises eager's exception, with its message and the effects before
it made once; graph counts asserted."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG = []


def _layer(x, shapes):
    y = x.sin() * 2
    LOG.append(len(LOG))
    torch._check_tensor_all((shapes[:, 0] * shapes[:, 1]).sum() == y.shape[0])
    return y.cos() + 1


def _with_message(x):
    y = x.sin() * 2
    torch._check_tensor_all(y.abs() <= 2, lambda: f"out of range: {y.shape[0]}")
    return y.cos() + 1


def _inputs(n):
    return torch.randn(n, 3), torch.tensor([[1, n - 1], [1, 1]])


def test_a_tensor_check_that_holds_is_in_the_graph():
    backend = CountingBackend()
    compiled = framejit.compile(_layer, backend=backend)
    for n in [4, 4, 6, 9, 7]:
        x, shapes = _inputs(n)
        LOG.clear()
        expected = _layer(x, shapes)
        assert_same(compiled(x, shapes), expected)
        assert LOG == [0, 1]
    # static and dynamic, one graph each (before: a break at the check, 2 graphs per entry)
    assert backend.graph_count == 2
    compiled = framejit.compile(_with_message, backend=backend)
    for n in [3, 5, 8]:  # a message function: traced through torch's code as before (a break at its .item())
        x = torch.randn(n)
        assert_same(compiled(x), _with_message(x))


def test_a_failing_tensor_check_raises_as_eager_does():
    compiled = framejit.compile(_layer, backend=CountingBackend())
    for n in [4, 5, 6]:
        x, shapes = _inputs(n)
        assert_same(compiled(x, shapes), _layer(x, shapes))
        bad = torch.tensor([[2, n], [1, 1]])
        LOG.clear()
        with pytest.raises(RuntimeError) as eager:
            _layer(x, bad)
        assert LOG == [0]
        LOG.clear()
        with pytest.raises(RuntimeError) as got:
            compiled(x, bad)
        assert str(got.value) == str(eager.value)
        assert LOG == [0]  # the effect before the check made once, as in eager
    compiled = framejit.compile(_with_message, backend=CountingBackend())
    x = torch.full((3,), 1.57)  # |sin(x) * 2| <= 2 holds; a NaN makes it fail
    assert_same(compiled(x), _with_message(x))
    x = torch.tensor([1.0, float("nan"), 2.0])
    with pytest.raises(RuntimeError, match="out of range: 3"):
        _with_message(x)
    with pytest.raises(RuntimeError, match="out of range: 3"):
        compiled(x)


def _not_bool(x):
    torch._check_tensor_all(x > 0 if x.dim() > 1 else x)
    return x + 1


def test_a_tensor_check_on_a_non_bool_tensor_raises_eagers_type_error():
    compiled = framejit.compile(_not_bool, backend=CountingBackend())
    x = torch.randn(3)
    with pytest.raises(TypeError, match="cond tensor must have dtype torch.bool"):
        _not_bool(x)
    with pytest.raises(TypeError, match="cond tensor must have dtype torch.bool"):
        compiled(x)
    x = torch.rand(2, 3) + 0.1
    assert_same(compiled(x), _not_bool(x))
