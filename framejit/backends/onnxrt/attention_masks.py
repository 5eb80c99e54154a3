"""Boolean attention masks (`masked_fill(~keep, -inf)`, `where(keep, scores, -inf)`) inside ORT's attention op.

`split(scores)` finds such a mask in front of the softmax of a written-out attention (attention._match);
`bias(...)` emits it as the op's additive `attention_bias`; `guard(...)` and `move_fallbacks(...)` keep
eager's values where the two forms differ (NOTE [Boolean masks as an additive bias]).

NOTE [Boolean masks as an additive bias]
GPT-style decoders mask scores with a boolean tensor, `scores.masked_fill(~tril, -inf)` (nanoGPT: a tril
buffer compared `== 0`; HF: `torch.where(mask, scores, -inf)`), which attention._match did not take: the
whole block ran as ~10 ORT kernels per layer (MatMul, Mul, Where, Softmax, MatMul and the head
transposes), 7.2 of gpt's 22 ms per call at 2 threads. ORT's attention ops take an additive mask, so the
mask is written as `attention_bias = Where(fill, -inf, 0)` ((1 | batch, 1 | heads, query, key), float32).
The two differ in one case only: a masked score that is NaN or +inf (a non-finite or overflowing q . k).
masked_fill replaces it by -inf, but NaN + -inf and +inf + -inf are NaN, which makes the fused row NaN,
and a NaN in the fused op's output is the only symptom (softmax and the product with v carry it). So the
fused output is checked: when `ReduceSum` of it is NaN (any element NaN), an ONNX `If` computes the block
as translated op by op (eager's order), and the fused result is used otherwise. The op-by-op nodes that
nothing else reads are moved into that branch (`move_fallbacks`), so the fallback costs a reduction per
call until it is taken. A row whose keys are all masked is NaN in eager and in the fused op (ORT's
softmax of a row of -inf, measured with ORT 1.32), so it takes the fallback too and matches eager's NaN.
Only a fill of exactly -inf; a finite fill value (finfo.min, -1e9) replaces scores, which adding does
not, and stays unfused.
"""
from __future__ import annotations

import math

import torch
import torch.fx

aten = torch.ops.aten

FILL, KEEP = "fill", "keep"  # the mask is True where the score becomes -inf / where it stays


def _is_minus_inf(value) -> bool:
    return isinstance(value, float) and math.isinf(value) and value < 0


def _minus_inf_constant(node) -> bool:
    """`node` is `scalar_tensor(-inf)` of float32 (how make_fx writes `where(m, s, float('-inf'))`)."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        node.target is aten.scalar_tensor.default and _is_minus_inf(node.args[0]) and \
        node.kwargs.get("dtype", torch.float32) is torch.float32


def _bool_mask(node, sizes) -> bool:
    """`node` is a bool tensor of static sizes broadcasting to `sizes` (4-D) without growing it."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype != torch.bool or val.device.type != "cpu" or val.dim() > 4:
        return False
    if not all(isinstance(s, int) for s in val.shape):
        return False
    padded = (1,) * (4 - val.dim()) + tuple(val.shape)
    return all(s in (1, full) for s, full in zip(padded, sizes))


def split(scores: torch.fx.Node, sizes):
    """(the scores before the mask, the bool mask node, FILL | KEEP) when `scores` is a -inf boolean masking
    of a tensor of `sizes`, else None (NOTE [Boolean masks as an additive bias])."""
    if scores.op != "call_function" or scores.kwargs:
        return None
    val = scores.meta.get("val")
    if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(sizes):
        return None
    if scores.target is aten.masked_fill.Scalar and len(scores.args) == 3 and _is_minus_inf(scores.args[2]):
        inner, mask, kind = scores.args[0], scores.args[1], FILL
    elif scores.target is aten.where.self and len(scores.args) == 3:
        mask, a, b = scores.args
        if _minus_inf_constant(b):
            inner, kind = a, KEEP
        elif _minus_inf_constant(a):
            inner, kind = b, FILL
        else:
            return None
    else:
        return None
    if not isinstance(inner, torch.fx.Node) or not _bool_mask(mask, sizes):
        return None
    inner_val = inner.meta.get("val")
    if not isinstance(inner_val, torch.Tensor) or tuple(inner_val.shape) != tuple(sizes):
        return None
    return inner, mask, kind


def bias(add, const, mask_value, mask_val: torch.Tensor, kind: str, query_len: int, key_len: int):
    """The float32 attention_bias (1 | batch, 1 | heads, query_len, key_len) of a boolean mask: -inf where
    it masks, 0 elsewhere; also the sizes the mask was read as."""
    import numpy as np

    sizes = (1,) * (4 - mask_val.dim()) + tuple(mask_val.shape)
    mask = add("Reshape", [mask_value, const(list(sizes))])
    minus_inf, zero = const(-np.inf, np.float32), const(0.0, np.float32)
    filled = add("Where", [mask, minus_inf, zero] if kind == FILL else [mask, zero, minus_inf])
    return add("Expand", [filled, const([sizes[0], sizes[1], query_len, key_len])]), sizes


def guard(graph, node_name: str, fused, unfused, pending: list):
    """An ONNX If giving `unfused` when `fused` holds a NaN, else `fused`; its then-branch is filled by
    `move_fallbacks` once the whole graph is translated. Returns the If's output."""
    import onnx_ir as ir

    names = iter(range(100))

    def node(op_type, inputs, **attrs):
        made = ir.Node("", op_type, inputs, attributes=[
            ir.AttrInt64(k, v) for k, v in attrs.items()], name=f"node_{node_name}__guard{next(names)}")
        graph.append(made)
        made.outputs[0].name = made.name
        return made.outputs[0]

    has_nan = node("IsNaN", [node("ReduceSum", [fused], keepdims=0)])
    keep_fused = ir.Node("", "Identity", [fused], name=f"node_{node_name}__guard_fused")
    keep_fused.outputs[0].name = f"{node_name}_kept"
    else_branch = ir.Graph([], keep_fused.outputs, nodes=[keep_fused], name=f"{node_name}_fused")
    then_branch = ir.Graph([], [unfused], nodes=[], name=f"{node_name}_unfused")
    choice = ir.Node("", "If", [has_nan], attributes=[
        ir.AttrGraph("then_branch", then_branch), ir.AttrGraph("else_branch", else_branch)],
        name=f"node_{node_name}__guard_if")
    graph.append(choice)
    pending.append(then_branch)
    out = choice.outputs[0]
    out.shape, out.type = fused.shape, fused.type
    keep_fused.outputs[0].shape, keep_fused.outputs[0].type = fused.shape, fused.type
    return out


def move_fallbacks(graph, branches: list) -> None:
    """Move into each fallback branch the main-graph nodes that only its output needs (in graph order)."""
    outputs = frozenset(graph.outputs)
    for branch in branches:
        moving: set = set()
        frontier = [branch.outputs[0].producer()]
        while frontier:
            node = frontier.pop()
            if node is None or node in moving or node.graph is not graph or any(o in outputs for o in node.outputs):
                continue
            moving.add(node)
            frontier.extend(v.producer() for v in node.inputs if v is not None)
        _settle(graph, branch, moving)


def _settle(graph, branch, moving: set) -> None:
    """Move `moving` (grown from the branch output back) while every user of each is also moved: a node
    reached before one of its users was checked is dropped again until the set is closed."""
    changed = True
    while changed:
        changed = False
        for node in list(moving):
            for out in node.outputs:
                if out is branch.outputs[0]:
                    continue
                if any(use.node not in moving for use in out.uses()):
                    moving.discard(node)
                    changed = True
                    break
    ordered = [n for n in graph if n in moving]
    graph.remove(ordered)
    for n in ordered:
        branch.append(n)
