"""`split`/`chunk`/`unbind` read piece by piece as one ONNX Split with an output per piece.

NOTE [Splits as one multi-output Split]
torchlib writes aten's split ops as SplitToSequence, and each `getitem` of the result as a SequenceAt:
a GRU cell's `gates.chunk(3, 1)` was 1 + 3 sequence kernels, each a copy with its own allocation, and the
zoo gru_cell (unrolled over 32 steps, 2 layers, two chunks per cell) had 128 SplitToSequence and 384
SequenceAt of its 1375 ORT nodes. When every user of the split is a getitem and the pieces have static
sizes (none empty), the translator emits one `Split(x, sizes, axis)` instead (and a Squeeze per piece for
`unbind`); the FX node's value becomes
the tuple of its outputs, which torch's getitem handling indexes directly. The pieces hold the same
elements either way (a split copies; it does no arithmetic).
"""
from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten

_SPLITS = frozenset({
    aten.split.Tensor, aten.split_with_sizes.default, aten.unsafe_split.Tensor,
    aten.unsafe_split_with_sizes.default, aten.unbind.int,
})


def _pieces(node: torch.fx.Node):
    """(axis, sizes) when `node` is a split whose pieces can be Split's outputs, else None."""
    if node.op != "call_function" or node.target not in _SPLITS or not node.users:
        return None
    if not all(u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int)
               for u in node.users):
        return None
    source, pieces = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(source, torch.Tensor) or not isinstance(pieces, (list, tuple)) or not pieces:
        return None
    dim_at = 1 if node.target is aten.unbind.int else 2
    dim = node.args[dim_at] if len(node.args) > dim_at else node.kwargs.get("dim", 0)
    if not isinstance(dim, int) or source.dim() == 0:
        return None
    dim %= source.dim()
    if not all(isinstance(s, int) for s in source.shape):
        return None
    sizes = [1] * len(pieces) if node.target is aten.unbind.int else [p.shape[dim] for p in pieces]
    if not all(isinstance(s, int) and s > 0 for s in sizes) or sum(sizes) != source.shape[dim]:
        return None
    return dim, sizes


def takes(node: torch.fx.Node) -> bool:
    return _pieces(node) is not None


def emit(graph, node: torch.fx.Node, values: dict) -> None:
    """Append Split for `node` (NOTE [Splits as one multi-output Split]); values[node.name] = its outputs."""
    import numpy as np
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _core

    dim, sizes = _pieces(node)
    sizes_node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(np.array(sizes, np.int64)))],
                         name=f"node_{node.name}__0")
    graph.append(sizes_node)
    split = ir.Node("", "Split", [values[node.args[0].name], sizes_node.outputs[0]], num_outputs=len(sizes),
                    attributes=[ir.AttrInt64("axis", dim)], name=f"node_{node.name}__1")
    graph.append(split)
    outputs = list(split.outputs)
    if node.target is aten.unbind.int:  # the pieces lose the split dimension
        axes = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(np.array([dim], np.int64)))],
                       name=f"node_{node.name}__2")
        graph.append(axes)
        for i, piece in enumerate(split.outputs):
            squeeze = ir.Node("", "Squeeze", [piece, axes.outputs[0]], name=f"node_{node.name}__{3 + i}")
            graph.append(squeeze)
            outputs[i] = squeeze.outputs[0]
    for i, (out, val) in enumerate(zip(outputs, node.meta["val"])):
        _core._set_shape_type(out, val, complex_to_float=True)
        out.name = f"{node.name}_{i}"
    values[node.name] = tuple(outputs)
