"""Inputs eager's autograd saves but a joint's backward does not read (NOTE [Inputs eager saves, checked where
the joint does not] in framejit/backends/joint_outputs.py): a write of one between the forward and the backward
raises eager's error on onnxrt and triton, as eagerly; calls without such a write train as eagerly.

Each program runs eagerly and compiled from the same weights and data (fresh modules per run), 3 calls with
changing batch sizes; losses, grads, running statistics and the exact error texts are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import TOL, grad_copy, run_observed

BACKENDS = ["onnxrt", "triton"]


def _backward(loss, observed) -> None:
    try:
        loss.backward()
        observed.append(None)
    except RuntimeError as exc:
        observed.append(str(exc))


def _conv_weight_written(compile_fn, observed):
    """eager's ConvolutionBackward saves the weight even where the input needs no gradient."""
    conv = nn.Conv2d(2, 3, 3)
    fn = compile_fn(lambda x: conv(x).tanh().sum())
    for step, batch in enumerate((2, 3, 2)):
        loss = fn(torch.randn(batch, 2, 5, 5))
        observed.append(loss.detach())
        if step == 1:
            with torch.no_grad():
                conv.weight.mul_(0.9)
        _backward(loss, observed)
        observed += [grad_copy(conv.weight.grad), grad_copy(conv.bias.grad), conv.weight._version]
        conv.zero_grad()


def _running_mean_written(compile_fn, observed):
    """eager's batch norm in train mode saves the running statistics, which the joint decomposes away."""
    lin, bn = nn.Linear(3, 4), nn.BatchNorm1d(4)
    fn = compile_fn(lambda x: bn(lin(x)).pow(2).sum())
    for step, batch in enumerate((5, 6, 5)):
        loss = fn(torch.randn(batch, 3))
        observed.append(loss.detach())
        if step == 1:
            with torch.no_grad():
                bn.running_mean.zero_()
        _backward(loss, observed)
        observed += [grad_copy(lin.weight.grad), grad_copy(bn.weight.grad), bn.running_mean.clone(),
                     bn.running_mean._version]
        lin.zero_grad()
        bn.zero_grad()


def _activation_written(compile_fn, observed):
    """An activation passed in, saved by eager's conv only (the weight needs no gradient): eager names its node."""
    conv = nn.Conv2d(2, 3, 3).requires_grad_(False)
    fn = compile_fn(lambda h: conv(h).sum())
    for step, batch in enumerate((2, 3, 2)):
        raw = torch.randn(batch, 2, 5, 5, requires_grad=True)
        h = raw * 1
        loss = fn(h)
        if step == 1:
            with torch.no_grad():
                h.add_(1)
        elif step == 2:
            h.add_(1)
        _backward(loss, observed)
        observed.append(grad_copy(raw.grad))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_conv_weight_written, _running_mean_written, _activation_written])
def test_a_write_of_an_input_eager_saves_raises_as_in_eager(backend, program):
    eager, compiled = run_observed(program, backend, backwards=1)
    assert sum(isinstance(o, str) for o in eager) >= 1  # the program does reach eager's error
    assert len(compiled) == len(eager)
    for e, c in zip(eager, compiled):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c, e, **TOL)
        else:
            assert c == e
