"""Attention written out in aten (bmm, scale, mask, softmax, bmm) as one ORT MultiHeadAttention node.

`find(gm) -> dict[str, Match]`: the attention blocks of a partition, keyed by the name of the FX node
whose value the fused node stands for. translate.py emits `emit(graph, match, values)` for that node;
the aten nodes the match replaces are still translated and then removed as unused.

NOTE [Attention as one ORT op]
Model code writes attention as `softmax(q @ k.transpose(-2, -1) * scale + mask) @ v` between head
reshapes and permutes; make_fx lowers it to expand/clone/_unsafe_view around two bmm's. Translated op
by op, that is 4 Transposes per layer (q, k, v into heads, the context back), and ORT's Transpose split
over 2 threads was slower than on one: the zoo vit's k transpose took 190 us per call at 2 threads
against 36 us at 1 (ORT's profile, 1.32), 13% of vit's ORT time. ORT's python fusions
(onnxruntime.transformers) match none of it: they expect 4-D MatMuls, not the 3-D bmm's between
reshapes. ORT's contrib MultiHeadAttention takes q, k and v as (batch, sequence, heads * head_size)
and does the head split, both products, the scale, an additive bias and the softmax in one kernel:
bert's attention block (QKV Gemms + attention, 8x128x256, 4 heads) 2.96 -> 2.66 ms per call at 2
threads (SCHED_FIFO, interleaved). The match is decided on values, not on op spelling: each chain of
data-movement ops between a tensor and a bmm operand is run on an index tensor (`arange` of the base's
size) and must give exactly the head layout of a (batch, sequence, heads * head_size) slice of that
base (`_bsd_slice`). Only float32, static sizes, a softmax over the last dimension without dtype change,
scalar scales (folded into the op's `scale`: (q * s) @ k and (q @ k) * s round differently, within
float32 tolerance) and an additive float32 mask broadcastable to (batch, heads, query, key), expanded
to the op's `attention_bias`. The scores, the probabilities and the context must have no other user
(a training forward that saves the softmax keeps the aten ops).

NOTE [Projections inside the attention op]
When q, k and v are matrix products of one input (`addmm(b, x2d, W)` or `mm`: the Linear layers of
self-attention, three of them (BERT) or one of three times the width (ViT)), the match becomes ORT's
contrib Attention op instead: Attention(x, [Wq | Wk | Wv], [bq | bk | bv]) does the projection, the head
split and the attention in one kernel, which drops the Split (or the three Gemms' separate passes over x)
and the head transposes of q, k and v. With frozen weights (NOTE [Frozen weights] in runtime.py) the
weight concatenation is folded by ORT and the weights prepacked. Measured (ORT 1.32, SCHED_FIFO, one
process, sessions interleaved, medians of 300 runs, load 8): ViT's block (8x65x192, 3 heads) Gemm + Split
+ MultiHeadAttention 736 -> 522 us at 2 threads, 1278 -> 1102 at 1; BERT's (8x128x256, 4 heads, additive
mask) three Gemms + MultiHeadAttention 2611 -> 2232 us at 2 threads, 4905 -> 4549 at 1. Values are the
same computation in another order (2.7e-7 apart on those blocks). Only when every product's value feeds
nothing but this attention (else the products would be computed twice), the three read the same rows of
one input, and addmm adds a 1-D bias with beta = alpha = 1.

NOTE [Fully masked rows of SDPA]
A query row whose additive mask is -inf for every key: softmax of it is NaN, which written-out attention
returns in eager and MultiHeadAttention returns too; but torch's CPU flash kernel behind
`scaled_dot_product_attention` returns 0 for such a row (measured, torch 2.13). For SDPA with a mask,
the fused output is therefore set to 0 where the mask's row maximum is -inf (ReduceMax, IsInf, Where).
An SDPA node that is not fused (q, k and v not in a (batch, sequence, heads * head_size) layout, symbolic
sizes, a mask read elsewhere) is translated by torchlib, whose Softmax gives NaN there too (every unfused
SDPA with a fully masked row, static or symbolic sizes: 48 NaN of 80 for a (2, 2, 5, 8) attention with
row 0 masked): `zero_unfused_masked_rows` puts the same Where after torchlib's output.
"""
from __future__ import annotations

import dataclasses
import math
import operator

import torch
import torch.fx

from . import attention_masks

aten = torch.ops.aten

_MOVES = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default,
    aten.expand.default, aten.permute.default, aten.transpose.int, aten.t.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.select.int, aten.slice.Tensor,
    aten.alias.default,
})
_SCALES = frozenset({aten.mul.Tensor, aten.div.Tensor})
_PIECES = frozenset({aten.unbind.int, aten.split.Tensor})  # read through operator.getitem


@dataclasses.dataclass
class Operand:
    base: torch.fx.Node  # a (batch, sequence, width) reading of it holds the operand at `offset`
    width: int
    offset: int


@dataclasses.dataclass
class Match:
    q: Operand
    k: Operand
    v: Operand
    mask: torch.fx.Node | None
    scale: float
    batch: int
    heads: int
    query_len: int
    key_len: int
    head_size: int
    out: torch.fx.Node  # the node whose value the fused op gives (a reading of (batch, query, heads * head_size))
    zero_masked_rows: bool = False  # SDPA: a query row whose mask is all -inf gives 0, not NaN
    projection: Projection | None = None  # NOTE [Projections inside the attention op]
    mask_kind: str | None = None  # a bool mask, attention_masks.FILL or KEEP (NOTE [Boolean masks as an additive bias])


@dataclasses.dataclass
class Projection:
    """q, k and v as products of one input (NOTE [Projections inside the attention op])."""
    rows: torch.fx.Node  # the (batch * sequence, features) input of the products
    products: tuple  # the addmm / mm node of q, k and v (their Operand bases)


def _val(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or val.device.type != "cpu":
        return None
    return val if all(isinstance(s, int) for s in val.shape) else None


def _step(node: torch.fx.Node):
    """(input node, function of the input's value) if `node` only moves its input's data, else None."""
    if node.op != "call_function":
        return None
    if node.target in _MOVES and isinstance(node.args[0], torch.fx.Node):
        rest, kwargs = node.args[1:], node.kwargs
        return node.args[0], lambda x: node.target(x, *rest, **kwargs)
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and \
            node.args[0].target in _PIECES:
        pieces, index = node.args[0], node.args[1]
        op, rest, kwargs = pieces.target, pieces.args[1:], pieces.kwargs
        return pieces.args[0], lambda x: op(x, *rest, **kwargs)[index]
    return None


def _scalar(node: torch.fx.Node) -> float | None:
    """The factor of `x * c` or `x / c` with a Python number c, else None."""
    if node.op != "call_function" or node.target not in _SCALES or len(node.args) != 2 or node.kwargs:
        return None
    c = node.args[1]
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not isinstance(node.args[0], torch.fx.Node):
        return None
    if node.target is aten.div.Tensor:
        return None if c == 0 else 1.0 / c
    return float(c)


def _walk(node: torch.fx.Node):
    """Back from `node` through data movement and scalar scales: (base, moves from base, scale)."""
    moves, scale = [], 1.0
    while True:
        step = _step(node)
        if step is not None:
            node, fn = step
            moves.append(fn)
            continue
        factor = _scalar(node)
        if factor is None:
            return node, moves[::-1], scale
        scale *= factor
        node = node.args[0]


def _index_map(base: torch.fx.Node, moves) -> torch.Tensor | None:
    val = _val(base)
    if val is None:
        return None
    index = torch.arange(val.numel(), dtype=torch.int64).reshape(val.shape)
    try:
        for fn in moves:
            index = fn(index)
    except Exception:  # a move that does not apply to the index tensor: no match
        return None
    return index


def _bsd_slice(index: torch.Tensor, base: torch.fx.Node) -> Operand | None:
    """`index` (batch, sequence, d) of positions in `base`: the Operand if it is a contiguous slice of
    a (batch, sequence, width) reading of `base`."""
    batch, seq, d = index.shape
    numel = _val(base).numel()
    if numel % (batch * seq):
        return None
    width, offset = numel // (batch * seq), int(index[0, 0, 0])
    if offset + d > width:
        return None
    expected = torch.arange(batch * seq).reshape(batch, seq, 1) * width + offset + torch.arange(d)
    return Operand(base, width, offset) if torch.equal(index, expected) else None


def _operand(node, batch: int, heads: int, seq: int, head_size: int, transposed: bool):
    """A bmm operand (batch * heads, seq, head_size), or an SDPA one (batch, heads, seq, head_size); with
    `transposed`, seq and head_size swapped. As (Operand, scale), or None."""
    base, moves, scale = _walk(node)
    index = _index_map(base, moves)
    if index is None:
        return None
    inner = (head_size, seq) if transposed else (seq, head_size)
    if tuple(index.shape) not in ((batch * heads, *inner), (batch, heads, *inner)):
        return None
    index = index.reshape(batch, heads, *inner)
    index = index.permute(0, 3, 1, 2) if transposed else index.permute(0, 2, 1, 3)
    operand = _bsd_slice(index.reshape(batch, seq, heads * head_size), base)
    return None if operand is None else (operand, scale)


def _single_use(*nodes) -> bool:
    return all(len(n.users) == 1 for n in nodes)


def _is_identity(index: torch.Tensor | None, shape) -> bool:
    return index is not None and tuple(index.shape) == tuple(shape) and torch.equal(
        index.flatten(), torch.arange(index.numel()))


def _match(bmm_out: torch.fx.Node) -> Match | None:
    """The attention block whose second bmm is `bmm_out`, or None."""
    probs3, values3 = bmm_out.args
    out_val = _val(bmm_out)
    if out_val is None or out_val.dim() != 3:
        return None
    softmax, moves, scale = _walk(probs3)
    if softmax.op != "call_function" or softmax.target is not aten._softmax.default or scale != 1.0:
        return None
    p_val = _val(softmax)
    if p_val is None or p_val.dim() != 4 or softmax.args[2] or softmax.args[1] not in (-1, 3):
        return None
    batch, heads, query_len, key_len = p_val.shape
    head_size = out_val.shape[2]
    if not _is_identity(_index_map(softmax, moves), (batch * heads, query_len, key_len)):
        return None
    scores, mask, mask_kind = softmax.args[0], None, None
    boolean = attention_masks.split(scores, p_val.shape)  # NOTE [Boolean masks as an additive bias]
    if boolean is not None:
        if _walk(boolean[0])[0].target is not aten.bmm.default:
            return None
        scores, mask, mask_kind = boolean
    elif scores.op == "call_function" and scores.target is aten.add.Tensor and len(scores.args) == 2 \
            and not scores.kwargs and all(isinstance(a, torch.fx.Node) for a in scores.args):
        for this, other in (scores.args, scores.args[::-1]):
            if _walk(this)[0].target is aten.bmm.default:
                if _val(scores) is None or tuple(_val(scores).shape) != tuple(p_val.shape) or \
                        not _is_mask(other, batch, heads, query_len, key_len):
                    return None
                scores, mask = this, other
                break
        else:
            return None
    bmm, moves, score_scale = _walk(scores)
    if bmm.op != "call_function" or bmm.target is not aten.bmm.default:
        return None
    if not _is_identity(_index_map(bmm, moves), p_val.shape):
        return None
    if not _single_use(bmm, softmax, bmm_out) or (mask is not None and not _single_use(scores)):
        return None
    match = _fused(bmm_out, bmm.args[0], bmm.args[1], values3, True, mask, score_scale,
                   (batch, heads, query_len, key_len, head_size))
    if match is not None:
        match.mask_kind = mask_kind
    return match


def _is_mask(node, batch: int, heads: int, query_len: int, key_len: int) -> bool:
    """`node` is a float32 tensor that broadcasts to (batch, heads, query_len, key_len) without growing it."""
    val = _val(node)
    if val is None or val.dim() > 4:
        return False
    sizes = (1,) * (4 - val.dim()) + tuple(val.shape)
    return all(s in (1, full) for s, full in zip(sizes, (batch, heads, query_len, key_len)))


def _fused(out_start, q, k, v, k_transposed: bool, mask, scale: float, sizes) -> Match | None:
    """The Match once the core is found: q, k, v as head layouts of (batch, seq, heads * head_size)
    slices, and the moves after `out_start` that give the context in that layout."""
    batch, heads, query_len, key_len, head_size = sizes
    q = _operand(q, batch, heads, query_len, head_size, transposed=False)
    k = _operand(k, batch, heads, key_len, head_size, transposed=k_transposed)
    v = _operand(v, batch, heads, key_len, head_size, transposed=False)
    if q is None or k is None or v is None or v[1] != 1.0:
        return None
    out = _output(out_start, batch, heads, query_len, head_size)
    total = scale * q[1] * k[1]
    if out is None or total == 0 or not math.isfinite(total):  # ORT reads scale=0 as "not given": the default
        return None  # 1/sqrt(head_size) (review revF F1: scores * 0.0 gave another attention than eager's)
    return Match(q[0], k[0], v[0], mask, total, batch, heads, query_len, key_len, head_size, out)


_SDPA = aten._scaled_dot_product_flash_attention_for_cpu.default


def _match_sdpa(node: torch.fx.Node) -> Match | None:
    """`scaled_dot_product_attention` as make_fx lowers it on CPU (the flash kernel), without dropout,
    causal masking or a boolean mask; only its output (not the logsumexp) read."""
    bound = _SDPA._schema
    args = {a.name: (node.args[i] if i < len(node.args) else node.kwargs.get(a.name, a.default_value))
            for i, a in enumerate(bound.arguments)}
    if args["dropout_p"] or args["is_causal"] or not all(
            u.target is operator.getitem and u.args[1] == 0 for u in node.users) or len(node.users) != 1:
        return None
    q_val, k_val = _val(args["query"]), _val(args["key"])
    if q_val is None or k_val is None or q_val.dim() != 4:
        return None
    batch, heads, query_len, head_size = q_val.shape
    key_len = k_val.shape[2]
    mask = args["attn_mask"]
    if mask is not None and not _is_mask(mask, batch, heads, query_len, key_len):
        return None
    scale = args["scale"] if args["scale"] is not None else head_size ** -0.5
    match = _fused(next(iter(node.users)), args["query"], args["key"], args["value"], False, mask, scale,
                   (batch, heads, query_len, key_len, head_size))
    if match is not None:
        match.zero_masked_rows = mask is not None
    return match


def _output(bmm_out: torch.fx.Node, batch: int, heads: int, query_len: int, head_size: int):
    """The last single-use move after `bmm_out` whose value is the context as (batch, query, heads *
    head_size) in row-major order (in any shape), or None."""
    expected = torch.arange(batch * heads * query_len * head_size).reshape(
        batch, heads, query_len, head_size).permute(0, 2, 1, 3).flatten()
    node, moves, found = bmm_out, [], None
    while len(node.users) == 1:
        user = next(iter(node.users))
        step = _step(user)
        if step is None or step[0] is not node or _val(user) is None:
            break
        moves.append(step[1])
        node = user
        index = _index_map(bmm_out, moves)
        if index is None:
            break
        if torch.equal(index.flatten(), expected):
            found = node
    return found


def find(gm: torch.fx.GraphModule) -> dict[str, Match]:
    """The attention blocks of `gm` (NOTE [Attention as one ORT op]), by the name of their `out` node."""
    matches = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        match = _match(node) if node.target is aten.bmm.default else _match_sdpa(node) if node.target is _SDPA \
            else None
        if match is not None:
            scores_bmm = _first_bmm(node)
            match.projection = _projection(match, {node} if scores_bmm is None else {node, scores_bmm})
            matches[match.out.name] = match
    return matches


def _first_bmm(bmm_out: torch.fx.Node) -> torch.fx.Node | None:
    """The scores' bmm of the written-out attention whose second bmm is `bmm_out` (None for SDPA)."""
    if bmm_out.target is not aten.bmm.default:
        return None
    node = _walk(bmm_out.args[0])[0]  # the softmax
    scores = node.args[0]
    boolean = attention_masks.split(scores, _val(node).shape)
    if boolean is not None:
        scores = boolean[0]
    elif scores.target is aten.add.Tensor:
        scores = next(a for a in scores.args if _walk(a)[0].target is aten.bmm.default)
    return _walk(scores)[0]


def _projection(match: Match, sinks: set) -> Projection | None:
    """q, k and v's bases as products of one input that feed only this attention (`sinks`: its bmm's or
    SDPA node), or None (NOTE [Projections inside the attention op])."""
    if match.query_len != match.key_len:
        return None
    products = (match.q.base, match.k.base, match.v.base)
    rows = [_product_rows(p, op.width) for p, op in zip(products, (match.q, match.k, match.v))]
    if any(r is None for r in rows) or not all(_same_rows(rows[0], r) for r in rows[1:]):
        return None
    if _val(rows[0]).shape[0] != match.batch * match.query_len:
        return None
    if not all(_feeds_only(p, sinks) for p in set(products)):
        return None
    return Projection(rows[0], products)


def _product_rows(node: torch.fx.Node, width: int) -> torch.fx.Node | None:
    """The 2-D input `x` of `node` = addmm(b, x, W) (1-D b of `width`, beta = alpha = 1) or mm(x, W)."""
    if node.op != "call_function" or node.kwargs or _val(node) is None or _val(node).dim() != 2:
        return None
    if node.target is aten.addmm.default and len(node.args) == 3:
        bias, rows, weight = node.args
        bias_val = _val(bias)
        if bias_val is None or tuple(bias_val.shape) != (width,):
            return None
    elif node.target is aten.mm.default and len(node.args) == 2:
        rows, weight = node.args
    else:
        return None
    if _val(rows) is None or _val(weight) is None or _val(rows).dim() != 2:
        return None
    return rows


def _same_rows(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    """`a` and `b` hold the same values: the same node, or the same moves of one base (no scale)."""
    if a is b:
        return True
    (base_a, moves_a, scale_a), (base_b, moves_b, scale_b) = _walk(a), _walk(b)
    if base_a is not base_b or scale_a != 1.0 or scale_b != 1.0:
        return False
    index_a, index_b = _index_map(base_a, moves_a), _index_map(base_b, moves_b)
    return index_a is not None and index_b is not None and index_a.shape == index_b.shape and \
        torch.equal(index_a, index_b)


def _feeds_only(node: torch.fx.Node, sinks: set) -> bool:
    """Every use of `node`'s value goes through data movement and scalar scales into `sinks`."""
    for user in node.users:
        if user in sinks:
            continue
        moves = _step(user) is not None or _scalar(user) is not None or (
            user.op == "call_function" and user.target in _PIECES)
        if not moves or not _feeds_only(user, sinks):
            return False
    return True


def emit(graph, node: torch.fx.Node, match: Match, values: dict) -> None:
    """Append the com.microsoft MultiHeadAttention (Attention when q, k and v are projections, NOTE [Projections
    inside the attention op]) standing for `match` to the onnx_ir `graph`; its result
    (reshaped to `node`'s shape) becomes `values[node.name]`."""
    from torch.onnx._internal.exporter import _core

    add, const = _node_builders(graph, node)

    def operand(op: Operand, seq: int):
        value = add("Reshape", [values[op.base.name], const([match.batch, seq, op.width])])
        if op.width == match.heads * match.head_size:
            return value
        return add("Slice", [value, const([op.offset]), const([op.offset + match.heads * match.head_size]),
                             const([2])])

    bias = None
    if match.mask_kind is not None:  # NOTE [Boolean masks as an additive bias]
        mask_val = match.mask.meta["val"]
        bias, sizes = attention_masks.bias(add, const, values[match.mask.name], mask_val, match.mask_kind,
                                           match.query_len, match.key_len)
    elif match.mask is not None:
        mask_val = _val(match.mask)
        sizes = (1,) * (4 - mask_val.dim()) + tuple(mask_val.shape)
        mask = add("Reshape", [values[match.mask.name], const(list(sizes))])
        bias = add("Expand", [mask, const([sizes[0], sizes[1], match.query_len, match.key_len])])
    if match.projection is not None:  # NOTE [Projections inside the attention op]
        inputs = _projected_inputs(match, values, add, const) + [None, None]
        op_type = "Attention"
    else:
        inputs = [operand(match.q, match.query_len), operand(match.k, match.key_len),
                  operand(match.v, match.key_len), None, None]
        op_type = "MultiHeadAttention"
    if bias is not None:
        inputs.append(bias)
    context = add(op_type, inputs, domain="com.microsoft", num_heads=match.heads, scale=match.scale)
    if match.zero_masked_rows:  # NOTE [Fully masked rows of SDPA]
        masked = add("IsInf", [add("ReduceMax", [mask, const([3])], keepdims=1)], detect_positive=0)
        # (batch | 1, heads | 1, query | 1, 1) -> (batch | 1, query | 1, heads | 1, 1), as the context's heads
        seen = add("Reshape", [masked, const([sizes[0], sizes[2], 1, 1])]) if sizes[1] == 1 else \
            add("Transpose", [masked], perm=[0, 2, 1, 3])
        heads = add("Reshape", [context, const([match.batch, match.query_len, match.heads, match.head_size])])
        zero = add("Constant", [], value_float=0.0)
        context = add("Where", [seen, zero, heads])
    out = add("Reshape", [context, const(list(node.meta["val"].shape))])
    _core._set_shape_type(out, node.meta["val"], complex_to_float=True)
    out.name = node.name
    values[node.name] = out


def _node_builders(graph, node: torch.fx.Node):
    """(add, const): append an ONNX node (attributes: list -> INTS, int -> INT, float -> FLOAT) or an int64
    Constant to `graph`, named after `node`, and return its first output."""
    import numpy as np
    import onnx_ir as ir

    count = [0]

    def append(onnx_node):
        count[0] += 1
        graph.append(onnx_node)
        return onnx_node.outputs[0]

    def add(op_type, inputs, domain="", **attributes):
        return append(ir.Node(domain, op_type, inputs, attributes=[
            ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, v) if isinstance(v, int)
            else ir.AttrFloat32(k, v) for k, v in attributes.items()],
            name=f"node_{node.name}__{count[0]}"))

    def const(numbers, dtype=np.int64):
        return append(ir.Node("", "Constant", [], attributes=[
            ir.AttrTensor("value", ir.tensor(np.array(numbers, dtype=dtype)))],
            name=f"node_{node.name}__{count[0]}"))

    return add, const


def _projected_inputs(match: Match, values: dict, add, const) -> list:
    """Attention's input, weights and bias: x as (batch, sequence, features), the q, k and v columns of
    the products' weights side by side, and of their biases (zeros for mm)."""
    import numpy as np

    rows = match.projection.rows
    x = add("Reshape", [values[rows.name], const([match.batch, match.query_len, _val(rows).shape[1]])])
    width = match.heads * match.head_size
    operands, products = (match.q, match.k, match.v), match.projection.products
    columns = [(product, op.offset, op.offset + width) for product, op in zip(products, operands)]
    if len(set(products)) == 1 and [op.offset for op in operands] == [0, width, 2 * width]:
        columns = [(products[0], 0, 3 * width)]  # one product, q, k and v in order (ViT's qkv)

    def sliced(value, start: int, stop: int, full: int, axis: int):
        if start == 0 and stop == full:
            return value
        return add("Slice", [value, const([start]), const([stop]), const([axis])])

    weights, biases = [], []
    for product, start, stop in columns:
        full = _val(product).shape[1]
        weights.append(sliced(values[product.args[-1].name], start, stop, full, 1))
        if product.target is aten.addmm.default:
            biases.append(sliced(values[product.args[0].name], start, stop, full, 0))
        else:
            biases.append(const([0.0] * (stop - start), np.float32))
    join = lambda parts, axis: parts[0] if len(parts) == 1 else add("Concat", parts, axis=axis)  # noqa: E731
    return [x, join(weights, 1), join(biases, 0)]


def zero_unfused_masked_rows(graph, node: torch.fx.Node, values: dict) -> None:
    """After torchlib translated the SDPA `node` (not fused), set its output to 0 on query rows whose mask
    is -inf everywhere (NOTE [Fully masked rows of SDPA]); `values[node.name]` then holds the new output.
    The caller names the ONNX nodes added here with torchlib's (translate.py's naming invariant)."""
    mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None) \
        if node.op == "call_function" and node.target is _SDPA else None
    if not isinstance(mask, torch.fx.Node):
        return
    if not mask.meta["val"].dtype.is_floating_point:  # the op takes float masks; anything else stays in torch
        raise NotImplementedError("scaled_dot_product_attention with a non-float mask")
    import numpy as np
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _core

    def add(op_type, inputs, **attributes):
        onnx_node = ir.Node("", op_type, inputs, attributes=[
            ir.AttrInt64(k, v) if isinstance(v, int) else ir.AttrTensor(k, v) for k, v in attributes.items()])
        graph.append(onnx_node)
        return onnx_node.outputs[0]

    outputs = list(values[node.name])
    axis = add("Constant", [], value=ir.tensor(np.array([-1], dtype=np.int64)))
    row_max = add("ReduceMax", [values[mask.name], axis], keepdims=1)  # (..., query | 1, 1)
    masked = add("IsInf", [row_max], detect_positive=0)
    zero = add("CastLike", [add("Constant", [], value=ir.tensor(np.array(0.0, dtype=np.float32))), outputs[0]])
    result = add("Where", [masked, zero, outputs[0]])
    _core._set_shape_type(result, node.meta["val"][0], complex_to_float=True)
    result.name = f"{node.name}__0_masked_rows"
    values[node.name] = (result, *outputs[1:])
