"""Symbolic onnxrt programs restored as a warm process restores them, issue 13 (h13dyn6): the graph comes
back from the frame cache without its placeholders' fake values (frame_cache.dump_graph/load_graph), and
the restored symbolic programs must still serve every size (NOTE [Restored graphs carry no symbols],
onnxrt/compiler.py). Before, such a graph compiled an ONNX model per input size in every warm process.
"""
import torch

from framejit.backends.onnxrt import lowering, load, onnxrt, save
from framejit.capture import frame_cache
from tests.backends.symbolic_graphs import sizes_graph, symbolic_graph


def _as_warm(gm):
    return frame_cache.load_graph(frame_cache.dump_graph(gm))


def _no_lowering(monkeypatch):
    def no_lowering(*args, **kwargs):
        raise AssertionError("a restored symbolic program lowered again")
    monkeypatch.setattr(lowering, "lower", no_lowering)


def _programs(compiled):
    return sum(len(v) for v in compiled.dynamic_programs.values()), len(compiled.programs)


def _scaled_rows(x):
    return torch.relu(x).sum(1) * 3 + x[:, :1].mean()


def test_a_restored_graph_without_fake_values_serves_new_sizes(monkeypatch):
    example = torch.randn(3, 5)
    gm = symbolic_graph(_scaled_rows, [example])
    data = save(onnxrt(gm, [example]))
    assert data is not None
    _no_lowering(monkeypatch)
    restored = load(data, _as_warm(gm))
    for b, s in [(3, 5), (7, 2), (4, 11), (9, 6)]:
        x = torch.randn(b, s)
        torch.testing.assert_close(restored(x), _scaled_rows(x))
    assert _programs(restored) == (1, 0)  # before: (1, 4), a program per size


def test_a_restored_graph_with_a_symbolic_int_input(monkeypatch):
    gm = sizes_graph(lambda s0, x: x.reshape(s0, -1).cumsum(0) + s0, torch.randn(5, 3))
    example = [5, torch.randn(5, 3)]
    data = save(onnxrt(gm, example))
    assert data is not None
    _no_lowering(monkeypatch)
    restored = load(data, _as_warm(gm))
    for rows in (5, 2, 9, 4):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(restored(rows, x), x.cumsum(0) + rows)
    assert _programs(restored) == (1, 0)
