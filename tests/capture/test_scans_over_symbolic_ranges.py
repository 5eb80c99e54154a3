"""Issue 13 (hhuntHF4 MED-1): a chunked scan over `range(ceil(T / 64))` whose length became symbolic steps in
Python with its body as a resume function (NOTE [Scans over symbolic ranges] in python_loops.py), so the
body's own ops run in a graph; the item store `out[:, i] = v` keeps `i` symbolic (NOTE [Symbolic int indices
stored to] in sym_arith.py), so one entry of the body serves every step and length. Differential: eager vs
compiled on fresh inputs of changing lengths; matmuls run inside graphs and compile counts asserted."""
from __future__ import annotations

import collections

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

RUN = collections.Counter()


class _MatmulsRun(CountingBackend):
    """Counts graphs compiled, and the matmul nodes of the graphs each call runs."""

    def __call__(self, gm, example_inputs):
        fn = super().__call__(gm, example_inputs)
        n = sum(1 for node in gm.graph.nodes if "matmul" in str(node.target))

        def run(*args):
            RUN["matmuls"] += n
            return fn(*args)
        return run


def _scan(x, w):
    t = x.shape[1]
    x = torch.nn.functional.pad(x, (0, 0, 0, (4 - t % 4) % 4))
    n = x.shape[1] // 4
    x = x.reshape(x.shape[0], n, 4, -1)
    state = torch.zeros(x.shape[0], x.shape[-1], x.shape[-1])
    out = torch.zeros_like(x)
    for i in range(n):
        out[:, i] = x[:, i] @ state + x[:, i] @ w
        state = state * 0.9 + x[:, i].transpose(-1, -2) @ x[:, i]
    return out.reshape(x.shape[0], -1, x.shape[-1])[:, :t], state


def _outer(x, w):
    y, s = _scan(torch.sin(x), w)
    return y.cos() + 1, s.sum()


LENGTHS = [2, 3, 6, 6, 13, 3, 17, 22, 27, 30, 35, 41, 46, 50, 57, 3]  # 1 to 15 chunks


def _run(fn):
    backend = _MatmulsRun()
    compiled = framejit.compile(fn, backend=backend)
    eager = framejit.stats()["eager_frames"]
    w = torch.randn(3, 3)
    for t in LENGTHS:
        x = torch.randn(2, t, 3)
        RUN.clear()
        assert_same(compiled(x, w), fn(x, w))
        # every matmul of the scan ran in a graph (before: none from the second length on)
        assert RUN["matmuls"] == 3 * -(-t // 4), t
    assert framejit.stats()["eager_frames"] == eager
    return backend.graph_count


def test_a_chunked_scan_over_a_symbolic_range_runs_its_body_in_graphs():
    # fifteen chunk counts; stock torch.compile unrolls and compiles one entry per count, then hits its
    # recompile limit (8) and runs the frame eagerly
    assert _run(_scan) <= 8


def test_a_chunked_scan_in_a_callee_runs_its_body_in_graphs():
    assert _run(_outer) <= 10


def _store_at(x, y, i):
    out = torch.zeros(3, y.size(0), 2)
    out[:, i] = x
    return out * 2


def test_a_store_at_a_symbolic_index_does_not_specialise_it():
    for rows in (3, None):  # x of the selected view's shape, and one broadcast to it
        backend = CountingBackend()
        compiled = framejit.compile(_store_at, backend=backend)
        for n, i in [(4, 1), (5, 2), (6, 3), (7, 4), (7, 5), (8, 6), (9, 7), (10, 8), (10, -2), (3, 0)]:
            x, y = torch.randn(*[d for d in (rows, 2) if d]), torch.randn(n)
            assert_same(compiled(x, y, i), _store_at(x, y, i))
        # static, then i and the size symbolic (before: one entry per index until the recompile limit)
        assert backend.graph_count <= 3
