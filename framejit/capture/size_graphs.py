"""Graphs that only read sizes or select rows: run as their own Python code, not handed to the backend.

NOTE [Graphs that only read sizes]: a frame traced with a symbolic size that breaks before any tensor work
(`tag = f"{x.size(1)}"`, a `print(x.shape[0])`, `str(x.shape)`: formatting a symbolic size is a break,
NOTE [Dynamic ints formatted into strings]) still made a graph, `size = x.size(1); return (size,)`, so the
break's code could read the symbol's value from a graph output. That graph was handed to the backend and
counted as a compilation: `tag = f"{x.size(1)}"` followed by a dict lookup keyed by the size (which
specialises it in the resume function, one entry per size as stock) compiled 7 graphs over 6 widths where
stock torch.compile compiles 6 (its dynamic trace specialises in the same frame and never compiles the
size-only part). Such a graph (every node a size, numel or dim read of an input, or int arithmetic and
comparisons on those, not on inputs; no output that is an input passed through) is now its own `gm.forward`: the backend
is not called (an ORT session or a Triton module for three integer reads was pure cost), it is not counted
in `stats()["graphs"]`, and a persisted entry stores no artifact for it (frame_cache decides the same from
the graph on both sides). The values are the same: they are Python reads of the real tensors' sizes.

NOTE [Graphs that only select rows]: a frame whose only tensor work before a break is taking rows of its
inputs (`for i, (e, d) in enumerate(zip(emb, dur))` over a body that breaks on data: the loop runs as Python
from its GET_ITER, NOTE [Rows zipped and enumerated], and its unrolled items `emb[0], dur[0], emb[1], ...`
were the graph's outputs) handed the backend a graph of integer subscripts and nothing else. Stock
torch.compile runs such a frame as Python (a break in a loop skips it), so each of these graphs was one more
than stock, and one more again whenever a size changed (HF FastSpeech2's length_regulator: 5/7/12 graphs
over three calls where stock makes 4/5/9). A graph whose every node is `operator.getitem` with an int index
of an input or of such a row, or an `unbind` of one (`for row in list(x.unbind(0))`), and that passes no
input through, has nothing to compile: a row is a view of the real tensor, made the same way by the graph's
own `gm.forward`, which runs instead (as for sizes above: no backend call, not counted, no persisted
artifact). Values, aliasing and autograd are eager's. Only a graph that ends at a break: a frame whose whole
work is taking rows (`return x[0], x[1]`) keeps its graph, compiled and counted as stock torch.compile does
(the persisted entry knows which from its artifact: an empty one is the graph's own code, or the eager
backend's, which is the same).
"""
from __future__ import annotations

import math
import operator

import torch

_SIZE_METHODS = frozenset({"size", "numel", "dim"})
_SIZE_FUNCTIONS = frozenset({
    operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
    operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.truediv,
    operator.and_, operator.or_, operator.not_, abs, min, max, math.ceil, math.floor,
    torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_float,
})


def _size_ops() -> frozenset:
    ops = torch.ops.aten
    return frozenset({ops.sym_size.int, ops.sym_numel.default, ops.sym_stride.int})


def reads_sizes_only(gm: torch.fx.GraphModule) -> bool:
    """Every node of `gm` reads sizes or computes on them, and no output is one of its inputs (NOTE
    [Graphs that only read sizes]). A node's value is told by what made it, never by its target alone
    (`operator.mul` multiplies tensors too): sizes come from size reads of inputs only."""
    sizes: set = set()
    aten_size_ops = _size_ops()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue  # never a size itself: the same answer for a graph loaded without its meta (frame_cache)
        elif node.op == "output":
            if any(n.op == "placeholder" for n in _nodes_in(node.args)):
                return False
        elif node.op == "call_method" and node.target in _SIZE_METHODS or \
                node.op == "call_function" and node.target in aten_size_ops:
            continue  # reads a size of a tensor (its argument): an int, a tuple of ints
        elif node.op == "call_function" and node.target in _SIZE_FUNCTIONS:
            if not all(n in sizes or _reads_size(n, aten_size_ops) for n in _nodes_in((node.args, node.kwargs))):
                return False
        else:
            return False
        sizes.add(node)
    return True


def selects_rows_only(gm: torch.fx.GraphModule) -> bool:
    """Every node of `gm` takes a row (an int subscript) of an input or of such a row, or unbinds one into its
    rows, there is one at least, and no output is an input (NOTE [Graphs that only select rows])."""
    rows: set = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            return bool(rows) and not any(n.op == "placeholder" for n in _nodes_in(node.args))
        if not (_takes_a_row(node) or _unbinds(node)):
            return False
        base = node.args[0]
        if not isinstance(base, torch.fx.Node) or not (base.op == "placeholder" or base in rows):
            return False
        rows.add(node)
    return False


def _takes_a_row(node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem and not node.kwargs and \
        len(node.args) == 2 and type(node.args[1]) is int


def _unbinds(node) -> bool:
    """`t.unbind()`, `t.unbind(d)`, `torch.unbind(t[, d])` with a constant int dimension."""
    is_unbind = node.op == "call_method" and node.target == "unbind" or \
        node.op == "call_function" and node.target is torch.unbind
    dims = list(node.args[1:]) + list(node.kwargs.values())
    return is_unbind and set(node.kwargs) <= {"dim"} and len(dims) <= 1 and all(type(d) is int for d in dims)


def runs_as_its_own_code(gm: torch.fx.GraphModule, rows: bool = True) -> bool:
    """`gm` is not handed to the backend: it runs as `gm.forward` (NOTE [Graphs that only read sizes],
    NOTE [Graphs that only select rows]; `rows`: the graph ends at a break, not at the frame's return)."""
    return reads_sizes_only(gm) or rows and selects_rows_only(gm)


def _reads_size(node, aten_size_ops) -> bool:
    return node.op == "call_method" and node.target in _SIZE_METHODS or \
        node.op == "call_function" and node.target in aten_size_ops


def _nodes_in(value) -> list:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _nodes_in(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _nodes_in(v)]
    return []


__all__ = ["reads_sizes_only", "runs_as_its_own_code", "selects_rows_only"]
