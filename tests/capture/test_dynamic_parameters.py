"""compile(dynamic=True) makes input dimensions symbolic but keeps parameters' sizes static, as torch does:
a weight's size never changes between calls, and symbolic weight sizes turn a model's fixed head and hidden
sizes into symbols (`C // n_head` then needs run-time size arithmetic, and the onnxrt backend cut a GPT into
5 ORT parts around it)."""
import torch
from torch import nn

import framejit
from tests.helpers import CountingBackend


def _placeholder_vals(gm):
    return {n.meta["source"]: n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"}


def test_dynamic_true_keeps_parameter_sizes_static():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.GELU(), nn.Linear(10, 3)).eval()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    for batch in (4, 2, 9, 3, 17):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graph_count == 1
    vals = _placeholder_vals(backend.graphs[0])
    weights = {s: v for s, v in vals.items() if s.endswith((".weight", ".bias"))}
    inputs = [v for s, v in vals.items() if s not in weights]
    assert len(weights) == 4 and all(isinstance(d, int) for v in weights.values() for d in v.shape)
    assert len(inputs) == 1 and all(isinstance(d, torch.SymInt) for d in inputs[0].shape)


def test_replaced_parameter_of_another_size_recompiles():
    torch.manual_seed(0)
    model = nn.Linear(5, 4).eval()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled(x), model(x))
    model.weight = nn.Parameter(torch.randn(7, 5))
    model.bias = nn.Parameter(torch.randn(7))
    for batch in (3, 6):
        x = torch.randn(batch, 5)
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graph_count == 2
