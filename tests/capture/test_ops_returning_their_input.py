"""Ops that return their input object itself (NOTE [Ops that return their input itself] in
framejit/capture/tensor_subclasses.py): `x.contiguous()` of a contiguous x, `x.to(x.dtype)`, `x.float()` of a
float32 x, `torch.atleast_1d(x)`. Eager returns x itself (the same object, its class, its attributes, and a write
through the result is a write of x) for plain tensors, nn.Parameters and tensor subclasses; differential on fresh
inputs, with the dtype changing between calls (then the result is a new tensor).
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend


class Plain(torch.Tensor):
    pass


class OwnTF(torch.Tensor):  # the usual own __torch_function__: func run with subclass dispatch off
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


MAKERS = {  # a plain tensor and a plain subclass with dispatch on were right before (not repeated here)
    "parameter": nn.Parameter,
    "own_torch_function": lambda t: t.as_subclass(OwnTF),
}
DTYPES = (torch.float32, torch.float32, torch.float64)


def returns_itself(x):
    y = x.contiguous()
    z = x.to(torch.float32)
    y.tag = "set on y"
    with torch.no_grad():
        x.float().add_(1)  # a write of x where x is float32
    (a,) = torch.atleast_1d((x,))
    return type(y).__name__, y is x, type(z).__name__, z is x, a is x, isinstance(z, nn.Parameter), y, z


def _outcome(result, x):
    return tuple(("x" if r is x else (type(r).__name__, r.dtype, r.tolist())) if isinstance(r, torch.Tensor) else r
                 for r in result), x.detach().as_subclass(torch.Tensor).tolist(), getattr(x, "tag", None)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_ops_returning_their_input_give_that_object(kind):
    """revBL PRE-1/PRE-5: a Parameter's (or own-__torch_function__ subclass's) `p.contiguous()` came back as
    another object, a plain Tensor; an attribute set on it and its identity were lost."""
    compiled = framejit.compile(returns_itself, backend=CountingBackend())
    for i, dtype in enumerate(DTYPES):
        outcomes = []
        for fn in (returns_itself, compiled):
            x = MAKERS[kind](torch.arange(6.0 + 3 * i, dtype=dtype).reshape(2 + i, 3))
            outcomes.append(_outcome(fn(x), x))
        assert outcomes[1] == outcomes[0], (kind, i)


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        w = self.weight.to(x.dtype)  # transformers' norms
        with torch.no_grad():
            w.add_(1)  # reaches the parameter where the dtypes agree
        return x * w, type(w).__name__, w is self.weight, isinstance(w, nn.Parameter)


def test_parameter_to_its_own_dtype_is_the_parameter():
    modules = Norm(), Norm()
    backend = CountingBackend()
    compiled = framejit.compile(modules[1], backend=backend)
    for i, dtype in enumerate((torch.float32, torch.float64, torch.float32, torch.float64)):
        x = torch.ones(2 + i, 3, dtype=dtype)
        expected, actual = modules[0](x), compiled(x)
        assert actual[1:] == expected[1:], i
        assert torch.equal(actual[0], expected[0]) and actual[0].dtype == expected[0].dtype
        assert torch.equal(modules[1].weight, modules[0].weight), i
    assert backend.graph_count <= 4


def results_under_dispatch_state(x):
    y = x.contiguous()
    return (type(x * 2).__name__, type(x.sum()).__name__, type(y).__name__, y is x, type(x.float()).__name__,
            type(torch.as_tensor(x, dtype=torch.float64)).__name__, type(torch.Tensor(x)).__name__)


def test_subclass_results_follow_the_dispatch_state():
    """NOTE [Subclass results with dispatch off]: under an outside DisableTorchFunctionSubclass, ops on a plain
    subclass give plain Tensors (they gave the subclass), while ops that return x itself still give x (revBL
    HIGH-1, the reason ee92223 was reverted); calls with dispatch on again give the subclass. torch.as_tensor
    with a dtype and torch.Tensor(x) call no __torch_function__: plain Tensors in either state."""
    compiled = framejit.compile(results_under_dispatch_state, backend=CountingBackend())
    for i, off in enumerate((False, True, True, False)):
        answers = []
        for fn in (results_under_dispatch_state, compiled):
            x = torch.randn(2 + i, 3).as_subclass(Plain)
            with torch._C.DisableTorchFunctionSubclass() if off else contextlib.nullcontext():
                answers.append(fn(x))
        assert answers[1] == answers[0], (i, off)
