"""Graphs with symbolic shapes, as the capture frontend hands them to backends (backends/symbolic.py).

`symbolic_graph(fn, example_inputs, static=...)` traces `fn` with torch.fx (torch-level ops, as framejit's
own graphs) and fills every placeholder's `meta["val"]` with a fake tensor from a FakeTensorMode over a
ShapeEnv, whose sizes are SymInts (made by make_fx's symbolic mode, so sizes equal at trace time share a
symbol, as duck sizing does; pass distinct sizes for independent dimensions). Dimensions listed in
`static` ({input index: [dims]}) keep plain ints. Int inputs become SymInt placeholders.

`sizes_graph(...)` builds the Dynamo-style graph `forward(s0, x)` whose first placeholder is the SymInt
of x's first dimension.
"""
from __future__ import annotations

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx


def _symbolic_vals(example_inputs: list) -> list:
    """Fake values with symbolic sizes for `example_inputs` (one ShapeEnv for all)."""
    traced = make_fx(lambda *args: [a * 1 if isinstance(a, torch.Tensor) else a for a in args],
                     tracing_mode="symbolic")(*example_inputs)
    return [n.meta["val"] for n in traced.graph.nodes if n.op == "placeholder"]


def _staticized(val, dims):
    """`val` with the sizes at `dims` made plain ints (same fake mode)."""
    if not dims:
        return val
    sizes = [int(s) if d in dims else s for d, s in enumerate(val.shape)]
    with val.fake_mode:
        return torch.empty(sizes, dtype=val.dtype, device=val.device)


def symbolic_graph(fn, example_inputs: list, static: dict | None = None) -> torch.fx.GraphModule:
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    vals = _symbolic_vals(list(example_inputs))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(vals)
    for index, (node, val) in enumerate(zip(placeholders, vals)):
        node.meta["val"] = _staticized(val, (static or {}).get(index)) if isinstance(val, torch.Tensor) else val
    return gm


def sizes_graph(body, example: torch.Tensor) -> torch.fx.GraphModule:
    """forward(s0, x) -> body(s0, x), with s0 the SymInt of x.size(0) (Dynamo's size placeholders)."""
    def forward(s0, x):
        return body(s0, x)

    gm = torch.fx.symbolic_trace(forward)
    size, x = [n for n in gm.graph.nodes if n.op == "placeholder"]
    (val,) = _symbolic_vals([example])
    size.meta["val"] = val.shape[0]
    x.meta["val"] = val
    return gm
