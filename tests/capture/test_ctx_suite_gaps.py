"""Context-manager and graph-break cases found missing by PyTorch's test_ctx_manager.py (issue 11).

Each case runs eagerly and compiled (tests/helpers.run_differential: values, printed output, exceptions,
inputs and torch's global state after the call, on fresh inputs for each seed) and asserts the graph
counts that say how much was captured.

- a break inside a nested function guarded by its code (defined inside the caller) whose code has no
  free variables: the call at the break goes through its frame hook, so the callee's rest is captured;
- breaks in a frame that pytest's assertion rewriting gave `@py_assert` locals (this module is
  rewritten by pytest): resume functions rename them (NOTE [Locals that are not identifiers]).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def pause(x):
    print("pause", torch.is_grad_enabled())
    return x


def test_break_inside_nested_function_without_cells_is_captured():
    def inner(z):
        with torch.no_grad():
            z = pause(z * 2)
            return torch.sin(z)

    def outer(x, y, z):
        a = torch.mm(x, y)
        z = inner(z)
        return a, z

    framejit.disable(pause)
    backend = run_differential(outer, lambda seed: (torch.randn(3, 3, requires_grad=True),
                                                   torch.randn(3, 3 + seed, requires_grad=True), torch.randn(4 + seed)),
                               fullgraph=False)
    # per call shape: outer's graph (mm), inner's graph before the pause (mul), inner's resume (sin)
    ops = sorted(op for gm in backend.graphs for op in
                 [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function" and not
                  n.target.__name__.startswith("_set_grad")])
    assert ops.count("mm") == 2 and ops.count("sin") == 2 and ops.count("mul") == 2


def test_breaks_after_rewritten_asserts_are_taken():
    def fn(x):
        before = torch.is_grad_enabled()
        assert x.dim() == 2, "two dimensions"
        with torch.set_grad_enabled(False):
            x = pause(x + 1)
            with torch.set_grad_enabled(True):
                x = torch.mul(x, 5)
                x = pause(x)
                x = torch.sqrt(x.abs())
                assert torch.is_grad_enabled()
            assert not torch.is_grad_enabled()
        assert torch.is_grad_enabled() == before
        return x

    # the module is rewritten by pytest: fn has `@py_assert` locals, live at the second break
    assert any(not name.isidentifier() for name in fn.__code__.co_varnames)
    framejit.disable(pause)
    backend = run_differential(fn, lambda seed: (torch.randn(3, 4 + seed),), fullgraph=False)
    assert backend.graph_count == 6  # per call: add, mul, sqrt
