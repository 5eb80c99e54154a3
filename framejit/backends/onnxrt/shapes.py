"""Shape tensors of symbolic ONNX parts, computed inside the graph from its inputs' shapes.

`fold_reshape_shapes(graph, gm) -> int` rewrites, in an `onnx_ir` graph translated from the FX partition
`gm` (translate.py), the shape operand of every Reshape or Expand that stands for an FX view: instead of torchlib's
`Concat(Reshape(size_input, [-1]), ..., Constant)` over scalar size inputs, the shape is a constant
wherever ONNX's Reshape can say it without runtime values (0: copy the input's dimension, -1: infer one
dimension; Expand: 1 keeps the input's dimension), and the remaining dimensions are read from the graph's tensor inputs with `Shape(x, start, end)`.
Scalar size inputs that other ops read (`arange(x.size(1))`) are read from the tensor inputs too. Nodes
and scalar graph inputs left without uses are removed; `drop_unread_args` (runtime.py) then stops
torch from computing and feeding those sizes on every call. See NOTE [Shapes from the graph's inputs].

Invariant: a Reshape (Expand) is rewritten only when every symbolic dimension of its target is at least 1
for every call the program's size check (`bind`, backends/symbolic.py) accepts (torch's range analysis
over the symbols' ranges), and every size it reads is built exactly (NOTE [Size expressions read in the
graph]); the new shape then names the same sizes as the FX node's `meta["val"]` for every such call.
Anything else keeps torchlib's translation.

`merge_batch_views` (run first) removes the views around matrix products altogether where ONNX's MatMul
broadcasting says the same (NOTE [Batched matmuls without views]).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.fx

# NOTE [Shapes from the graph's inputs]
# A symbolic program's views need their target shapes at run time. torchlib builds each one from scalar
# model inputs (`Reshape(s0, [-1])` per dimension, then Concat) that torch computes per call in the top
# graph (`sym_size`, products of sizes) and feeds as numpy scalars. In the attention block of
# benchmarks/dynamic.py that was 9 Python size ops and 9 extra feeds per call plus 24 Reshape and 15
# Concat nodes in ORT (static programs have constant shapes, which ORT folds away): dynamic per-call
# latency was 1.6x static at small sizes. Most target shapes need no runtime value at all in ONNX's
# Reshape language: `view(b*s, 64)` of (b, s, 64) is [-1, 64], `view(b, s, 3, 4, 16)` of (b, s, 192) is
# [0, 0, 3, 4, 16]. The others need one or two sizes, which `Shape(x, start=d, end=d+1)` reads from a
# graph input (one node per symbol, shared by every view of the part).


def _expr(size):
    if isinstance(size, torch.SymInt):
        return size.node.shape_env.simplify(size.node.expr)
    return int(size)


def _dims(val) -> list | None:
    if not isinstance(val, torch.Tensor):
        return None
    return [_expr(s) for s in val.shape]


# NOTE [sympy imported when used]: sympy is needed only for graphs with symbolic sizes, whose tracing has
# imported it already (torch's ShapeEnv); imported here at module level, it cost every warm process that
# loads an ORT program 0.5-1 s (measured under load: 4.3 s of a 7.7 s remote-warm first call of gpt).
def _lower_bound(expr, env):
    """The least value `expr` takes over the symbols' ranges (a number, possibly -inf)."""
    from torch.utils._sympy.value_ranges import bound_sympy

    if env is None:
        return float("-inf")
    try:
        lower = bound_sympy(expr, env.var_to_range).lower
        return int(lower) if getattr(lower, "is_integer", False) and lower.is_finite else float("-inf")
    except Exception:  # an expression the range analysis does not know; a bound int() refuses (`(-s) % 8`:
        return float("-inf")  # int() of its lower bound raised AttributeError: 'Infinity' ... '_mpf_')


# NOTE [Size expressions read in the graph]
# Sizes are not only products of input sizes: a patch embedding's grid is `(h // 2) * (w // 2)`, a
# class token adds 1 (`1 + (h // 2) * (w // 2)`). Such an expression is built in ONNX from the symbols'
# `Shape` reads with integer Add, Mul, Div and Mod, where ONNX's integer ops agree with Python's on every
# call `bind` accepts: Div truncates toward zero, so a floor division is built only where the range
# analysis (torch's `bound_sympy` over the symbols' ranges) says its dividend is >= 0 and its divisor >= 1;
# Mod (fmod=0) takes the divisor's sign as Python's % does, built for a divisor >= 1. A target size of a
# Reshape or Expand must moreover be >= 1 on every accepted call (0 and -1 mean something else there).
# Before, only products of symbols were read here: the zoo's ViT under dynamic=True fed 3 sizes that
# torch computed per call, and its views kept torchlib's Concat of scalar inputs (14 Concats in ORT).
def _computable(expr, builder) -> bool:
    """Whether `expr` can be built from the readable symbols with ONNX integer ops (NOTE above)."""
    import sympy
    from torch.utils._sympy.functions import CleanDiv, FloorDiv, Mod, PythonMod

    if isinstance(expr, sympy.Integer):
        return True
    if isinstance(expr, sympy.Symbol):
        return expr in builder.readable
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return all(_computable(arg, builder) for arg in expr.args)
    if isinstance(expr, sympy.Pow):
        return isinstance(expr.exp, sympy.Integer) and 1 <= expr.exp <= 8 and _computable(expr.base, builder)
    if isinstance(expr, (FloorDiv, CleanDiv, Mod, PythonMod, sympy.Mod)):
        dividend, divisor = expr.args
        return (_computable(dividend, builder) and _computable(divisor, builder)
                and _lower_bound(dividend, builder.env) >= 0 and _lower_bound(divisor, builder.env) >= 1)
    return False


class _ShapeBuilder:
    """Makes the ONNX values of shape operands, reading symbols from graph inputs (cached per symbol)."""

    def __init__(self, graph, gm: torch.fx.GraphModule):
        self.graph = graph
        self.env = None
        self.readable: dict = {}  # symbol -> (graph input value, dim)
        by_name = {v.name: v for v in graph.inputs}
        for node in gm.graph.nodes:
            if node.op != "placeholder" or node.name not in by_name:
                continue
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            for dim, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt):
                    import sympy  # NOTE [sympy imported when used]
                    self.env = self.env or size.node.shape_env
                    expr = _expr(size)
                    if isinstance(expr, sympy.Symbol):
                        self.readable.setdefault(expr, (by_name[node.name], dim))
        self.made: dict = {}  # expr -> ONNX value holding [expr]; ("shape", *spec) -> shape value
        self.count = 0

    def _node(self, op_type: str, inputs: list, attributes: dict, label: str, before):
        import onnx_ir as ir

        node = ir.node(op_type, inputs, attributes, name=f"node_{label}__{900 + self.count}")
        node.outputs[0].name = f"framejit_shape_{self.count}"
        self.count += 1
        self.graph.insert_before(before, node)
        return node.outputs[0]

    def constant(self, ints: list[int], label: str, before):
        import onnx_ir as ir

        return self._node("Constant", [], {"value": ir.tensor(np.array(ints, dtype=np.int64))}, label, before)

    def positive(self, expr) -> bool:
        return _lower_bound(expr, self.env) >= 1

    def can_compute(self, expr) -> bool:
        """Whether `read(expr)` can build the exact value of `expr` (NOTE [Size expressions read in the graph])."""
        return _computable(expr, self)

    def can_read(self, expr) -> bool:
        """`can_compute`, for a size that is >= 1 on every accepted call (a Reshape's or Expand's target)."""
        return self.positive(expr) and _computable(expr, self)

    def read(self, expr, label: str, before):
        """The 1-element int64 value [expr] (`can_compute(expr)` must hold)."""
        import sympy
        from torch.utils._sympy.functions import CleanDiv, FloorDiv

        if expr in self.made:
            return self.made[expr]
        if isinstance(expr, sympy.Integer):
            value = self.constant([int(expr)], label, before)
        elif isinstance(expr, sympy.Symbol):
            source, dim = self.readable[expr]
            value = self._node("Shape", [source], {"start": dim, "end": dim + 1}, label, before)
        elif isinstance(expr, sympy.Pow):
            value = self._fold("Mul", [expr.base] * int(expr.exp), label, before)
        elif isinstance(expr, (sympy.Add, sympy.Mul)):
            value = self._fold("Add" if isinstance(expr, sympy.Add) else "Mul", list(expr.args), label, before)
        else:  # a floor division or a modulo whose operands `_computable` checked
            op_type = "Div" if isinstance(expr, (FloorDiv, CleanDiv)) else "Mod"
            value = self._fold(op_type, list(expr.args), label, before)
        self.made[expr] = value
        return value

    def _fold(self, op_type: str, args: list, label: str, before):
        """`args` combined left to right; Add/Mul operands sorted (symbols first, constants last)."""
        import sympy

        if op_type in ("Add", "Mul"):  # (Div and Mod keep their dividend, divisor order)
            args = sorted(args, key=lambda a: (isinstance(a, sympy.Integer), str(a)))
        value = self.read(args[0], label, before)
        for arg in args[1:]:
            value = self._node(op_type, [value, self.read(arg, label, before)], {}, label, before)
        return value


def _spec(target: list, source: list, builder: _ShapeBuilder) -> list | None:
    """Reshape's shape for `source` -> `target`: ints (0 copies, -1 infers) and exprs to read at run
    time; None when the invariant of the module doc does not hold."""
    if any(isinstance(t, int) and t <= 0 for t in target):
        return None
    spec: list = []
    for index, size in enumerate(target):
        if isinstance(size, int):
            spec.append(size)
        elif not builder.positive(size):
            return None
        elif index < len(source) and source[index] == size:
            spec.append(0)
        else:
            spec.append(size)
    symbolic = [i for i, s in enumerate(spec) if not isinstance(s, int)]
    if symbolic:  # infer the one that costs the most to read
        worst = max(symbolic, key=lambda i: (not builder.can_read(spec[i]), len(spec[i].free_symbols), -i))
        spec[worst] = -1
    if any(not isinstance(s, int) and not builder.can_read(s) for s in spec):
        return None
    return spec


def _expand_spec(target: list, source: list, builder: _ShapeBuilder) -> list | None:
    """Expand's shape for `source` -> `target` (right-aligned broadcasting: 1 keeps the input's size)."""
    offset = len(target) - len(source)
    if offset < 0:
        return None
    spec: list = []
    for index, size in enumerate(target):
        if isinstance(size, int):
            spec.append(size)
        elif index >= offset and source[index - offset] == size:
            spec.append(1)
        elif builder.can_read(size):
            spec.append(size)
        else:
            return None
    return spec


def _shape_value(spec: list, builder: _ShapeBuilder, label: str, before):
    key = ("shape", *spec)
    if key not in builder.made:  # views to the same shape share one shape value
        builder.made[key] = _new_shape_value(spec, builder, label, before)
    return builder.made[key]


def _new_shape_value(spec: list, builder: _ShapeBuilder, label: str, before):
    pieces, run = [], []
    for size in spec:
        if isinstance(size, int):
            run.append(size)
            continue
        if run:
            pieces.append(builder.constant(run, label, before))
            run = []
        pieces.append(builder.read(size, label, before))
    if run:
        pieces.append(builder.constant(run, label, before))
    if len(pieces) == 1:
        return pieces[0]
    return builder._node("Concat", pieces, {"axis": 0}, label, before)


def fold_reshape_shapes(graph, gm: torch.fx.GraphModule) -> int:
    """Rewrite the shape operands of Reshapes standing for FX views (module doc); returns how many."""
    import onnx_ir as ir

    if not any(isinstance(n.meta.get("val"), torch.SymInt) or (
            isinstance(n.meta.get("val"), torch.Tensor) and any(isinstance(s, torch.SymInt) for s in n.meta["val"].shape))
            for n in gm.graph.nodes if n.op == "placeholder"):
        return 0
    fx_nodes = {n.name: n for n in gm.graph.nodes if n.op != "output"}
    merged = merge_batch_views(graph, fx_nodes)  # NOTE [Batched matmuls without views]
    builder = _ShapeBuilder(graph, gm)
    folded = _read_scalar_inputs(graph, fx_nodes, builder) + merged
    for node in list(graph):
        if node.op_type not in ("Reshape", "Expand") or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        fx_node = fx_nodes.get(node.outputs[0].name)
        if fx_node is None or fx_node.op != "call_function" or not fx_node.args:
            continue
        source_node = fx_node.args[0]
        if not isinstance(source_node, torch.fx.Node) or node.inputs[0] is None \
                or node.inputs[0].name != source_node.name:
            continue
        target, source = _dims(fx_node.meta.get("val")), _dims(source_node.meta.get("val"))
        if target is None or source is None or all(isinstance(t, int) for t in target):
            continue
        reshape = node.op_type == "Reshape"
        spec = _spec(target, source, builder) if reshape else _expand_spec(target, source, builder)
        if spec is None:
            continue
        node.replace_input_with(1, _shape_value(spec, builder, fx_node.name, node))
        if reshape:
            node.attributes["allowzero"] = ir.AttrInt64("allowzero", 0)  # 0 copies (no target size is 0)
        folded += 1
    if folded:
        _remove_unused(graph)
    return folded


def _read_scalar_inputs(graph, fx_nodes: dict, builder: _ShapeBuilder) -> int:
    """Replace scalar size inputs (`arange(x.size(1))`'s end, ...) by the size read from a tensor input, at
    the top of the graph (so that later shape operands may reuse the reads); returns how many."""
    first = next(iter(graph), None)
    count = 0
    for value in list(graph.inputs) if first is not None else ():
        fx_node = fx_nodes.get(value.name)
        if fx_node is None or fx_node.op != "placeholder" or not isinstance(fx_node.meta.get("val"), torch.SymInt):
            continue
        expr = _expr(fx_node.meta["val"])
        if isinstance(expr, int) or not builder.can_compute(expr):
            continue
        scalar = builder._node("Squeeze", [builder.read(expr, fx_node.name, first)], {}, fx_node.name, first)
        value.replace_all_uses_with(scalar)
        count += 1
    return count


def _remove_unused(graph) -> None:
    """Drop nodes whose outputs nothing reads, then scalar graph inputs nothing reads; an outer value that an
    If/Loop body reads counts as read (NOTE [ORT's LSTM eats NaN]: an LSTM's guard holds such bodies)."""
    read_inside = _read_by_subgraphs(graph)

    def unread(value) -> bool:
        return not value.uses() and not value.is_graph_output() and value not in read_inside

    for node in reversed(list(graph)):
        if all(unread(v) for v in node.outputs):
            graph.remove(node, safe=True)
    for value in list(graph.inputs):
        shape = value.shape
        if unread(value) and shape is not None and len(shape) == 0:
            graph.inputs.remove(value)


def _read_by_subgraphs(graph) -> set:
    """The values that nodes inside `graph`'s subgraphs (If branches, Loop bodies, nested) read."""
    import onnx_ir as ir

    read, pending = set(), [graph]
    while pending:
        for node in pending.pop():
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    subgraphs = [attr.value]
                elif attr.type == ir.AttributeType.GRAPHS:
                    subgraphs = list(attr.value)
                else:
                    continue
                for sub in subgraphs:
                    read.update(v for inner in sub for v in inner.inputs if v is not None)
                    read.update(sub.outputs)
                    pending.append(sub)
    return read


# NOTE [Batched matmuls without views]
# aten flattens the batch dimensions around every matrix product: a Linear on (b, s, k) is
# `view(b*s, k)`, addmm, `view(b, s, n)`; a 4-d matmul is `view(b*h, m, k)` of both operands, bmm,
# `view(b, h, m, n)`. With static sizes ORT sees constant shapes; with symbolic ones, each view back to
# (b, s, n) needs a shape tensor built on every call (Shape, Concat) and the views run as kernels: on the
# zoo's gpt the dynamic program had 21 more ORT nodes than the static one (11 Concats), 1.10-1.13x its
# per-call time. ONNX's MatMul broadcasts over leading dimensions, so the product of the unflattened
# operands is the same tensor: `Reshape(Gemm(Reshape(x), W, c))` becomes `Add(MatMul(x, W'), c)` (W' the
# Transpose of W for transB, which ORT folds for frozen weights or fuses into its FusedMatMul), and
# `Reshape(MatMul(Reshape(x), Reshape(y)))` becomes `MatMul(x, y)`. The rewrite is made only where the
# FX shapes prove it exact: the flattened size is the product of the batch dimensions (sympy), the
# trailing dimensions are untouched, the view back restores the same batch dimensions, the product's
# only reader is that view, and a Gemm has alpha = beta = 1, no transA, and a bias of at most 1
# dimension (broadcast over rows, as Gemm's is).
def merge_batch_views(graph, fx_nodes: dict) -> int:
    """Rewrite flatten/product/unflatten chains into broadcasting MatMuls (NOTE above); returns how many."""
    merged = 0
    for node in list(graph):
        if node.op_type in ("Gemm", "MatMul") and node.domain in ("", "ai.onnx"):
            merged += _merge_one(graph, node, fx_nodes)
    return merged


def _view_of(value, fx_nodes: dict):
    """(source ONNX value, source dims, target dims) when `value` is made by a Reshape standing for an FX view."""
    producer = value.producer() if value is not None else None
    if producer is None or producer.op_type != "Reshape" or producer.domain not in ("", "ai.onnx"):
        return None
    fx_node = fx_nodes.get(value.name)
    if fx_node is None or fx_node.op != "call_function" or not fx_node.args:
        return None
    source_node = fx_node.args[0]
    if not isinstance(source_node, torch.fx.Node) or producer.inputs[0] is None \
            or producer.inputs[0].name != source_node.name:
        return None
    target, source = _dims(fx_node.meta.get("val")), _dims(source_node.meta.get("val"))
    if target is None or source is None:
        return None
    return producer.inputs[0], source, target


def _same(a, b) -> bool:
    import sympy

    return a == b or sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _batch_dims(view, rank: int):
    """The batch dimensions a view flattens into the first of `rank` dimensions (the others untouched), or None."""
    import sympy

    _, source, target = view
    if len(target) != rank or len(source) <= rank:
        return None
    batch = source[: len(source) - rank + 1]
    if list(source[len(batch):]) != list(target[1:]) or not _same(target[0], sympy.Mul(*batch)):
        return None
    return batch


def _attr(node, name: str, default):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _merge_one(graph, node, fx_nodes: dict) -> int:
    import onnx_ir as ir

    out = node.outputs[0]
    uses = list(out.uses())
    if out.is_graph_output() or len(uses) != 1:
        return 0
    back_node = uses[0][0] if isinstance(uses[0], tuple) else uses[0].node
    if back_node.op_type != "Reshape" or back_node.domain not in ("", "ai.onnx") or back_node.inputs[0] is not out:
        return 0
    back = _view_of(back_node.outputs[0], fx_nodes)
    gemm = node.op_type == "Gemm"
    if back is None or gemm and (_attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0
                                 or _attr(node, "beta", 1.0) != 1.0):
        return 0
    rank = len(back[1])
    left = _view_of(node.inputs[0], fx_nodes)
    batch = _batch_dims(left, rank) if left is not None and rank in (2, 3) else None
    if batch is None or len(back[2]) != len(batch) + rank - 1 \
            or any(not _same(a, b) for a, b in zip(back[2], list(batch) + list(back[1][1:]))):
        return 0
    right = node.inputs[1]
    if rank == 3:  # bmm: the right operand is flattened over the same batch dimensions
        view = _view_of(right, fx_nodes)
        right_batch = _batch_dims(view, 3) if view is not None else None
        if right_batch is None or len(right_batch) != len(batch) or any(
                not _same(a, b) for a, b in zip(batch, right_batch)):
            return 0
        right = view[0]
    elif right is None or right.shape is None or len(right.shape) != 2:
        return 0
    bias = node.inputs[2] if gemm and len(node.inputs) > 2 else None
    if bias is not None and (bias.shape is None or len(bias.shape) > 1):
        return 0
    label = f"node_{back_node.outputs[0].name}__merge"
    new_nodes = []
    if gemm and _attr(node, "transB", 0):
        new_nodes.append(ir.node("Transpose", [right], {"perm": [1, 0]}, name=f"{label}0"))
        right = new_nodes[-1].outputs[0]
    new_nodes.append(ir.node("MatMul", [left[0], right], name=f"{label}1"))
    if bias is not None:
        new_nodes.append(ir.node("Add", [new_nodes[-1].outputs[0], bias], name=f"{label}2"))
    for k, made in enumerate(new_nodes):
        made.outputs[0].name = f"framejit_matmul_{back_node.outputs[0].name}_{k}"
    result, old = new_nodes[-1].outputs[0], back_node.outputs[0]
    result.shape, result.type = old.shape, old.type
    graph.insert_before(back_node, new_nodes)
    name = old.name
    old.replace_all_uses_with(result, replace_graph_outputs=True)
    graph.remove(back_node, safe=True)
    if not out.uses():
        graph.remove(node, safe=True)
    result.name = name
    return 1
