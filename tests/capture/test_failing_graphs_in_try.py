"""Graphs that write an input, draw torch random numbers or enter inference mode, failing at run time inside the
traced code's own handlers (NOTE [Failing graphs inside handlers] in framejit/capture/handler_reruns.py; review
revH H6).

Before, such a graph was never rerun eagerly when it raised (NOTE [Graph failures rerun eagerly]), so an index
out of range escaped the user's try/except, contextlib.suppress or suppressing `__exit__`, and a finally block or
a with-block's `__exit__` did not run. Each case runs eagerly and compiled on fresh inputs, with good and bad
indices and shapes alternating, comparing results, exceptions, the written buffer and its version counter, the
log, and torch's random state after the call.
"""
from __future__ import annotations

import contextlib
import sys

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend


class Suppressing:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.log.append(("exit", kind and kind.__name__))
        return True


class Logging(Suppressing):
    def __exit__(self, kind, value, tb):
        self.log.append(("exit", kind and kind.__name__))
        return False


def write_in_try(x, idx, buf, log):
    try:
        buf.add_(1)
        return x[idx] + 1
    except IndexError as e:
        log.append(str(e))
        return x.sum()


def dropout_in_try(x, idx, buf, log):
    try:
        return F.dropout(x, 0.5)[idx] * 2
    except IndexError:
        log.append("caught")
        return torch.rand(2)


def write_in_suppress(x, idx, buf, log):
    y = None
    with contextlib.suppress(IndexError):
        buf.add_(1)
        y = x[idx] + 1
    return y


def dropout_in_user_suppress(x, idx, buf, log):
    with Suppressing(log):
        buf.mul_(2)
        return F.dropout(x, 0.3)[idx]
    return "suppressed"


def write_in_try_finally(x, idx, buf, log):
    try:
        buf.sub_(1)
        return x[idx] * 2
    finally:
        log.append("finally")


def write_in_logging_with(x, idx, buf, log):
    with Logging(log):
        buf.add_(3)
        return x[idx]


def nested_handlers(x, idx, buf, log):
    try:
        try:
            buf.add_(1)
            return F.dropout(x, 0.5)[idx]
        except KeyError:
            return "inner"
    except IndexError:
        log.append(buf.clone())
        return "outer"


def _write_and_index(x, idx, buf):
    buf.add_(1)
    return x[idx]


def handler_in_caller(x, idx, buf, log):
    try:
        return _write_and_index(x, idx, buf) + F.dropout(x, 0.2).sum()
    except IndexError:
        return buf * 5


def break_in_the_handler(x, idx, buf, log):
    try:
        buf.add_(1)
        y = x[idx]
    except IndexError:
        y = torch.zeros(1)
        print("in the handler", file=sys.stderr)  # a graph break
        buf.add_(10)
    return y + buf


def break_in_suppress(x, idx, buf, log):
    """The resume function starts inside the with-block: its eager rerun needs the exception table's depths."""
    with contextlib.suppress(IndexError):
        print("before", file=sys.stderr)  # a graph break
        buf.add_(1)
        return x[idx] + 1
    return "suppressed"


def inference_mode_in_try(x, idx, buf, log):
    try:
        with torch.inference_mode():
            y = F.dropout(x, 0.5)[idx] * 2
        return y
    except IndexError:
        log.append(torch.is_inference_mode_enabled())
        return "caught"


CASES = [write_in_try, dropout_in_try, write_in_suppress, dropout_in_user_suppress, write_in_try_finally,
         write_in_logging_with, nested_handlers, handler_in_caller, break_in_the_handler, break_in_suppress,
         inference_mode_in_try]


def _call(fn, x, idx, buf, log):
    try:
        return ("value", fn(x, idx, buf, log))
    except Exception as e:  # the exception itself is what eager and framejit must agree on
        return ("raised", type(e), str(e))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.allclose(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(i, j) for i, j in zip(a, b))
    return type(a) is type(b) and a == b


def _compare(fn, compiled, calls: int = 4) -> None:
    for call in range(calls):
        n = 4 + call % 2  # shapes change too
        idx = torch.tensor([n + 3 if call % 2 else 1])
        x = torch.randn(n, generator=torch.Generator().manual_seed(call))
        seen = []
        for run in (fn, compiled):
            buf, log = torch.full((1,), float(call)), []
            torch.manual_seed(100 + call)
            result = _call(run, x.clone(), idx, buf, log)
            seen.append((result, buf, buf._version, log, torch.rand(3), torch.is_inference_mode_enabled()))
        assert _same(seen[0], seen[1]), (call, seen)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_failing_graph_reaches_the_handler(fn):
    framejit.reset()
    _compare(fn, framejit.compile(fn, backend="eager"))


@pytest.mark.parametrize("fn", [write_in_try, nested_handlers], ids=lambda f: f.__name__)
def test_failing_graph_reaches_the_handler_on_onnxrt(fn):
    framejit.reset()
    _compare(fn, framejit.compile(fn, backend="onnxrt"), calls=2)


def write_and_dropout_in_try(x, idx, buf, log):
    try:
        buf.add_(1)
        y = F.dropout(x, 0.5) * 2
        return y[idx] + buf
    except IndexError:
        return x.sum() + buf


@pytest.mark.parametrize("fullgraph", [False, True])
def test_a_restored_rerun_keeps_one_graph(fullgraph):
    """The rerun is made exact (inputs and generators put back): no graph break, fullgraph works."""
    framejit.reset()
    fn = write_and_dropout_in_try
    _compare(fn, framejit.compile(fn, backend="eager", fullgraph=fullgraph))
    explained = framejit.explain(fn)(torch.randn(4), torch.tensor([1]), torch.zeros(1), [])
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def written_tracked_input(x, idx, h):
    try:
        h.mul_(2)
        return (x[idx] * h).sum()
    except IndexError:
        return h * 3


def test_a_written_input_autograd_tracks_stays_in_one_graph_with_eager_gradients():
    """`h` is a non-leaf that requires grad: a failed call's write is cut off its history before the rerun (NOTE
    [Rewound histories]), so the graph keeps the write (it broke before it); gradients through `h` are eager's."""
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(written_tracked_input, backend=backend)
    w = torch.randn(1, requires_grad=True)
    for idx in (torch.tensor([1]), torch.tensor([9]), torch.tensor([2]), torch.tensor([7])):
        grads, values = [], []
        for run in (written_tracked_input, compiled):
            w.grad = None
            h = w * 1.5
            out = run(torch.arange(4.0), idx, h)
            (out.sum() + h.sum()).backward()
            values.append(out.detach())
            grads.append(w.grad.clone())
        assert torch.allclose(values[0], values[1]) and torch.allclose(grads[0], grads[1]), (idx, values, grads)
    assert backend.graph_count == 1


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
