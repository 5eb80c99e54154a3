"""Outputs of a functionalized aten graph that must alias the graph's inputs, as they do in eager.

Lowered backends (onnxrt, triton) trace the captured graph with `torch.func.functionalize`, which turns
`x.add_(1); return x[1:]` into `add = x + 1; out = add[1:]; copy_(x, add); return out`: the returned
view is now a view of a fresh tensor. In eager it is a view of `x`, so a write through it reaches `x`
(and a graph break hands such views to the resume function, which may update them in place).

`alias_mutated_inputs(gm)` rewrites, in place, every output that is `v` or a chain of view ops over `v`,
where the graph ends with `copy_(x, v)` for an input `x`, into the same chain over that `copy_` node
(whose value is `x` itself, after the write), placed after it. The backends then build the chain from the
real input tensor: triton replays views of inputs, onnxrt keeps views of inputs in torch (NOTE [Returned
views stay views] in onnxrt/partition.py). Returns the number of outputs rewritten.

`changes_metadata_in_place(gm)`: the captured graph changes a tensor's shape or strides in place
(`x.t_()`, `x.unsqueeze_(0)`). Functionalization cannot express that (it wrote `copy_(x, x.permute(...))`,
which torch refuses: the copy overlaps its own source), so lowered backends run such graphs eagerly.
"""
from __future__ import annotations

import operator

import torch
import torch.fx
import torch.utils._pytree as pytree

_COPY = torch.ops.aten.copy_.default
_METADATA_IN_PLACE = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_",
                                "resize_", "resize_as_", "as_strided_", "set_"})


def dense_layout(val) -> bool:
    """`val` (a node's fake value) lies in its storage exactly as a fresh dense buffer would: contiguous,
    offset 0, a storage of its own size (NOTE [Storage read by as_strided] in onnxrt/translate.py)."""
    if not isinstance(val, torch.Tensor):
        return False
    try:
        return bool(val.is_contiguous() and val.storage_offset() == 0
                    and val.untyped_storage().nbytes() == val.numel() * val.element_size())
    except Exception:  # symbolic sizes or strides: not known to be dense
        return False


def reads_computed_layout(node: torch.fx.Node) -> torch.fx.Node | None:
    """For an as_strided `node` that reads, through views, the storage of a tensor computed in the graph
    whose eager layout is not dense: that tensor's node (a lowered kernel would write it densely)."""
    if dense_layout(node.args[0].meta.get("val")):
        return None
    base = node.args[0]
    while is_view(base):
        base = base.args[0]
    return None if base.op == "placeholder" or dense_layout(base.meta.get("val")) else base


def changes_metadata_in_place(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target in _METADATA_IN_PLACE:
            return True
        if node.op == "call_function" and getattr(node.target, "__name__", None) in _METADATA_IN_PLACE:
            return True
    return False


def is_view(node: torch.fx.Node) -> bool:
    """`node` returns a view of its first argument (an aten view op, or an item of one)."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.target is operator.getitem:
        return is_view(node.args[0])
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view




# NOTE [Views over a copied view]
# The value written back into an input is itself often a view of the replayed write: `t.T[0].zero_()` is
# functionalized as `s = select_scatter(t.permute(1, 0), zeros, 0, 0); p = s.permute(1, 0); copy_(t, p)`, and
# the returned `t.T[0]` as `p.permute(1, 0).select(0, 0)`. The chain from the output down to its base
# (`s`) passes over `p`, the copy_ source, so the output is rebuilt from the first node of its chain that is a
# copy_ source, not only from a base that is one (onnxrt returned a fresh copy for t.T[0].zero_(),
# t.view(-1)[::2].mul_(2), t.unsqueeze(0)[0, 0].add_(1), t.reshape(-1).mul_(2), ...: writes through the result
# did not reach `t`).
def _chain_to_copied(leaf: torch.fx.Node, copies: dict) -> tuple[list[torch.fx.Node], torch.fx.Node]:
    """The view nodes from `leaf` down to the first node that is a copy_ source (or the base), and that node."""
    chain, node = [], leaf
    while node not in copies and is_view(node):
        chain.append(node)
        node = node.args[0]
    return chain, node


def alias_mutated_inputs(gm: torch.fx.GraphModule) -> int:
    graph = gm.graph
    copies = {n.args[1]: n for n in graph.nodes if n.op == "call_function" and n.target is _COPY
              and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"}
    if not copies:
        return 0
    output = next(n for n in graph.nodes if n.op == "output")
    last_copy = [n for n in graph.nodes if n in copies.values()][-1]
    replaced: dict[torch.fx.Node, torch.fx.Node] = {}
    for leaf in [a for a in pytree.tree_leaves(output.args[0]) if isinstance(a, torch.fx.Node)]:
        chain, base = _chain_to_copied(leaf, copies)
        if base not in copies or leaf in replaced:
            continue
        new: torch.fx.Node = copies[base]
        anchor = last_copy
        for view in reversed(chain):  # from the base up to the leaf
            with graph.inserting_after(anchor):
                new = graph.node_copy(view, lambda arg, v=view, n=new: n if arg is v.args[0] else arg)
            anchor = new
        replaced[leaf] = new
    if not replaced:
        return 0
    output.args = pytree.tree_map(lambda a: replaced.get(a, a) if isinstance(a, torch.fx.Node) else a, output.args)
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    return len(replaced)
