"""Rewrites of the lowered aten graph where ONNX Runtime's operators differ from eager torch.

`match_eager(gm) -> int` rewrites the flat aten graph that lowering.py made (in place, before
partitioning) and returns how many nodes it rewrote. Every node it adds carries `meta["val"]`, computed
by running the op on the fake values of its inputs under the graph's own fake mode, so the partitioner
and the translator see a graph like any other lowered one.

NOTE [Eager semantics in ONNX]
ORT's ReduceMax/ReduceMin/ArgMax/ArgMin skip NaN (measured: `x.max()` of `[1, nan, 3]` gave 3, eager
gives nan; `argmax` gave the index of 3, eager the index of the NaN), `Sign(nan)` is NaN where eager
gives 0, a cumulative sum may start a row with -0.0 where eager's starts from +0.0, and torchlib writes
`aten.copy(dst, src)` as src itself (a broadcasting `src` came back in its own shape). Each is rewritten
into ops whose ONNX meaning is eager's:
- `amax/amin/max/min` (float):  where(any(isnan(x), dims), nan, r)
- `argmax/argmin`, and the indices of `max.dim/min.dim` (float): where(any(isnan(x)), argmax(isnan(x)), r)
  (torch returns the first NaN's index; ArgMax returns the first maximum's index)
- `sign` (float): where(isnan(x), 0, r);  `cumsum` (float): r + 0.0 (turns -0.0 into +0.0 only)
- `clamp_min`, `clamp_max`, `clamp` with one bound: where(x < lo, lo, x) / where(x > hi, hi, x) (ORT's
  Clip without an upper bound turned inf into the largest float; the comparison keeps NaN and -0.0)
- `copy(dst, src)`: clone(expand(src cast to dst's dtype, dst's shape))
- `max_pool2d/3d_with_indices` values (float): where(max_pool(isnan(x) as float) > 0, nan, r) (MaxPool
  skips NaN); the indices of a window holding NaN are left as ORT gives them
Ops whose translation is wrong on special values in ways not worth rewriting (atan2, floor_divide,
remainder and rounding division of floats), imprecise (expm1, log1p) or inexact on int64 (sum, prod,
cumprod) run in eager torch (translate.unsupported_reason).
Known and left: ORT turns a -0.0 into +0.0 in `trunc(-0.0)`, `expm1(-0.0)` and in some `Where` selections
(measured; a rewrite through `where(x == 0, x, r)` did not keep the sign either).
Reductions over empty tensors (mean or var of nothing is NaN in eager, 0 in ORT) are not rewritten:
nodes that touch an empty tensor run in eager torch (translate.unsupported_reason).
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx
import torch.utils._pytree as pytree

aten = torch.ops.aten

_NAN_VALUE_REDUCTIONS = {aten.amax.default, aten.amin.default, aten.max.default, aten.min.default}
_NAN_INDEX_REDUCTIONS = {aten.argmax.default, aten.argmin.default}
_NAN_PAIR_REDUCTIONS = {aten.max.dim, aten.min.dim}


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _is_float_tensor_node(arg: Any) -> bool:
    val = _val(arg)
    return isinstance(val, torch.Tensor) and val.is_floating_point()


class _Builder:
    """Adds call_function nodes after `anchor`, in order, each with its fake `meta["val"]`."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, fake_mode) -> None:
        self.graph, self.last, self.fake_mode = graph, anchor, fake_mode

    def __call__(self, op: Callable, *args: Any, **kwargs: Any) -> torch.fx.Node:
        with self.graph.inserting_after(self.last):
            node = self.graph.call_function(op, args, kwargs)
        self.last = node
        fake_args, fake_kwargs = pytree.tree_map(_val, (args, kwargs))
        with self.fake_mode:
            node.meta["val"] = op(*fake_args, **fake_kwargs)
        return node

    def nan_like(self, x: torch.fx.Node, value: float = float("nan")) -> torch.fx.Node:
        val = _val(x)
        return self(aten.full.default, [], value, dtype=val.dtype, device=val.device, pin_memory=False)

    def has_nan(self, x: torch.fx.Node, dims, keepdim: bool) -> torch.fx.Node:
        """any(isnan(x)) over `dims` (None or []: every dimension)."""
        isnan = self(aten.isnan.default, x)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return self(aten.any.default, isnan)
        if isinstance(dims, int):
            return self(aten.any.dim, isnan, dims, keepdim)
        return self(aten.any.dims, isnan, list(dims), keepdim)

    def first_nan_index(self, x: torch.fx.Node, dim, keepdim: bool) -> torch.fx.Node:
        isnan = self(aten.isnan.default, x)
        as_float = self(aten._to_copy.default, isnan, dtype=_val(x).dtype)
        return self(aten.argmax.default, as_float, dim, keepdim)


def _replace_uses(node: torch.fx.Node, new: torch.fx.Node, keep: set) -> None:
    for user in list(node.users):
        if user is not new and user not in keep:
            user.replace_input_with(node, new)


def _args(node: torch.fx.Node, names: tuple[str, ...], defaults: tuple) -> list:
    """The node's arguments by position or keyword, with defaults."""
    values = list(node.args) + [None] * (len(names) - len(node.args))
    for k, name in enumerate(names):
        if k >= len(node.args):
            values[k] = node.kwargs.get(name, defaults[k])
    return values


def _rewrite_value_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dims, keepdim = _args(node, ("self", "dim", "keepdim"), (None, [], False))
    has_nan = b.has_nan(x, dims, bool(keepdim))
    new = b(aten.where.self, has_nan, b.nan_like(x), node)
    _replace_uses(node, new, set())


def _rewrite_index_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dim, keepdim = _args(node, ("self", "dim", "keepdim"), (None, None, False))
    has_nan = b.has_nan(x, dim, bool(keepdim))
    new = b(aten.where.self, has_nan, b.first_nan_index(x, dim, bool(keepdim)), node)
    _replace_uses(node, new, set())


def _rewrite_pair_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dim, keepdim = _args(node, ("self", "dim", "keepdim"), (None, None, False))
    items = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    b.last = max(items.values(), key=lambda n: _position(n), default=node)
    has_nan = b.has_nan(x, dim, bool(keepdim))
    if 0 in items:
        values = b(aten.where.self, has_nan, b.nan_like(items[0]), items[0])
        _replace_uses(items[0], values, set())
    if 1 in items:
        indices = b(aten.where.self, has_nan, b.first_nan_index(x, dim, bool(keepdim)), items[1])
        _replace_uses(items[1], indices, set())


def _rewrite_sign(b: _Builder, node: torch.fx.Node) -> None:
    x = node.args[0]
    new = b(aten.where.self, b(aten.isnan.default, x), b.nan_like(x, 0.0), node)
    _replace_uses(node, new, set())


def _rewrite_cumsum(b: _Builder, node: torch.fx.Node) -> None:
    new = b(aten.add.Tensor, node, b.nan_like(node, 0.0))
    _replace_uses(node, new, set())


def _rewrite_one_sided_clamp(b: _Builder, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if node.target is aten.clamp_min.default:
        low, high = _args(node, ("self", "min"), (None, None))[1], None
    elif node.target is aten.clamp_max.default:
        low, high = None, _args(node, ("self", "max"), (None, None))[1]
    else:
        _, low, high = _args(node, ("self", "min", "max"), (None, None, None))
        if low is not None and high is not None:
            return False  # Clip with both bounds matches eager
    if isinstance(low, torch.fx.Node) or isinstance(high, torch.fx.Node):
        return False
    value = x
    if low is not None:
        bound = b.nan_like(x, float(low))
        value = b(aten.where.self, b(aten.lt.Tensor, value, bound), bound, value)
    if high is not None:
        bound = b.nan_like(x, float(high))
        value = b(aten.where.self, b(aten.gt.Tensor, value, bound), bound, value)
    _replace_uses(node, value, set())
    return True


def _rewrite_max_pool(b: _Builder, node: torch.fx.Node) -> bool:
    values = next((u for u in node.users if u.target is operator.getitem and u.args[1] == 0), None)
    if values is None:
        return False
    x = node.args[0]
    b.last = values
    mask = b(aten._to_copy.default, b(aten.isnan.default, x), dtype=_val(x).dtype)
    pooled = b(operator.getitem, b(node.target, mask, *node.args[1:], **node.kwargs), 0)
    new = b(aten.where.self, b(aten.gt.Scalar, pooled, 0), b.nan_like(x), values)
    _replace_uses(values, new, set())
    return True


def _rewrite_copy(b: _Builder, node: torch.fx.Node) -> bool:
    dst, src = node.args[0], node.args[1]
    dst_val, src_val = _val(dst), _val(src)
    if not isinstance(src_val, torch.Tensor) or (src_val.shape == dst_val.shape and src_val.dtype == dst_val.dtype):
        return False
    value = src
    if src_val.dtype != dst_val.dtype:
        value = b(aten._to_copy.default, value, dtype=dst_val.dtype)
    if src_val.shape != dst_val.shape:
        value = b(aten.expand.default, value, list(dst_val.shape))
    new = b(aten.clone.default, value)
    _replace_uses(node, new, set())
    return True


def _position(node: torch.fx.Node) -> int:
    return node.meta.setdefault("_semantics_order", 0)


def _fake_mode(gm: torch.fx.GraphModule):
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    return detect_fake_mode(vals)


def _rewrite(b: _Builder, node: torch.fx.Node) -> bool:
    target = node.target
    if target is aten.copy.default:
        return _rewrite_copy(b, node)
    if not node.args or not _is_float_tensor_node(node.args[0]):
        return False
    if target in _NAN_VALUE_REDUCTIONS:
        _rewrite_value_reduction(b, node)
    elif target in _NAN_INDEX_REDUCTIONS:
        _rewrite_index_reduction(b, node)
    elif target in _NAN_PAIR_REDUCTIONS:
        _rewrite_pair_reduction(b, node)
    elif target is aten.sign.default:
        _rewrite_sign(b, node)
    elif target is aten.cumsum.default:
        _rewrite_cumsum(b, node)
    elif target in (aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default):
        return _rewrite_max_pool(b, node)
    elif target in (aten.clamp_min.default, aten.clamp_max.default, aten.clamp.default):
        return _rewrite_one_sided_clamp(b, node)
    else:
        return False
    return True


def match_eager(gm: torch.fx.GraphModule) -> int:
    """Rewrite the nodes whose ONNX translation differs from eager (NOTE [Eager semantics in ONNX])."""
    fake_mode = _fake_mode(gm)
    if fake_mode is None:
        return 0
    for index, node in enumerate(gm.graph.nodes):
        node.meta["_semantics_order"] = index
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _rewrite(_Builder(gm.graph, node, fake_mode), node):
            rewritten += 1
    for node in gm.graph.nodes:
        node.meta.pop("_semantics_order", None)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten
