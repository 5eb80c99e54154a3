"""Saved-tensors hooks in force while a frame is traced are not called on the trace's fake tensors
(NOTE [Saved-tensors hooks while tracing] in capture/convert.py): the pack and unpack hooks run exactly as
often, on tensors of the same shapes, as eagerly, on the first (tracing) call and the later ones."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same


def _logging_hooks(log):
    def pack(t):
        log.append(("pack", tuple(t.shape), type(t).__name__))
        return t

    def unpack(t):
        log.append(("unpack", tuple(t.shape)))
        return t
    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def _sin_times(x, w):
    return (torch.sin(x) * w).sum()


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_hooks_of_the_caller_run_as_often_as_eagerly(backend):
    # before: the first call also packed the trace's fake tensors (6 packs where eager makes 3)
    compiled = framejit.compile(_sin_times, backend=backend)

    def run(fn, n):
        log, grads = [], []
        for i in range(3):
            x = torch.arange(n + i, dtype=torch.float32).requires_grad_()
            w = torch.full((n + i,), 0.5 * (i + 1), requires_grad=True)
            with _logging_hooks(log):
                loss = fn(x, w)
            loss.backward()
            grads.append((loss.detach(), x.grad, w.grad))
        return log, grads

    eager_log, eager_grads = run(_sin_times, 3)
    log, grads = run(compiled, 3)
    assert log == eager_log
    assert_same(grads, eager_grads, rtol=1e-5, atol=1e-6)


def test_hooks_pushed_inside_the_frame_run_as_often_as_eagerly():
    # before: the push is a graph break and the rest was traced under the hooks: 6 packs on the first call
    log = []

    def fn(x, k):
        with _logging_hooks(log):
            y = (x * x * k).sum()
        return y

    compiled = framejit.compile(fn, backend="eager")

    def run(f):
        log.clear()
        out = []
        for k in (1.0, 2.0, 2.0):
            x = torch.arange(4.0).requires_grad_()
            y = f(x, k)
            packed = list(log)
            y.backward()
            out.append((packed, list(log), y.detach(), x.grad))
        return out

    eager = run(fn)
    assert_same(run(compiled), eager)
