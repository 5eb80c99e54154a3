"""Capability-based partitioning of a lowered aten graph into ONNX-Runtime parts and eager parts.

`partition(gm, blocked, fallback_ops) -> Partitioned` copies the lowered graph, asks
`translate.unsupported_reason` about every node, and fuses maximal groups of supported nodes (with
torch.fx's CapabilityBasedPartitioner, which keeps the fused graph acyclic) into `call_module` nodes
named `ort_0`, `ort_1`, ... . Everything else stays in the top graph and runs as eager torch.

Invariants: the input GraphModule is not modified; `blocked` node names (nodes that failed to
translate or to load in ORT on an earlier attempt, each with the error it raised: the reason logged on
`eager_fallback`) are always left to eager; a partition made only of
free ops (views, getitem) is dissolved, since eager runs those without copying; every placeholder of a
fused submodule carries the `meta["val"]` of the value that feeds it; a view that the graph returns
stays in torch, over whatever it views (NOTE [Returned views stay views]), and ops that may
run in ORT read their own copy of it (NOTE [Returned views read by ORT]).
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import operator

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from ..aliasing import is_view
from ..layout import eager_layout
from . import translate

# Ops that eager torch runs as metadata changes (no kernel, no copy). A partition made only of these
# would cost an ORT call and a copy for nothing.
_FREE_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose", "aten::permute",
    "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::alias",
    "aten::detach", "aten::as_strided", "aten::split", "aten::split_with_sizes", "aten::unbind",
})


FREE_OP_REASON = "a free op (view/getitem) left outside ORT parts"
MOVEMENT_REASON = "data movement that feeds no computation in ORT: runs in torch (NOTE [Copies stay in torch])"

# NOTE [Copies stay in torch]
# An ORT part that only moves data (cat, stack, clone, zeros, transposes made contiguous, embedding
# lookups) costs a session run, a fresh output allocation per result, and ORT's copies (its Concat was
# slower than torch's cat), and gains nothing: there is no arithmetic to fuse or optimise. The zoo's lstm
# had three such parts around torch's mkldnn_rnn_layer calls (0.96x eager). So, decided from the graph's
# structure before partitioning: a data-movement node runs in torch unless its result reaches, through
# data-movement nodes only, a node that computes in ORT. Such nodes are never *between* two ORT
# computations, so this never splits a part in two; a part of data movement only disappears, and a part
# no longer materialises a returned transpose or cat of its results (torch makes the view, or the cat).
# Not in symbolic programs (NOTE [One program for every size]): views and copies there take sizes that
# the part reads from its inputs, and in torch those sizes would be computed on every call.
_MOVEMENT_OPS = _FREE_OPS | frozenset({
    "aten::clone", "aten::cat", "aten::stack", "aten::zeros", "aten::ones", "aten::full", "aten::empty",
    "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::empty_like", "aten::new_zeros",
    "aten::new_ones", "aten::new_full", "aten::new_empty", "aten::scalar_tensor", "aten::lift_fresh",
    "aten::lift_fresh_copy", "aten::embedding", "aten::index_select", "aten::_to_copy", "aten::repeat",
    "aten::constant_pad_nd", "aten::narrow", "aten::flip", "aten::roll", "aten::_unsafe_view",
})
SIZE_REASON = translate.SIZE_REASON  # sizes computed in torch (NOTE [One program for every size])


@dataclasses.dataclass
class Partitioned:
    graph_module: torch.fx.GraphModule      # top graph; call_module "ort_<i>" nodes for ORT parts
    parts: dict[str, torch.fx.GraphModule]  # submodule name -> its aten graph
    eager_reasons: dict[str, str]           # eager call_function node name -> why it is not in ORT


ALIAS_REASON = "a view returned by the graph: it runs in torch so that it aliases as in eager"


# NOTE [Returned views stay views]
# ORT outputs are fresh tensors. When the graph returns a view of one of its inputs (`x[1:]`, `x.mT`)
# or of another output, eager's result shares memory with it: a write through the returned view reaches
# the input (and a graph break hands such views to the resume function, which may update them in place).
# So the chain of view ops from that input or output to the returned value stays in the top graph and
# runs in torch, where it makes a real view; the ops that compute the base may still run in ORT.
# The same holds for a returned view of a temporary (`(x * 2)[::2]`, `(x + 1).expand(2, -1)`): eager
# returns a view of the whole temporary, with its strides, offset and `_base` (`.view(-1)` raises,
# `add_` on an expanded result raises). Static programs kept such chains in torch only where they fed no
# ORT computation (NOTE [Copies stay in torch]), symbolic programs never: after an automatic dynamic
# recompile the result came back as ORT's fresh contiguous copy (hhuntG6 H1). Every returned chain now
# runs in torch, over the temporary computed by ORT.
def aliased_output_views(graph: torch.fx.Graph) -> set[str]:
    """Names of the view nodes that must run in torch for the graph's outputs to be views as in eager
    (views of inputs, of other outputs, or of temporaries)."""
    output = next(n for n in graph.nodes if n.op == "output")
    leaves = [a for a in pytree.tree_leaves(output.args[0]) if isinstance(a, torch.fx.Node)]
    names: set[str] = set()
    for leaf in leaves:
        node = leaf
        while is_view(node):
            names.add(node.name)
            node = node.args[0]
    return names


# NOTE [Returned views read by ORT]
# A view chain that stays in torch for aliasing (NOTE [Returned views stay views]) may also feed ops that
# run in ORT: a training forward returns `t(w)` (saved for the backward) and multiplies by it. The ORT
# part then took the torch view as an input, and a transposed input is copied contiguous before every run
# (the zoo's moe: 26 copies per forward step). Such readers get their own copy of the chain instead,
# which the partitioner may put inside the part (a Transpose that is folded into Gemm, NOTE [Transposes
# folded into Gemm]); the returned chain still runs in torch and aliases as in eager.
def _computed_copies_of_views(graph: torch.fx.Graph, aliased: set[str], supported) -> int:
    """Give the readers (that may run in ORT) of aliased view nodes their own copies of the view chain;
    returns how many readers were rewired."""
    copies: dict[torch.fx.Node, torch.fx.Node] = {}

    def copy_of(node: torch.fx.Node) -> torch.fx.Node:
        if node.name not in aliased:
            return node
        if node not in copies:
            base = copy_of(node.args[0])
            with graph.inserting_after(node):
                copies[node] = graph.call_function(node.target, (base, *node.args[1:]), dict(node.kwargs))
            copies[node].meta = dict(node.meta)
        return copies[node]

    rewired = 0
    for node in [n for n in graph.nodes if n.name in aliased]:
        for user in list(node.users):
            if user.op == "call_function" and user.name not in aliased and user not in copies.values() \
                    and supported(user):
                user.replace_input_with(node, copy_of(node))
                rewired += 1
    return rewired


class _Support(OperatorSupportBase):
    def __init__(self, blocked: dict[str, str], fallback_ops: frozenset, forced: dict[str, str] | None = None):
        self.blocked = blocked
        self.fallback_ops = fallback_ops
        self.reasons: dict[str, str] = dict(forced or {})

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            return self.is_node_supported(submodules, node.args[0])
        if node.name in self.reasons:
            return False
        reason = self.blocked.get(node.name) or translate.unsupported_reason(node, self.fallback_ops)
        if reason is not None:
            self.reasons[node.name] = reason
            return False
        return True


def _is_free(node: torch.fx.Node) -> bool:
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in _FREE_OPS


def _is_movement(node: torch.fx.Node) -> bool:
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in _MOVEMENT_OPS


def _is_symbolic(val) -> bool:
    if isinstance(val, torch.Tensor):
        return any(isinstance(size, torch.SymInt) for size in val.shape)
    return isinstance(val, torch.SymInt)


def copies_outside_computation(graph: torch.fx.Graph, supported) -> set[str]:
    """Names of the data-movement nodes whose results reach no ORT computation (`supported(node)`: the
    node may run in ORT) through data-movement nodes only (NOTE [Copies stay in torch])."""
    feeds: dict[torch.fx.Node, bool] = {}
    names: set[str] = set()
    if any(_is_symbolic(node.meta.get("val")) for node in graph.nodes):
        return names  # symbolic program: its views and copies need sizes, which torch would compute per call
    for node in reversed(graph.nodes):
        if node.op != "call_function":
            continue
        if not _is_movement(node):
            feeds[node] = True
            continue
        feeds[node] = any(feeds.get(user, False) and supported(user) for user in node.users)
        if not feeds[node] and node.target is not operator.getitem:
            names.add(node.name)
    return names


# NOTE [Random draws keep their order]
# Ops that draw random numbers run in torch (NOTE [Random ops stay whole] in lowering.py), each drawing from
# torch's one generator, so which numbers each gets depends on the order they run in. Fusing ORT parts may
# reorder them: in nn.Transformer(dropout=0.1) in train mode one part held both the encoder's feed-forward
# block (before its last dropout) and the decoder's self-attention (after its attention dropout), so the
# decoder's dropout had to run before the encoder's last one; every mask was another than eager's (outputs
# 0.5-0.9 off, same number of draws). While partitioning, each draw run in torch takes the draw before it as
# an extra argument: the partitioner then merges no parts across that order (it keeps the graph acyclic)
# and the fused graph is sorted with it; that argument is dropped after fusing.
def _chain_random_draws(graph: torch.fx.Graph, supported: dict) -> set[str]:
    """Make each random op left to torch depend on the one before it (a last argument); returns their names."""
    return _chain(graph, lambda node: node.op == "call_function" and not supported.get(node) and
                  torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()))


def _chain(graph: torch.fx.Graph, selected) -> set[str]:
    """Make each node that `selected` picks depend on the one before it (a last argument); returns their names."""
    previous, chained = None, set()
    for node in graph.nodes:
        if not selected(node):
            continue
        if previous is not None:
            chained.add(node.name)
            node.args = (*node.args, previous)
        previous = node
    return chained


WRITTEN_REASON = "reads or aliases a temporary that torch writes in place (NOTE [Temporaries written in place])"


# NOTE [Temporaries written in place]
# A lowered graph is functional but for input write-backs, except where a decomposition that the table runs
# below functionalization mutates a temporary it made: the refs of diagonal_scatter (the view replay of
# `t.diagonal().mul_(10)`) clone the base and `prims.copy_to` into a view of the clone. The mutation runs in
# torch (ORT has no in-place op), but the clone and its views were put in an ORT part, whose outputs are
# fresh copies: torch wrote into a copy and the input kept its old values (with symbolic sizes, where views
# and copies are not kept in torch, NOTE [Copies stay in torch]; the static program was right by that
# rule only). So the written temporary's base, every view of it, and every op that reads one of them run
# in torch, in the graph's order, as they would eagerly (each takes the one before it as an extra argument while
# partitioning, as NOTE [Random draws keep their order] does: fusing would otherwise move a reader of the clone
# that feeds a part, `sum(clone)`, before the write); the values they compute may feed ORT parts.
def written_temporaries(graph: torch.fx.Graph) -> set[str]:
    """Names of the nodes that alias or read a temporary written in place (not an input write-back)."""
    family: set[torch.fx.Node] = set()
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None or not schema.is_mutable:
            continue
        for arg, value in zip(schema.arguments, node.args):
            if arg.alias_info is None or not arg.alias_info.is_write or not isinstance(value, torch.fx.Node):
                continue
            base = value
            while is_view(base):
                base = base.args[0]
            if base.op != "placeholder":
                family.add(base)
    pending = list(family)
    while pending:
        for user in pending.pop().users:
            if is_view(user) and user not in family:
                family.add(user)
                pending.append(user)
    readers = {user for node in family for user in node.users}
    return {n.name for n in family | readers if n.op == "call_function"}


def partition(gm: torch.fx.GraphModule, blocked: dict[str, str], fallback_ops: frozenset) -> Partitioned:
    graph = copy.deepcopy(gm.graph)
    work = torch.fx.GraphModule(gm, graph)
    aliased = aliased_output_views(graph)
    written = written_temporaries(graph)  # NOTE [Temporaries written in place]
    support = _Support(blocked, fallback_ops, {**dict.fromkeys(written, WRITTEN_REASON),
                                               **dict.fromkeys(aliased, ALIAS_REASON)})
    _computed_copies_of_views(graph, aliased, lambda n: support.is_node_supported(None, n))
    supported = {n: support.is_node_supported(None, n) for n in graph.nodes}
    copies = copies_outside_computation(graph, supported.get)
    for node in graph.nodes:
        if node.name in copies:
            support.reasons[node.name] = FREE_OP_REASON if _is_free(node) else MOVEMENT_REASON
    chained = collections.Counter(_chain_random_draws(graph, supported))  # NOTE [Random draws keep their order]
    chained.update(_chain(graph, lambda node: node.name in written))  # NOTE [Temporaries written in place]
    partitioner = CapabilityBasedPartitioner(work, support, allows_single_node_partition=True)
    proposed = [p for p in partitioner.propose_partitions() if not all(_is_free(n) for n in p.nodes)]
    fused = partitioner.fuse_partitions(proposed, prefix="ort_")
    for node in fused.graph.nodes:  # a copy of `graph`, inputs replaced by part outputs: drop the last argument
        if node.name in chained:
            node.args = node.args[:-chained[node.name]]
    if chained:
        fused.recompile()
    parts: dict[str, torch.fx.GraphModule] = {}
    for node in list(fused.graph.nodes):
        if node.op == "call_module":
            sub = fused.get_submodule(node.target)
            _copy_input_meta(node, sub)
            _outputs_in_eager_layout(node, sub)
            parts[node.target] = sub
    eager_reasons = {
        n.name: support.reasons.get(n.name, FREE_OP_REASON)
        for n in fused.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
    }
    return Partitioned(fused, parts, eager_reasons)


# NOTE [ORT outputs in eager's layout]
# ORT writes every output densely in row-major order, but eager lays some results out otherwise: the CPU
# flash kernel behind `scaled_dot_product_attention` returns (batch, heads, seq, d) with the strides of
# (batch, seq, heads, d), a pointwise op keeps a permuted input's order. The lowered graph's torch ops
# after a part were traced with eager's strides: `sdpa(...).transpose(1, 2).view(b, s, h * d)` is a
# valid view there and raised "view size is not compatible with input tensor's size and stride" on the
# contiguous ORT output (the signature then ran eagerly). So a part output that is dense but not
# contiguous in eager (backends/layout.py) and that torch reads (a torch op or the graph's output) is
# returned by ORT in its memory order (a Transpose, which ORT often cancels against the one before it)
# and permuted back in torch: a free view with eager's strides, no copy. An ORT part that also reads it
# gets a non-contiguous input (a copy before its run), as it would from any torch view.
def _outputs_in_eager_layout(call: torch.fx.Node, sub: torch.fx.GraphModule) -> None:
    output = next(n for n in sub.graph.nodes if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    leaves = [output.args[0]] if single else list(output.args[0])
    results = {0: call} if single else {
        user.args[1]: user for user in call.users if user.target is operator.getitem}
    changed = False
    for k, leaf in enumerate(leaves):
        result = results.get(k)
        layout = eager_layout(leaf.meta.get("val"))
        if layout is None or result is None or not any(
                user.op != "call_module" for user in result.users):
            continue
        order = list(layout[0])
        inverse = sorted(range(len(order)), key=order.__getitem__)
        with sub.graph.inserting_before(output):
            stored = sub.graph.call_function(torch.ops.aten.permute.default, (leaf, order))
        stored.meta["val"] = leaf.meta["val"].permute(order)
        leaves[k] = stored
        with call.graph.inserting_after(result):
            view = call.graph.call_function(torch.ops.aten.permute.default, (result, inverse))
        view.meta["val"] = result.meta["val"]
        result.replace_all_uses_with(view, delete_user_cb=lambda user: user is not view)
        result.meta["val"] = stored.meta["val"]
        changed = True
    if changed:
        output.args = (leaves[0] if single else type(output.args[0])(leaves),)
        sub.recompile()


def _copy_input_meta(call: torch.fx.Node, sub: torch.fx.GraphModule) -> None:
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for placeholder, arg in zip(placeholders, call.args):
        placeholder.meta["val"] = arg.meta["val"]
