"""torch.fx GraphModules called in compiled code (NOTE [GraphModule calls] in capture/fx_modules.py): FX gives a
GraphModule's class `__call__ = call_wrapped`, which calls a `_WrappedCall` object of torch.fx; that object was
taken for a torch function, so every call of a GraphModule was a graph break and `framejit.compile(gm)` captured
no graph. Now such a call is nn.Module's call (hooks, then the generated forward), traced like any module."""

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x, scale=2.0):
        return torch.tanh(self.proj(x)) * scale - x.sum(-1, keepdim=True)


def _shifted_product(a, b):
    return a * 0.25 + b.exp()


def test_a_graph_module_compiled_whole_is_one_graph():
    torch.manual_seed(0)
    traced = torch.fx.symbolic_trace(_Block())
    backend = run_differential(traced, lambda seed: (torch.randn(2 + seed, 4),), seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count >= 1
    assert any("tanh" in str(n.target) for g in backend.graphs for n in g.graph.nodes)


def test_a_traced_function_called_inside_a_frame_stays_in_its_graph():
    traced = torch.fx.symbolic_trace(_shifted_product)

    def fn(a, b):
        return traced(a, b).relu() + traced(b, a)

    backend = run_differential(fn, lambda seed: (torch.randn(5) * (seed + 1), torch.randn(5)), seeds=(0, 1, 2))
    assert backend.graph_count == 1
    assert backend.op_count(0) >= 8  # both traced bodies, relu and the final add


def test_hooks_kwargs_and_a_recompiled_graph_module_follow_eager():
    torch.manual_seed(0)
    inner = torch.fx.symbolic_trace(_Block())
    seen = []
    inner.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape[0]))
    inner.register_forward_hook(lambda mod, args, out: out + 10)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, scale=3.0).sum(1)

    outer = Outer()
    backend = CountingBackend()
    compiled = framejit.compile(outer, backend=backend, fullgraph=True)
    run_differential(outer, lambda seed: (torch.randn(2 + seed, 4),), seeds=(0, 1), compiled=compiled)
    assert seen == [2, 2, 3, 3]  # eager and compiled calls each ran the pre-hook once
    graphs = backend.graph_count
    for node in inner.graph.nodes:  # an FX pass: tanh -> sigmoid, then recompile() installs a new forward
        if node.target is torch.tanh:
            node.target = torch.sigmoid
    inner.recompile()
    run_differential(outer, lambda seed: (torch.randn(4, 4),), seeds=(0, 1), compiled=compiled)
    assert backend.graph_count > graphs  # the new forward was traced again, not served by the old graph
    assert any(n.target is torch.sigmoid for n in backend.graphs[-1].graph.nodes)


def test_gradients_through_a_compiled_graph_module_match_eager():
    torch.manual_seed(0)
    traced = torch.fx.symbolic_trace(_Block())
    compiled = framejit.compile(traced, backend=CountingBackend(), fullgraph=True)
    for rows in (2, 3):
        x = torch.randn(rows, 4, requires_grad=True)
        compiled(x).pow(2).sum().backward()
        got = (x.grad.clone(), traced.proj.weight.grad.clone())
        x.grad = None
        traced.zero_grad()
        traced(x).pow(2).sum().backward()
        torch.testing.assert_close(got[0], x.grad)
        torch.testing.assert_close(got[1], traced.proj.weight.grad)
        x.grad = None
        traced.zero_grad()
