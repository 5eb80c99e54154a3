"""Decorated functions: `functools.wraps` wrappers and torch's decorator context managers.

A wrapper built with `functools.wraps(fn)` and `(*args, **kwargs)` has its own frame signature, not the
wrapped function's (which `inspect.signature` reports by following `__wrapped__`). Binding the frame with
the wrong one made the generated code read locals the wrapper does not have (`UnboundLocalError`).
"""
from __future__ import annotations

import functools
import inspect

import pytest
import torch

import framejit
from tests.helpers import run_differential


def add_one(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1
    return wrapper


@add_one
def scaled(x, *, k=3):
    return x * k


@add_one
@add_one
def twice_wrapped(x, y, scale=2.0):
    return (x + y) * scale


def with_signature(fn):
    """A wrapper whose `__signature__` claims a parameter list its frame does not have."""
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) - 1
    wrapper.__signature__ = inspect.signature(fn)
    return wrapper


@torch.no_grad()
def no_grad_fn(x, y=2):
    return x * y


@torch.enable_grad()
def enable_grad_fn(x):
    return (x * 2).sum()


@torch.inference_mode()
def inference_fn(x):
    return x + 1


@pytest.mark.parametrize("fn, make_args, kwargs_fn", [
    (scaled, lambda s: (torch.randn(3 + s),), None),
    (scaled, lambda s: (torch.randn(3 + s),), lambda s: {"k": 5 + s}),
    (twice_wrapped, lambda s: (torch.randn(4), torch.randn(4)), None),
    (twice_wrapped, lambda s: (torch.randn(4),), lambda s: {"y": torch.randn(4), "scale": 0.5}),
    (with_signature(lambda x, y=1: x * y), lambda s: (torch.randn(2, 2),), None),
    (no_grad_fn, lambda s: (torch.randn(3, requires_grad=True),), None),
    (no_grad_fn, lambda s: (torch.randn(3),), lambda s: {"y": torch.randn(3)}),
    (enable_grad_fn, lambda s: (torch.randn(3, requires_grad=True),), None),
    (inference_fn, lambda s: (torch.randn(3),), None),
], ids=["wraps", "wraps-kw", "wraps-twice", "wraps-twice-kw", "signature-attr", "no_grad", "no_grad-kw",
        "enable_grad", "inference_mode"])
def test_decorated_functions_bind_their_own_frame(fn, make_args, kwargs_fn):
    backend = run_differential(fn, make_args, kwargs_fn=kwargs_fn, seeds=(0, 1, 2))
    assert backend.graph_count >= 1


def test_wrapper_called_under_no_grad_keeps_grad_state():
    compiled = framejit.compile(no_grad_fn)
    x = torch.randn(3, requires_grad=True)
    out = compiled(x)
    assert not out.requires_grad and torch.is_grad_enabled()
    assert torch.equal(out, x.detach() * 2)


def test_wrong_call_of_wrapper_raises_the_wrapped_functions_error():
    compiled = framejit.compile(scaled)
    with pytest.raises(TypeError) as eager:
        scaled(torch.randn(2), torch.randn(2))
    with pytest.raises(TypeError) as actual:
        compiled(torch.randn(2), torch.randn(2))
    assert str(actual.value) == str(eager.value)
