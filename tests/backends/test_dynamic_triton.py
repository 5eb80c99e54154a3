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

BATCHES = (2, 5, 13)  # the interpreter runs one program per row: few sizes, not few kinds of size
SEQS = (4, 7)
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


def test_size_sums_are_size_generic():
    def fn(x, y):  # a size s0 + s1: not a product of symbols, a size expression of the graph
        return torch.cat([x, y]).exp()  # NOTE [Literals fitted to the graph's size expressions]

    example = [torch.randn(3, 4), torch.randn(5, 4)]
    compiled = triton(symbolic_graph(fn, example, static={0: [1], 1: [1]}), example)
    assert isinstance(compiled, DynamicGraph), getattr(compiled, "reason", None)
    for rows_x, rows_y in [(3, 5), (2, 7), (3, 5), (6, 2)]:
        args = [torch.randn(rows_x, 4), torch.randn(rows_y, 4)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert compiled.specialised.compiled == {}


def test_a_graph_without_a_size_generic_module_specialises_per_shape_with_a_log_line(recompile_logs):
    def fn(x):
        return x * (x.shape[0] > 3)  # a relation of sizes: the probes would fix it

    example = [torch.randn(3, 4)]
    compiled = triton(symbolic_graph(fn, example, static={0: [1]}), example)
    assert isinstance(compiled, SpecialisingGraph)
    for rows in (3, 5, 3):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    assert len(compiled.compiled) == 2
    assert any("no size-generic module" in r.getMessage() for r in recompile_logs.records)
    assert sum("compiling the graph for shapes" in r.getMessage() for r in recompile_logs.records) == 2


def test_persisted_size_generic_module_serves_new_sizes_without_generating(monkeypatch):
    """NOTE [Persisted size-generic modules]: the saved module is loaded and serves every size its check
    accepts; nothing is lowered, probed or generated again (a size of 1 still specialises, on first use)."""
    from framejit.backends.triton import dynamic, persist

    w, b = torch.randn(D), torch.randn(D)
    example = [torch.randn(3, 5, D), w, b]
    gm = symbolic_graph(_norm_block, example, static={0: [2], 1: [0], 2: [0]})
    compiled = triton(gm, example)
    assert isinstance(compiled, DynamicGraph)
    data = persist.save(compiled)
    assert data is not None

    def no_generation(*args, **kwargs):
        raise AssertionError("a loaded size-generic module was generated again")

    monkeypatch.setattr(dynamic, "_generate", no_generation)
    restored = persist.load(data, gm)
    assert isinstance(restored, DynamicGraph) and restored.source == compiled.source
    for batch, seq in [(2, 4), (13, 7), (5, 16)]:
        x = torch.randn(batch, seq, D)
        torch.testing.assert_close(restored(x, w, b), _norm_block(x, w, b), atol=1e-5, rtol=1e-5)
    assert restored.specialised.compiled == {}
    x = torch.randn(1, 4, D)  # rejected by the size check: compiled for its shape, still right
    torch.testing.assert_close(restored(x, w, b), _norm_block(x, w, b), atol=1e-5, rtol=1e-5)
    assert len(restored.specialised.compiled) == 1


WARM_PROGRAM = '''
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import torch.nn.functional as F
import framejit
from framejit.backends.triton import dynamic

generated = []
_generate = dynamic._generate
dynamic._generate = lambda *args, **kwargs: generated.append(1) or _generate(*args, **kwargs)


def f(x, w):
    return F.layer_norm(x, (8,), w) * 2 + x.softmax(-1)


compiled = framejit.compile(f, backend="triton", dynamic=True)
w = torch.randn(8)
ok = True
for n in (int(s) for s in sys.argv[1].split(",")):
    x = torch.randn(n, 5, 8)
    ok = ok and torch.allclose(compiled(x, w), f(x, w), atol=1e-5, rtol=1e-5)
stats = framejit.stats()
print(json.dumps({"ok": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                  "generated": len(generated)}))
'''


def test_warm_process_serves_new_sizes_from_the_persisted_module(tmp_path):
    from tests.helpers import run_cache_program

    cold = run_cache_program(tmp_path, "triton_dynamic.py", WARM_PROGRAM, "3,6")
    assert cold["ok"] and cold["traced"] == 1 and cold["generated"] == 4  # one module: four probes
    warm = run_cache_program(tmp_path, "triton_dynamic.py", WARM_PROGRAM, "4,9,2")
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] == 1 and warm["generated"] == 0


def _compiled_sizes(fn, sizes):
    import framejit
    compiled = framejit.compile(fn, backend="triton", dynamic=True)
    for n in sizes:
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), fn(x))


def test_halves_of_odd_sizes_are_floored_before_scaling():
    def fn(x):  # the second slice starts at (s0 // 2) * 4: no fraction of s0 * 4 (NOTE [Odd probes])
        h = x.shape[0] // 2
        return x[:h] - x[h:2 * h]

    _compiled_sizes(fn, (4, 5, 7, 6))  # before: wrong values for 5 and 7 (the module used s0 * 4 // 2)


@pytest.mark.parametrize("fn", [lambda x: x * (x.shape[0] > 3), lambda x: (x * 2, x.shape[0] > 3),
                                lambda x: x * (x.shape[0] % 2)], ids=["scale_by_relation", "relation", "parity"])
def test_size_relations_in_the_graph_are_not_fixed_at_the_probes(fn):
    import framejit
    compiled = framejit.compile(fn, backend="triton", dynamic=True)
    for n in (4, 3, 5):  # every probe size is > 3 and even: the module held True and 0 for every size
        x = torch.randn(n, 4)
        out, expected = compiled(x), fn(x)
        torch.testing.assert_close(out, expected)


def _heads(x):  # the zoo gpt's split_heads of the second third of a fused qkv projection
    b, t, _ = x.shape
    return x[..., 32:64].reshape(b, t, 2, 16).transpose(1, 2).contiguous() * 2


def test_transposed_heads_are_one_module_for_every_batch_and_sequence():
    """NOTE [Term order independent of sizes] (triton/ir.py): index terms ordered by their text changed order
    between probe sizes (`(xindex // 16) % 3` vs `(xindex // 48) % 2`, digits compared as text), so the
    kernels differed in structure and the graph compiled per shape (the zoo gpt: 9 modules for 9 shapes)."""
    example = [torch.randn(2, 3, 96)]
    compiled = triton(symbolic_graph(_heads, example, static={0: [2]}), example)
    assert isinstance(compiled, DynamicGraph), getattr(compiled, "reason", None)
    for batch, seq in [(2, 3), (5, 2), (3, 7)]:
        x = torch.randn(batch, seq, 96)
        torch.testing.assert_close(compiled(x), _heads(x))
    assert compiled.modules == 1 and compiled.specialised.compiled == {}
    x = torch.randn(1, 1, 96)  # size 1: compiled for its shape, still equal
    torch.testing.assert_close(compiled(x), _heads(x))
