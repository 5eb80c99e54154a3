"""Activation checkpointing of functions with Python effects: eager's non-reentrant checkpoint runs the
function again during backward (up to the last tensor it saves), so its Python effects happen again there
(NOTE [Checkpointed Python effects] and NOTE [Non-reentrant recomputation runs eagerly] in
capture/higher_order.py, NOTE [Recomputation stopped inside a graph] in capture/requests.py). Each program
runs eagerly and compiled on equal state, calls with changing shapes, and compares the effects after the
forward and after the backward, the values and the gradients."""
from __future__ import annotations

import contextlib
import random

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import framejit
from tests.helpers import assert_same


def _run(make, backend, sizes=(3, 3, 5)):
    """[(effects after forward, effects after backward, loss, grad)] per call, eager then compiled."""
    results = []
    for compiled in (False, True):
        fn, log = make()
        f = framejit.compile(fn, backend=backend) if compiled else fn
        out = []
        for n in sizes:
            x = torch.linspace(-1.0, 1.0, n).requires_grad_()
            loss = f(x)
            after_forward = list(log)
            loss.backward()
            out.append((after_forward, list(log), loss.detach(), x.grad))
        results.append(out)
    return results


def _logging_block():
    log = []

    def blk(x):
        log.append(("run", x.shape[0]))
        return torch.sin(x) * torch.cos(x)

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False).sum()
    return fn, log


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_effect_of_a_checkpointed_function_happens_again_in_backward(backend):
    # before: the region was traced and recomputed as graph ops: one "run" per call where eager logs two
    eager, compiled = _run(_logging_block, backend)
    assert_same(compiled, eager, rtol=1e-5, atol=1e-6)


def _interleaved_with_context_fn():
    log = []

    def blk(x):
        log.append("a")
        y = torch.sin(x) * 2
        log.append("b")
        z = torch.cos(y)
        log.append("c")
        return z * y

    def contexts():
        return contextlib.nullcontext(), contextlib.nullcontext()

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False, context_fn=contexts).sum()
    return fn, log


def test_checkpoint_at_a_break_recomputes_as_eager():
    # before: a context_fn makes the call a break; the recomputation ran the compiled blk, whose graph was
    # stopped by checkpoint's early stop and rerun eagerly: AssertionError "target_frame.early_stop is set"
    eager, compiled = _run(_interleaved_with_context_fn, "eager")
    assert_same(compiled, eager)


def _stop_before_the_effects():
    log = []

    def blk(x):
        y = torch.sin(x)  # the only tensor saved: the recomputation stops here
        log.append("a")
        z = y * 3
        log.append("b")
        return z

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False).sum()
    return fn, log


def test_recomputation_stops_where_eager_stops():
    eager, compiled = _run(_stop_before_the_effects, "eager")
    assert eager[0][1] == ["a", "b"]  # eager's recomputation stopped before the first append
    assert_same(compiled, eager)


def _stop_between_effects_at_a_break():
    log = []

    def blk(x):
        log.append("a")
        y = torch.sin(x)
        log.append("b")
        z = torch.cos(y)  # the last tensor saved: the recomputation stops here, before "c"
        log.append("c")
        return z * 2

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False, context_fn=_two_null_contexts).sum()
    return fn, log


def _two_null_contexts():
    return contextlib.nullcontext(), contextlib.nullcontext()


def test_recomputation_at_a_break_stops_between_effects_as_eager():
    eager, compiled = _run(_stop_between_effects_at_a_break, "eager")
    assert eager[0][1] == ["a", "b", "c", "a", "b"]
    assert_same(compiled, eager)


def _python_random_scale():
    rng = random.Random(0)
    log = []

    def blk(x):
        scale = rng.random()
        log.append(round(scale, 6))
        return torch.sin(x) * x * scale

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False).sum()
    return fn, log


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_python_draw_in_a_checkpointed_function(backend):
    # eager's recomputation draws again, and its gradient uses the second draw: before, the traced region
    # reused the first draw (another gradient) and drew once
    eager, compiled = _run(_python_random_scale, backend)
    assert_same(compiled, eager, rtol=1e-5, atol=1e-6)


def test_pure_checkpointed_function_stays_in_one_graph():
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    def blk(x):
        return torch.sin(x) * torch.cos(x)

    def fn(x):
        return checkpoint(blk, x, use_reentrant=False).sum()

    f = framejit.compile(fn, backend=backend)
    for n in (3, 3):
        x = torch.linspace(-1.0, 1.0, n).requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        f(x).backward()
        fn(x_ref).backward()
        assert_same(x.grad, x_ref.grad)
    assert len(calls) == 1
