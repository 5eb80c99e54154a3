"""Graphs that raise at run time (NOTE [Graph failures rerun eagerly] in framejit/capture/convert.py).

Fake tensors cannot see every error: an index out of range in a tensor index, a singular matrix, out of
memory. When a graph that mutates no input and draws no random numbers raises, the hook restores the
global state the graph switched (grad mode, autocast) and reruns the original function eagerly, so the
exception comes from the user's code: a try/except around it handles it as in eager, with-blocks exit,
and the traceback names the user's line.

Each case runs eagerly and compiled on inputs that raise and inputs that do not (three calls), comparing
results, printed output, exceptions, inputs (logs) and torch's global state after the call.
"""
from __future__ import annotations

import traceback

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, global_state, run_differential


def index_args(seed):
    """An index that is in range for seeds 0 and 2 and out of range for seed 1."""
    return torch.randn(3), torch.tensor([0, 2] if seed % 2 == 0 else [1, 7]), []


def caught_index_error(x, idx, log):
    try:
        y = x * 2
        z = y[idx]
        log.append("in range")
    except IndexError as e:
        log.append(f"caught {type(e).__name__}")
        z = x.sum() * 0
    return z + 1
def caught_in_outer_frame_try(x, idx, log):
    try:
        return inner_index(x, idx) + 1
    except (IndexError, RuntimeError):
        log.append("outer caught")
        return x
def inner_index(x, idx):
    return (x * 2)[idx]
def uncaught_in_no_grad(x, idx, log):
    with torch.no_grad():
        y = x * 2
        return y[idx]
def uncaught_in_autocast(x, idx, log):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x.unsqueeze(0) @ x.unsqueeze(1)
        return y.flatten()[idx % 1], x[idx]
def caught_after_break(x, idx, log):
    try:
        y = x * 2
        print("before the index")
        z = y[idx]
    except IndexError:
        log.append("caught after a break")
        z = x
    return z
def finally_runs_once(x, idx, log):
    try:
        return (x.cos() * 2)[idx]
    finally:
        log.append("finally")
def singular_matrix(x, idx, log):
    try:
        return torch.linalg.inv(x * idx.float().sum().clamp(max=1.0))
    except RuntimeError as e:  # torch.linalg.LinAlgError
        log.append(type(e).__name__)
        return x


def uncaught_after_break(x, idx, log):
    # NOTE [Arguments handed to resume functions]: the resume function's graph fails; the rerun reads the
    # arguments back from its frame
    log.append("start")
    print("break")
    y = x * 2
    log.append("after")
    return y[idx]
def early_effect_after_break(x, idx, log):
    print("break")
    log.append("early")  # made before the graph's first op (NOTE [Effects before a failing graph])
    x.mul_(2)  # no rerun: the graph writes an input
    return x[idx] + 1


def matrix_args(seed):
    return torch.randn(3, 3) + 3 * torch.eye(3), torch.tensor([1 if seed % 2 == 0 else 0]), []


CASES = [
    (caught_index_error, index_args, 1),
    (caught_in_outer_frame_try, index_args, 1),
    (uncaught_in_no_grad, index_args, 1),
    (uncaught_in_autocast, index_args, 1),
    (caught_after_break, index_args, 2),
    (finally_runs_once, index_args, 1),
    (singular_matrix, matrix_args, 1),
    (uncaught_after_break, index_args, 1),
    (early_effect_after_break, index_args, 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_runtime_error_in_graph(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs


def test_traceback_names_the_user_line():
    compiled = framejit.compile(uncaught_in_no_grad, backend="eager")
    compiled(torch.randn(3), torch.tensor([0]), [])
    with pytest.raises(IndexError) as info:
        compiled(torch.randn(3), torch.tensor([9]), [])
    last = traceback.extract_tb(info.value.__traceback__)[-2:]
    assert any(frame.line == "return y[idx]" for frame in last)
    assert torch.is_grad_enabled()


def test_graph_with_random_ops_is_not_rerun():
    """A rerun would draw other random numbers than eager: the graph's own exception propagates (no try
    here, so it is the same exception type eager raises)."""
    def f(x, idx):
        return (x + torch.rand(3))[idx]

    compiled = framejit.compile(f, backend=CountingBackend())
    compiled(torch.randn(3), torch.tensor([1]))
    assert compiled.entries[0].rerun is None
    with pytest.raises(IndexError):
        compiled(torch.randn(3), torch.tensor([5]))


def test_graph_mutating_an_input_is_not_rerun():
    def f(x, idx):
        x.mul_(2)
        return x[idx]

    compiled = framejit.compile(f, backend=CountingBackend())
    x, ref = torch.ones(3), torch.ones(3)
    compiled(x, torch.tensor([1]))
    f(ref, torch.tensor([1]))
    assert compiled.entries[0].rerun is None
    with pytest.raises(IndexError):
        f(ref, torch.tensor([5]))
    with pytest.raises(IndexError):
        compiled(x, torch.tensor([5]))
    torch.testing.assert_close(x, ref)  # the mutation before the failing op happened once, as in eager


def test_global_state_after_uncaught_runtime_error_in_autocast():
    before = global_state()
    compiled = framejit.compile(uncaught_in_autocast, backend="eager")
    compiled(torch.randn(3), torch.tensor([0]), [])
    with pytest.raises(IndexError):
        compiled(torch.randn(3), torch.tensor([8]), [])
    assert global_state() == before
