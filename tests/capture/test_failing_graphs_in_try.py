"""Graphs that cannot rerun eagerly and fail at run time inside the frame's own handlers (NOTE [Failing graphs
inside handlers] in framejit/capture/handler_reruns.py; review revH H6).

A graph that writes an input or draws torch random numbers is not rerun when it raises (NOTE [Graph failures
rerun eagerly]); before, an index out of range in such a graph escaped the user's try/except or
contextlib.suppress. Each case runs eagerly and compiled on fresh inputs, with good and bad indices
alternating, comparing results, exceptions, the written buffer, the log and torch's RNG state after the call.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend

BACKENDS = ["eager", "onnxrt"]


def write_in_try(x, idx, buf, log):
    try:
        buf.add_(1)
        return x[idx] + 1
    except IndexError:
        log.append("caught")
        return x.sum()


def dropout_in_try(x, idx, buf, log):
    try:
        return F.dropout(x, 0.5)[idx] * 2
    except IndexError:
        log.append("caught")
        return x * 0


def write_in_suppress(x, idx, buf, log):
    y = None
    with contextlib.suppress(IndexError):
        buf.add_(1)
        y = x[idx] + 1
    return y


def write_before_try(x, idx, buf, log):
    buf.mul_(2)
    try:
        y = x[idx] * 3
    except IndexError:
        y = x - 1
    return y + buf


def _index_or_sum(y, idx, log):
    try:
        return y[idx] + 1
    except IndexError:
        log.append("callee caught")
        return y.sum()


def dropout_then_callee_try(x, idx, buf, log):
    y = F.dropout(x, 0.3) + 1
    return _index_or_sum(y, idx, log) * 2


def return_in_finally(x, idx, buf, log):
    y = x
    try:
        buf.sub_(1)
        y = x[idx] * 2
    finally:
        log.append("finally")
        return y + buf  # noqa: B012  (a return in finally drops the exception: it is a handler)


CASES = [write_in_try, dropout_in_try, write_in_suppress, write_before_try, dropout_then_callee_try,
         return_in_finally]


def _call(fn, x, idx, buf, log):
    try:
        return ("value", fn(x, idx, buf, log))
    except Exception as e:  # the exception itself is what eager and framejit must agree on
        return ("raised", type(e), str(e))


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "raised":
        return a[1:] == b[1:]
    va, vb = a[1], b[1]
    if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
        return va.shape == vb.shape and torch.allclose(va, vb)
    return va == vb


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_failing_graph_reaches_the_handler(fn, backend):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    for call in range(4):
        n = 4 + call % 2  # shapes change too
        bad = call % 2 == 1
        idx = torch.tensor([n + 3 if bad else 1])
        x = torch.randn(n, generator=torch.Generator().manual_seed(call))
        results, states = [], []
        for run in (fn, compiled):
            buf, log = torch.full((1,), float(call)), []
            torch.manual_seed(100 + call)
            result = _call(run, x.clone(), idx, buf, log)
            results.append((result, buf, log))
            states.append(torch.get_rng_state())
        (e_res, e_buf, e_log), (c_res, c_buf, c_log) = results
        assert _same(e_res, c_res), (call, e_res, c_res)
        assert torch.equal(e_buf, c_buf), (call, e_buf, c_buf)
        assert e_log == c_log, (call, e_log, c_log)
        assert torch.equal(states[0], states[1]), call


def plain_try(x, idx, buf, log):
    try:
        y = x * 2
        return y[idx] + 1
    except IndexError:
        return x.sum()


def dropout_under_no_grad(x, idx, buf, log):
    with torch.no_grad():
        y = F.dropout(x, 0.5) * 2
    return y[idx] + 1


@pytest.mark.parametrize("fn", [plain_try, dropout_under_no_grad], ids=lambda f: f.__name__)
def test_graphs_that_rerun_or_have_no_handler_stay_one_graph(fn):
    """A try whose graph reruns exactly, and a dropout in torch's own no_grad block (no handler), are one graph."""
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x, idx = torch.randn(4), torch.tensor([2])
    torch.manual_seed(0)
    expected = fn(x, idx, None, [])
    torch.manual_seed(0)
    assert torch.equal(compiled(x, idx, None, []), expected)
    assert backend.graph_count == 1
