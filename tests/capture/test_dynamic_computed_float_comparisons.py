"""Comparisons of floats computed from dynamic floats (issue 13): `lr < best * 0.9`, `T_cur >= T_i` after
`T_cur = T_cur + 1.0` were a graph break on every call (NOTE [Comparisons of computed dynamic floats]); now the
outcome is a guard line that replays the code's arithmetic on the call's floats (NOTE [Comparisons of computed
floats guarded by replay] in float_parts.py): one entry per outcome, no break. A frame whose outcomes keep
changing goes back to breaking before the recompile limit (NOTE [Outcomes of float comparisons that keep
changing]).
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

S = torch.optim.lr_scheduler


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


class RunCounting(CountingBackend):
    """Counts the runs of the compiled graphs too: a call that breaks once runs two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def __call__(self, gm, example_inputs):
        forward = super().__call__(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return forward(*args)
        return run


def _differential(fn, arg_lists):
    """Eager vs compiled on each argument list; returns (backend, graph runs per call)."""
    backend, before = RunCounting(), eager_frames()
    compiled = framejit.compile(fn, backend=backend)
    runs = []
    for args in arg_lists:
        expected = fn(*args)
        start = backend.runs
        got = compiled(*args)
        runs.append(backend.runs - start)
        assert repr(got) == repr(expected), (args, got, expected)
    assert eager_frames() == before
    return backend, runs


def _scaled(x, lr, best):
    x = x + 1
    if lr < best * 0.9:
        return x * 2
    return x * 3


def test_a_comparison_of_a_computed_float_is_guarded_not_a_break():
    pairs = [(1.0, 2.0), (1.5, 2.5), (3.0, 2.0), (0.5, 1.0), (4.0, 3.0), (0.1, 0.3), (5.0, 1.0), (0.2, 7.0)]
    backend, runs = _differential(_scaled, [(torch.ones(2), lr, best) for lr, best in pairs])
    assert runs == [1] * len(pairs)  # parent: [1, 2, 2, ...] (a break at the comparison on every dynamic call)
    assert backend.graph_count == 3  # static, then one entry per outcome


def _product(x, a, b):
    x = x + 1
    return x * (2.0 if a * 0.1 < b else -1.0), a / b <= 10.0


def test_the_outcome_at_the_rounding_boundary_is_eager_s():
    # 3.0 * 0.1 == 0.30000000000000004: a relation rewritten by the ShapeEnv could round otherwise
    pairs = [(3.0, 0.5), (2.0, 0.1), (3.0, 0.30000000000000004), (3.0, 0.3), (3.0, 0.3000000000000001),
             (1.0, 0.1), (1.0, 0.09999999999999999), (3.0, 0.30000000000000004)]
    backend, runs = _differential(_product, [(torch.ones(2), a, b) for a, b in pairs])
    assert runs == [1] * len(pairs)
    assert backend.graph_count <= 5


def _mixed(x, a, n):
    x = x + 1
    return x * (2.0 if a * n < 3.0 else 0.5)


def test_a_float_computed_with_a_symbolic_int():
    pairs = [(0.5, 2), (0.7, 3), (0.9, 4), (1.1, 5), (0.3, 6), (1.5, 7), (0.2, 8), (2.0, 9)]
    backend, runs = _differential(_mixed, [(torch.ones(2), a, n) for a, n in pairs])
    assert runs == [1] * len(pairs)
    assert backend.graph_count == 3


def _ratio(x, a, b):
    x = x + 1
    if a / b > 0.5:
        return x * 2
    return x


def test_a_replay_that_raises_misses_and_the_call_raises_as_eager():
    backend, before = RunCounting(), eager_frames()
    compiled = framejit.compile(_ratio, backend=backend)
    for a, b in [(1.0, 3.0), (2.0, 3.0), (1.0, 5.0), (1.0, 0.0), (4.0, 2.0), (1.0, 0.0), (0.1, 4.0)]:
        try:
            expected = _ratio(torch.ones(2), a, b)
        except ZeroDivisionError as e:
            with pytest.raises(ZeroDivisionError, match=str(e)):
                compiled(torch.ones(2), a, b)
            continue
        torch.testing.assert_close(compiled(torch.ones(2), a, b), expected, rtol=0, atol=0)
    assert eager_frames() == before


def _nan_compare(x, a, b):
    x = x + 1
    return x * (1.0 if a < b * 2.0 else 3.0)


def test_nan_compares_as_eager():
    triples = [(1.0, 2.0), (2.0, 3.0), (5.0, 1.0), (1.0, math.nan), (math.nan, 1.0), (1.0, 4.0), (9.0, 1.0)]
    _differential(_nan_compare, [(torch.ones(2), a, b) for a, b in triples])


def _make(kind):
    torch.manual_seed(0)
    opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.5)
    if kind == "cawr":
        return S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=1, eta_min=0.01)
    return S.ReduceLROnPlateau(opt, patience=1, factor=0.5, cooldown=1)


def _sched_step(x, sched, metric):
    y = x * 2
    if metric is None:
        sched.step()
    else:
        sched.step(metric)
    return y * sched.optimizer.param_groups[0]["lr"]


LOSSES = [1.0, 0.8, 0.9, 0.85, 0.7, 0.75, 0.76, 0.77, 0.6, 0.61, 0.62, 0.63, 0.5, 0.55]


def _run_scheduler(kind):
    eager, sched = _make(kind), _make(kind)
    backend, before = RunCounting(), eager_frames()
    step = framejit.compile(_sched_step, backend=backend)
    runs = []
    for i, loss in enumerate(LOSSES):
        metric = loss if kind == "plateau" else None
        expected = _sched_step(torch.ones(2), eager, metric)
        start = backend.runs
        torch.testing.assert_close(step(torch.ones(2), sched, metric), expected, rtol=0, atol=0)
        runs.append(backend.runs - start)
        assert sched.optimizer.param_groups[0]["lr"] == eager.optimizer.param_groups[0]["lr"]
    assert eager_frames() == before, "hit the recompile limit"
    return backend, runs


class _Restarts:
    def __init__(self) -> None:
        self.T_cur, self.T_i = 0.0, 3


def _restart_step(x, state):
    x = x + 1
    state.T_cur = state.T_cur + 1.0  # a float counter: CosineAnnealingWarmRestarts.step(epoch) with float epochs
    if state.T_cur >= state.T_i:
        state.T_cur = state.T_cur - state.T_i
    return x * math.cos(math.pi * state.T_cur / state.T_i)


def test_a_float_counter_with_restarts_compiles_once_per_outcome_without_breaks():
    eager, state = _Restarts(), _Restarts()
    backend, before = RunCounting(), eager_frames()
    step = framejit.compile(_restart_step, backend=backend)
    runs = []
    for _ in range(10):
        expected = _restart_step(torch.ones(2), eager)
        start = backend.runs
        torch.testing.assert_close(step(torch.ones(2), state), expected, rtol=0, atol=0)
        runs.append(backend.runs - start)
        assert repr(state.T_cur) == repr(eager.T_cur)
    assert eager_frames() == before
    assert runs == [1] * 10  # parent: [1, 2, 2, ...]
    assert backend.graph_count == 3


def test_cosine_annealing_warm_restarts_in_a_compiled_step():
    backend, runs = _run_scheduler("cawr")
    assert runs == [1] * len(LOSSES)
    assert backend.graph_count <= 3


def test_reduce_on_plateau_with_outcomes_that_keep_changing_stays_compiled():
    backend, runs = _run_scheduler("plateau")  # without going back to breaks: the recompile limit at step 9
    assert runs[:4] == [1] * 4  # guarded outcomes first (parent: [1, 1, 2, 2])
    assert backend.graph_count <= 12  # parent 14


def test_fullgraph_keeps_the_outcome_guarded_too():
    backend = RunCounting()
    compiled = framejit.compile(_scaled, backend=backend, fullgraph=True)
    pairs = [(1.0, 2.0), (1.5, 2.5), (3.0, 2.0), (0.5, 1.0), (4.0, 3.0), (0.1, 0.3), (5.0, 1.0)]
    for lr, best in pairs:
        torch.testing.assert_close(compiled(torch.ones(2), lr, best), _scaled(torch.ones(2), lr, best))
    assert backend.graph_count == 3  # parent: one per value pair (specialised)
