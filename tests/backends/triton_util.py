"""Helpers for the triton backend tests: the differential runner used by every test file.

`compile_and_compare(fn, make_inputs, ...)` traces `fn` with torch.fx, compiles it with the triton
backend on the inputs of seed 0, then compares compiled and eager results on seeds 0 and 1 (fresh
inputs each time) with the given tolerances. It fails if the backend fell back to eager for the
whole graph, or (unless allowed) if any op fell back to an eager extern, so a passing test proves
the generated kernels computed the values.
"""
from __future__ import annotations

import types

import torch

from framejit.backends.triton import triton as triton_backend
from framejit.backends.triton.runtime import CompiledGraph

TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}


def trace(fn, arity: int) -> torch.fx.GraphModule:
    """An FX graph of `fn`; builtins (torch.exp, F.gelu) become a one-call graph."""
    if isinstance(fn, torch.fx.GraphModule):
        return fn
    if isinstance(fn, types.FunctionType):
        return torch.fx.symbolic_trace(fn)
    graph = torch.fx.Graph()
    args = [graph.placeholder(f"x{k}") for k in range(arity)]
    graph.output(graph.call_function(fn, tuple(args)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def compile_and_compare(fn, make_inputs, *, atol=None, rtol=None, options=None, seeds=(0, 1),
                        allow_fallbacks=False) -> CompiledGraph:
    example = make_inputs(0)
    gm = trace(fn, len(example))
    compiled = triton_backend(gm, list(example), options)
    assert isinstance(compiled, CompiledGraph), f"ran eagerly: {getattr(compiled, 'reason', '?')}"
    if not allow_fallbacks:
        assert compiled.fallbacks == [], f"unexpected eager externs: {compiled.fallbacks}"
    for seed in seeds:
        inputs = make_inputs(seed)
        expected = fn(*inputs)
        actual = compiled(*inputs)
        tol = {}
        if atol is not None:
            tol = dict(atol=atol, rtol=rtol if rtol is not None else atol)
        else:
            floats = [t.dtype for t in torch.utils._pytree.tree_leaves(expected)
                      if isinstance(t, torch.Tensor) and t.is_floating_point()]
            loosest = max(floats, key=lambda d: TOLERANCES.get(d, {}).get("atol", 0), default=torch.float32)
            tol = TOLERANCES.get(loosest, TOLERANCES[torch.float32])
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
    return compiled


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def randint(low, high, *shape, dtype=torch.int64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)
