"""Symbolic shapes on the triton backend (NOTE [Size-generic modules] in triton/dynamic.py): one generated
module serves every size where no kernel body depends on a symbolic size; otherwise the graph is compiled
per concrete shape, with a `recompiles` log line. Kernels run in Triton's interpreter (TRITON_INTERPRET=1,
set in conftest.py). Graphs come from tests/backends/symbolic_graphs.py.
"""
import logging

import pytest
import torch
import torch.nn.functional as F

from framejit import logs
from framejit.backends.triton import triton
from framejit.backends.triton.dynamic import DynamicGraph, SpecialisingGraph
from tests.backends.symbolic_graphs import sizes_graph, symbolic_graph

BATCHES = (2, 3, 5, 8, 13)
SEQS = (4, 7, 16)
D = 12


@pytest.fixture
def recompile_logs(caplog):
    logs.set_logs("recompiles")
    caplog.set_level(logging.INFO, logger="framejit")
    yield caplog
    logs.set_logs("")


def _norm_block(x, w, b):
    h = F.layer_norm(x, (D,), w, b)
    return F.gelu(h) * 2 + x.softmax(-1), x.amax(-1)


def test_row_reductions_one_module_for_every_batch_and_sequence():
    w, b = torch.randn(D), torch.randn(D)
    example = [torch.randn(3, 5, D), w, b]
    gm = symbolic_graph(_norm_block, example, static={0: [2], 1: [0], 2: [0]})
    compiled = triton(gm, example)
    assert isinstance(compiled, DynamicGraph), getattr(compiled, "reason", None)
    for batch in BATCHES:
        for seq in SEQS:
            x = torch.randn(batch, seq, D)
            torch.testing.assert_close(compiled(x, w, b), _norm_block(x, w, b), atol=1e-5, rtol=1e-5)
    assert compiled.modules == 1 and compiled.specialised.compiled == {}
    assert "def call(_sizes," in compiled.source


def test_pointwise_with_shared_symbols_and_broadcasts():
    def fn(x, y, bias):
        return torch.where(x > y, x * y, y - x) + bias, (x + 1).exp()

    example = [torch.randn(6, 5), torch.randn(6, 5), torch.randn(5)]
    compiled = triton(symbolic_graph(fn, example), example)
    assert isinstance(compiled, DynamicGraph)
    for rows, cols in [(6, 5), (2, 9), (11, 3), (4, 32), (17, 2)]:
        args = [torch.randn(rows, cols), torch.randn(rows, cols), torch.randn(cols)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert compiled.modules == 1 and compiled.specialised.compiled == {}


def test_size_placeholder_feeds_views_and_factories():
    gm = sizes_graph(lambda s0, x: (x.view(s0, 2, -1) * 3).relu() + x.new_ones(s0, 1, 1) * s0, torch.randn(6, 4))
    compiled = triton(gm, [6, torch.randn(6, 4)])
    assert isinstance(compiled, DynamicGraph), getattr(compiled, "reason", None)
    for rows in (6, 3, 11, 2, 20):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(rows, x), gm(rows, x))
    assert compiled.specialised.compiled == {}


def test_size_one_is_compiled_for_its_shape_and_logged(recompile_logs):
    def fn(x):
        return (x * 2).sum(-1)

    example = [torch.randn(4, 8)]
    compiled = triton(symbolic_graph(fn, example, static={0: [1]}), example)
    for rows in (4, 1, 9, 1):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x), fn(x))
    assert len(compiled.specialised.compiled) == 1
    assert sum("compiling the graph for shapes [(1, 8)]" in r.getMessage() for r in recompile_logs.records) == 1


def test_mean_over_a_symbolic_dimension_is_size_generic():
    def fn(x):
        return x.sum(1) / x.shape[1], x.mean(-1)

    example = [torch.randn(3, 5, 4)]
    compiled = triton(symbolic_graph(fn, example), example)
    assert isinstance(compiled, DynamicGraph), getattr(compiled, "reason", None)
    for batch, seq, cols in [(3, 5, 4), (2, 7, 9), (6, 3, 2), (4, 40, 3)]:
        x = torch.randn(batch, seq, cols)
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.specialised.compiled == {}


def test_size_sums_specialise_per_shape_with_a_log_line(recompile_logs):
    def fn(x, y):
        return torch.cat([x, y]).exp()  # a size s0 + s1: not a product of symbols

    example = [torch.randn(3, 4), torch.randn(5, 4)]
    compiled = triton(symbolic_graph(fn, example, static={0: [1], 1: [1]}), example)
    assert isinstance(compiled, SpecialisingGraph)
    for rows_x, rows_y in [(3, 5), (2, 7), (3, 5)]:
        args = [torch.randn(rows_x, 4), torch.randn(rows_y, 4)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(compiled.compiled) == 2
    assert any("no size-generic module" in r.getMessage() for r in recompile_logs.records)
    assert sum("compiling the graph for shapes" in r.getMessage() for r in recompile_logs.records) == 2
