"""Writes through views whose functional inverse loses values: such graphs run eagerly (lowering.py).

NOTE [Writes through unfold]
Functionalization replays an in-place write through a view with the view's inverse. unfold's inverse is
`unfold_backward`, which builds the base from zeros and adds the windows back: an element that no window
covers becomes 0. `x.view(-1).unfold(0, 2, 2).mul_(3)` on 9 elements (four windows, x[8] in none) returned
eager's windows on onnxrt but zeroed x[8], which eager leaves as it was, on every call, static sizes or not.
(Windows that overlap cannot be written eagerly: eager raises for a write into overlapping memory.) A graph
that writes into an unfold result, or into a view of one, therefore runs eagerly: its aten graph is traced
once without functionalization (only when the captured graph calls unfold at all) and checked.
"""
from __future__ import annotations

import torch
import torch.fx

from ..aliasing import is_view

_UNFOLD = torch.ops.aten.unfold.default
REASON = "writes into an unfold view, whose functional inverse zeroes the elements no window covers " \
         "(NOTE [Writes through unfold])"


def calls_unfold(gm: torch.fx.GraphModule) -> bool:
    """Whether the captured graph may call unfold (any spelling: method, function, aten op)."""
    return any(n.op in ("call_method", "call_function") and "unfold" in str(getattr(n.target, "__name__", n.target))
               for n in gm.graph.nodes)


def writes_through_unfold(aten_gm: torch.fx.GraphModule) -> bool:
    """Whether the (not functionalized) aten graph writes in place into an unfold result or a view of one."""
    views: set[torch.fx.Node] = set()
    for node in aten_gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is _UNFOLD or (is_view(node) and node.args[0] in views):
            views.add(node)
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.is_mutable:
            continue
        for arg, value in zip(schema.arguments, node.args):
            if arg.alias_info is not None and arg.alias_info.is_write and value in views:
                return True
    return False
