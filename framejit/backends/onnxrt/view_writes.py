"""Writes that a functional graph cannot express as eager runs them: such graphs run eagerly (lowering.py).

NOTE [Writes through unfold]
Functionalization replays an in-place write through a view with the view's inverse. unfold's inverse is
`unfold_backward`, which builds the base from zeros and adds the windows back: an element that no window
covers becomes 0. `x.view(-1).unfold(0, 2, 2).mul_(3)` on 9 elements (four windows, x[8] in none) returned
eager's windows on onnxrt but zeroed x[8], which eager leaves as it was, on every call, static sizes or not.
(Windows that overlap cannot be written eagerly: eager raises for a write into overlapping memory.) A graph
that writes into an unfold result, or into a view of one, therefore runs eagerly: its aten graph is traced
once without functionalization (only when the captured graph calls unfold at all) and checked.
Training graphs go through AOT autograd's functionalization, with the same inverse (loss, result and gradient
lost the uncovered element): the captured graph itself is checked too (captured_writes_into_unfold, from the
fake values' storages), and such a graph runs eagerly whether it needs gradients or not.

NOTE [Writes over their own reads]
Eager refuses an in-place op whose destination partially overlaps one of its sources (`t[1:].copy_(t[:-1])`,
`t.mul_(t.T)`, `t.copy_(t.T)`: RuntimeError "some elements of the input tensor and the written-to tensor refer
to a single memory location"), and leaves the tensor as it was. The functionalized graph computes the sources
first and writes after, so onnxrt returned a value and changed the input where eager raised. A captured graph
with an in-place op whose destination shares storage with another tensor argument, other than the very same
view (`t.add_(t)` is allowed), runs eagerly: eager's kernel raises, or computes what eager computes. The storage
is read from the captured graph's fake values, which keep eager's aliasing (inputs passed twice included).
`t[1:] = t[:-1]` (operator.setitem: its destination `t[1:]` is no node) runs eagerly whenever the value
shares storage with `t`. So does an in-place write into a view whose own elements share memory
(`t.as_strided((3, 2), (1, 1)).mul_(2)`): eager's kernel writes a shared element once per index that reaches
it ([[0, 4], [4, 8], [8, 6]] for a 4x4 arange), where the functional graph wrote it once ([[0, 2], [2, 4], ...]).
"""
from __future__ import annotations

import operator

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

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
        for i, arg in enumerate(schema.arguments):  # positional, or by name (`out=` is keyword-only)
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if arg.alias_info is not None and arg.alias_info.is_write and value in views:
                return True
    return False


OVERLAP_REASON = "writes in place into a tensor that shares memory with one of the op's sources " \
                 "(NOTE [Writes over their own reads])"
_IN_PLACE_OPERATORS = frozenset({operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                 operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                                 operator.ixor, operator.ilshift, operator.irshift, operator.imatmul})


def _writes_in_place(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function":
        if node.target in _IN_PLACE_OPERATORS:
            return True
        name = getattr(node.target, "__name__", "")
    else:
        return False
    return isinstance(name, str) and name.endswith("_") and not name.startswith("_")


def _layout(t: torch.Tensor) -> tuple:
    return tuple(str(v) for v in (*t.shape, "|", *t.stride(), "|", t.storage_offset()))


def _overlaps_itself(t: torch.Tensor) -> bool:
    """Whether two elements of `t` (static sizes and strides) may share memory: dims by increasing stride, each
    stride must pass the farthest offset that the smaller ones reach."""
    dims = [(st, sz) for sz, st in zip(t.shape, t.stride()) if not (isinstance(sz, int) and sz == 1)]
    if any(not isinstance(v, int) for d in dims for v in d):
        return _may_overlap_symbolic(dims)
    reach = 0
    for stride, size in sorted(dims):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def _may_overlap_symbolic(dims: list) -> bool:
    """The same test with symbolic sizes or strides: no overlap only where the shape environment proves each
    stride passes the reach of the smaller ones for every size the entry serves (review revM F7: an as_strided
    view `(s0 - 1, 2)` with strides (1, 1) was taken as not overlapping and written once per element)."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

    def hint(v):
        return v if isinstance(v, int) else v.node.hint
    try:
        ordered = sorted(dims, key=lambda d: hint(d[0]))
        reach = 0
        for stride, size in ordered:
            if guard_or_false(size == 1):
                continue
            if not statically_known_true(stride > reach):
                return True
            reach = reach + (size - 1) * stride
    except Exception:  # a hint the environment does not have: the write runs eagerly
        return True
    return False


def writes_over_its_reads(gm: torch.fx.GraphModule) -> bool:
    """Whether an in-place op of the captured graph writes into memory shared with another of its tensor
    arguments, other than the same view (NOTE [Writes over their own reads])."""
    for node in gm.graph.nodes:
        setitem = node.op == "call_function" and node.target is operator.setitem
        out = node.kwargs.get("out") if node.op in ("call_function", "call_method") else None
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if out is not None and all(isinstance(o, torch.fx.Node) for o in outs):  # `torch.add(a, b, out=d)`,
            # `torch.max(t, 0, out=(v, i))` write d, v and i (review revM F6, F10)
            dests, sources = outs, (node.args, {k: v for k, v in node.kwargs.items() if k != "out"})
        elif not (setitem or _writes_in_place(node)) or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        elif setitem and _writes_its_own_view(node):
            continue
        else:
            dests = (node.args[0],)
            sources = node.args[2:] if setitem else (node.args[1:], node.kwargs)
        if any(_writes_over(dest_node.meta.get("val"), sources, setitem) for dest_node in dests):
            return True
    return False


def _writes_its_own_view(node: torch.fx.Node) -> bool:
    """`t[i] = v` where `v` is `t[i]` itself (same storage, sizes, strides and offset): the augmented assignment
    `t[i] |= m` ends so (its in-place op already wrote the view); eager copies the view onto itself, a no-op, and
    so does the functional graph. Refusing it ran whole graphs in torch (hsweep8: smolvlm's vision and text
    model). The index must be constant (ints, slices, None, Ellipsis)."""
    base, index, value = (node.args + (None,) * 3)[:3]
    dest = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    items = index if type(index) is tuple else (index,)
    if not isinstance(dest, torch.Tensor) or not isinstance(val, torch.Tensor) or \
            not all(type(i) in (int, slice, type(None), type(Ellipsis)) for i in items) or \
            any(type(i) is slice and not all(type(p) in (int, type(None)) for p in (i.start, i.stop, i.step))
                for i in items):
        return False
    try:
        view = dest[index]
    except Exception:
        return False
    return StorageWeakRef(view.untyped_storage()) == StorageWeakRef(val.untyped_storage()) and \
        _layout(view) == _layout(val)


def _writes_over(dest, sources, setitem: bool) -> bool:
    """Whether a write into `dest` overlaps itself or one of `sources` in another layout."""
    if not isinstance(dest, torch.Tensor):
        return False
    if not setitem and _overlaps_itself(dest):
        return True
    storage = StorageWeakRef(dest.untyped_storage())
    for arg in pytree.tree_leaves(sources):
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and StorageWeakRef(val.untyped_storage()) == storage \
                and (setitem or _layout(val) != _layout(dest)):
            return True
    return False


def _storage(node) -> StorageWeakRef | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return StorageWeakRef(val.untyped_storage()) if isinstance(val, torch.Tensor) else None


def captured_writes_into_unfold(gm: torch.fx.GraphModule) -> bool:
    """Whether the captured graph writes in place into an unfold result or a view of one (NOTE [Writes through
    unfold]): a view is a node whose first argument is one and whose fake value shares its storage. Checked on
    the captured graph, so that training graphs (AOT autograd's functionalization) run eagerly too."""
    if not calls_unfold(gm):
        return False
    views: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op not in ("call_method", "call_function") or not node.args:
            continue
        base = node.args[0]
        if (node.op == "call_function" and node.target is operator.setitem) or _writes_in_place(node):
            if base in views:
                return True
            continue
        if "unfold" in str(getattr(node.target, "__name__", node.target)) and _storage(node) is not None \
                and _storage(node) == _storage(base):
            views.add(node)
        elif base in views and _storage(node) is not None and _storage(node) == _storage(base):
            views.add(node)
    return False
