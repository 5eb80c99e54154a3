"""prims view ops of a lowered graph as aten views, so the graph can be functionalized again (lowering.py).

NOTE [prims views before refunctionalizing]
torch._decomp's decompositions of some ops (var_mean through torch._refs, in batch norm's train-mode
decomposition) leave prims ops in the first trace: `prims.broadcast_in_dim` and `prims.squeeze` are views
(their schemas carry alias annotations). A graph traced a second time under functionalization (NOTE
[Refunctionalize] in lowering.py) then fails: functionalization refuses non-aten ops whose outputs alias
("Found a custom (non-ATen) operator whose output has alias annotations"). F.instance_norm with running
statistics in train mode takes that path (its C++ composite updates a repeated copy of the statistics in
place, a mutation of an intermediate), so every no_grad call of nn.InstanceNorm2d(track_running_stats=True)
in train mode ran eagerly. Before the second trace, these prims become the aten views they stand for:
`broadcast_in_dim(a, shape, dims)` is `a` unsqueezed at every output dim not in `dims` (which is increasing),
expanded to `shape`; `squeeze(a, dims)` is `aten.squeeze.dims`; `view_of(a)` is `aten.alias`.
"""
from __future__ import annotations

import torch
import torch.fx

aten, prims = torch.ops.aten, torch.ops.prims


def _broadcast_in_dim(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    value, shape, dims = node.args
    result = value
    for d in range(len(shape)):
        if d not in dims:
            result = graph.call_function(aten.unsqueeze.default, (result, d))
    return graph.call_function(aten.expand.default, (result, list(shape)))


def _squeeze(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    return graph.call_function(aten.squeeze.dims, (node.args[0], list(node.args[1])))


_REWRITES = {
    prims.broadcast_in_dim.default: _broadcast_in_dim,
    prims.squeeze.default: _squeeze,
    prims.view_of.default: lambda graph, node: graph.call_function(aten.alias.default, (node.args[0],)),
}


def as_aten_views(gm: torch.fx.GraphModule) -> int:
    """Replace the prims views of `gm` (NOTE [prims views before refunctionalizing]) in place; returns how many."""
    replaced = 0
    for node in list(gm.graph.nodes):
        rewrite = _REWRITES.get(node.target) if node.op == "call_function" else None
        if rewrite is None:
            continue
        with gm.graph.inserting_before(node):
            new = rewrite(gm.graph, node)
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        replaced += 1
    if replaced:
        gm.recompile()
    return replaced
