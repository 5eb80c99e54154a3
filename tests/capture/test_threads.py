"""Thread safety (issue 12): concurrent calls and concurrent compilation of one compiled function give
eager's results and lose no side effect (NOTE [Threads] in capture/hook.py, NOTE [Mutation log] in
capture/side_effects.py).

8 threads start together behind a barrier, so their first calls compile concurrently, and each cycles
through three input shapes (more compiles while others hit). Every thread writes only its own slot of a
shared dict, so the final state is the same in any interleaving and equals eager's; a shared list gets
appends from all threads, compared as a multiset.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

THREADS = 8
CALLS = 12
SHAPES = [(2,), (3,), (4, 2)]
BOARD: dict = {}
TOTALS: list = []


def step(x, k):
    y = torch.tanh(x) * (k + 1)
    BOARD[k] = y.sum()
    return y + 1


def log_step(x, k):
    TOTALS.append((k, x.sum()))
    return x * 2


def inputs(k: int, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * k + i)
    return torch.randn(SHAPES[(i + k) % len(SHAPES)], generator=g)


def run_threads(fn, compiled) -> dict:
    """Each thread calls `compiled` CALLS times; returns thread -> list of results (or an exception)."""
    barrier = threading.Barrier(THREADS)
    results: dict = {}

    def work(k):
        try:
            barrier.wait(timeout=60)
            results[k] = [compiled(inputs(k, i), k) for i in range(CALLS)]
        except BaseException as e:  # reported by the test
            results[k] = e

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(THREADS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 240  # one bound for all: a deadlock fails in minutes, not 8 x 240 s
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "threads did not finish in time"
    return results


@pytest.fixture
def shared_state(monkeypatch):
    monkeypatch.setattr(framejit.config, "recompile_limit", 64)  # hits, not eager fallbacks, after warm-up
    BOARD.clear()
    BOARD.update({k: None for k in range(THREADS)})
    TOTALS.clear()
    yield
    BOARD.clear()
    TOTALS.clear()


@pytest.mark.parametrize("backend", ["counting", "onnxrt"])
def test_concurrent_calls_and_compiles_match_eager(shared_state, backend):
    expected = {k: [step(inputs(k, i), k) for i in range(CALLS)] for k in range(THREADS)}
    expected_board = dict(BOARD)
    BOARD.update({k: None for k in range(THREADS)})
    counting = CountingBackend() if backend == "counting" else None
    compiled = framejit.compile(step, backend=counting or backend)
    results = run_threads(step, compiled)
    for k in range(THREADS):
        assert not isinstance(results[k], BaseException), results[k]
        assert_same(results[k], expected[k])
    assert_same(BOARD, expected_board)
    if counting is not None:
        assert 1 <= counting.graph_count <= len(compiled.entries) <= 64  # compiled, not run eagerly


def test_concurrent_appends_to_a_global_list_are_all_kept(shared_state):
    """The list's length changes on every call: calls recompile until the limit, then run eagerly,
    while other threads hit entries; no append is lost or duplicated."""
    framejit.config.recompile_limit = 8
    compiled = framejit.compile(log_step, backend="eager")
    results = run_threads(log_step, compiled)
    for k in range(THREADS):
        assert not isinstance(results[k], BaseException), results[k]
        assert_same(results[k], [inputs(k, i) * 2 for i in range(CALLS)])
    expected = sorted((k, float(inputs(k, i).sum())) for k in range(THREADS) for i in range(CALLS))
    assert sorted((k, float(s)) for k, s in TOTALS) == expected


def test_first_calls_compile_once_per_guard_set(shared_state):
    """Threads that miss together on the same inputs' guards install one entry, not one each."""
    compiled = framejit.compile(step, backend="eager")
    barrier = threading.Barrier(THREADS)
    x = torch.ones(3)

    def work():
        barrier.wait(timeout=60)
        compiled(x, 0)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert len(compiled.entries) <= 2  # BOARD[0] None at the first trace, a tensor after
