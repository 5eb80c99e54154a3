"""A custom op (torch.library, a Python kernel with an effect of its own) runs once per call, as in eager, when an
op after it in the same graph raises at run time and the call reruns eagerly: such an op ends the graph before it
(NOTE [Outside code before a failing op] in capture/failing_ops.py). Before, the rerun ran the custom op a second
time (review revS MED-2). Each program runs eagerly and compiled on fresh inputs of changing sizes, some of which
make the index fail; result, exception, the op's log and the frame's log must be eager's."""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

SEEN: list = []


@torch.library.custom_op("framejit_test_rerun::tap", mutates_args=())
def tap(x: torch.Tensor) -> torch.Tensor:
    SEEN.append(x.shape[0])
    return x.clone()


@tap.register_fake
def _(x):
    return torch.empty_like(x)


def _pick(x, k):
    return x[x[:1].long() + k]


def tapped_then_indexed(x, log):
    y = tap(x)
    a = _pick(y, 1)
    log.append(1)
    return a + _pick(y, 3)


def written_tapped_then_indexed(x, log):
    x.add_(1)
    y = tap(x * 2)
    a = y[x[:1].long() + 1]
    log.append(len(log))
    return a + y[x[:1].long() + 2]


def _compare(fn, sizes=(6, 3, 2, 5, 4)):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in sizes:
        runs = []
        for run in (fn, compiled):
            SEEN.clear()
            x, log = torch.arange(float(n)), ["start"]
            try:
                result, error = run(x, log), None
            except IndexError as e:
                result, error = None, type(e)
            runs.append((result, error, list(SEEN), log, x))
        assert runs[1][1:4] == runs[0][1:4], (n, runs[1][1:4], runs[0][1:4])
        assert_same(runs[1][0], runs[0][0])
        assert_same(runs[1][4], runs[0][4])
    return backend


def test_custom_op_before_a_failing_index_runs_once():
    _compare(tapped_then_indexed)


def test_custom_op_in_a_graph_that_writes_its_input_runs_once():
    _compare(written_tapped_then_indexed)


def tapped_only(x, log):
    y = tap(x) * 2
    log.append(1)
    return y + 1


def test_custom_op_without_a_failing_op_after_it_stays_in_one_graph():
    backend = _compare(tapped_only, sizes=(3, 3, 3))
    assert backend.graph_count == 1
