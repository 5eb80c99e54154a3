"""Lowering of a user/framejit FX graph to a flat, functional core-aten graph with fake-tensor metadata.

`lower(gm, inputs) -> Lowered` traces `gm` with `make_fx` under fake tensors (no real kernels run):
- parameters, buffers and tensor constants of `gm` become leading placeholders (`Lowered.state`), so
  the ONNX models never embed weights (see NOTE [Weights are inputs]);
- `torch.func.functionalize` removes in-place ops on intermediates, and turns mutations of inputs into
  trailing `aten.copy_` nodes, which the partitioner leaves to eager torch; in-place ops that appear
  below functionalization (inside composite ops) are removed by a second pass (NOTE [Refunctionalize]);
- aten ops without a torchlib translation are decomposed with `torch._decomp` tables (ops that torchlib
  translates directly are kept whole: one ONNX function beats a decomposed chain);
- the graph returns a flat list of leaves; `Lowered.out_spec` rebuilds what `gm` returns.

Invariant: every call_function node of `Lowered.graph_module` has `meta["val"]` (a fake tensor, a
list of them, or a Python scalar), which the partitioner and the ONNX translator rely on.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from ...grad_mode import grad_mode
from ... import fake_modes
from . import view_writes
from ..state import changes_default_dtype, pin_default_dtypes  # NOTE [Default dtype in the lowered graph]
from .lstm_whole import keep_lstm_whole  # NOTE [LSTM kept whole]; defines the op persisted sources call

# NOTE [Weights are inputs]
# Parameters and buffers are passed to ONNX Runtime as graph inputs bound to the live torch tensors
# (numpy views, no copy) instead of being baked into the model as initializers. Consequences: an
# in-place weight update (optimizer step, load_state_dict) is seen by the next call exactly as in
# eager; the model bytes (the cacheable artifact) are small and independent of weight values; and a
# weight tensor is never duplicated in memory. Weights as inputs cost speed, though (no constant
# folding, no prepacking): the sessions take them as constants after all (NOTE [Frozen weights] in
# runtime.py), and the translator folds weight transposes into Gemm (NOTE [Transposes folded into Gemm]).


@dataclasses.dataclass
class Lowered:
    graph_module: torch.fx.GraphModule  # placeholders: state tensors, then the user inputs' leaves
    state: list[torch.Tensor]           # live parameter/buffer/constant tensors, in placeholder order
    state_names: list[str]
    out_spec: pytree.TreeSpec


def _state_of(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    state.update(gm.named_parameters(remove_duplicate=False))
    state.update(gm.named_buffers(remove_duplicate=False))
    for node in gm.graph.nodes:  # plain tensor attributes (constants lifted by tracers)
        if node.op == "get_attr" and node.target not in state:
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                state[node.target] = value
    return state


def _get_attr(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


@functools.lru_cache(maxsize=None)
def decomposition_table(translated_ops: frozenset) -> dict:
    """torch._decomp's core-aten decompositions, minus the ops torchlib translates directly."""
    table: dict = {}
    candidates = list(torch._decomp.core_aten_decompositions().items())
    candidates += list(torch._decomp.decomposition_table.items())
    for op, fn in candidates:
        if not hasattr(op, "_schema") or op in table or op._schema.is_mutable:
            continue  # in-place ops stay whole until the second pass (NOTE [Refunctionalize])
        if op.name() in _NEVER_DECOMPOSED or draws_random(op):
            continue
        if isinstance(op, torch._ops.OpOverload) and op.name() in translated_ops \
                and op.name() not in _ALWAYS_DECOMPOSED:
            continue
        table[op] = fn
    from .cumprod import decomposition  # NOTE [cumprod as a masked product]
    table.update(decomposition())
    from .cdist import cdist_forward  # NOTE [Euclidean cdist as differences]: inference programs too
    table[torch.ops.aten._cdist_forward.default] = cdist_forward
    from ..joint import eager_exact_decompositions  # NOTE [Decompositions that follow eager's kernels]
    table.update(eager_exact_decompositions())
    native = table.get(torch.ops.aten.native_batch_norm.default)
    if native is not None and "aten::_native_batch_norm_legit_no_training" in translated_ops:
        table[torch.ops.aten.native_batch_norm.default] = functools.partial(_eval_batch_norm_whole, native)
    from ..reduced_cpu import keep_all_whole  # NOTE [Reduced-precision kernels kept whole on CPU]
    return keep_all_whole(table)


# NOTE [Eval batch norm as one op]
# make_fx traces an eval-mode BatchNorm (torch 2.13) as `native_batch_norm(..., training=False, ...)`, not as
# `_native_batch_norm_legit_no_training`, so _ALWAYS_DECOMPOSED (NOTE [Batch norm in train mode on ORT])
# decomposed it too: Sub, Mul, Add, Sqrt and Reciprocal per norm, which ORT can fold neither into the
# convolution before it nor run in its NCHWc layout (the zoo cnn at 1 thread: per call 15 Convs 39.7 ms, the
# decomposed norms' Mul/Add/Sub 12.6 ms and 27 layout Reorders 5.9 ms, ORT's profile). A native_batch_norm with
# training=False is traced as `_native_batch_norm_legit_no_training` (the same values, empty saved statistics),
# which torchlib writes as one BatchNormalization that ORT folds into the convolution when the weights and
# statistics are frozen (NOTE [Frozen weights] in runtime.py); in training mode the decomposition is unchanged.
def _eval_batch_norm_whole(decomposed, input, weight, bias, running_mean, running_var, training, momentum, eps):
    if training or running_mean is None or running_var is None:
        return decomposed(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return torch.ops.aten._native_batch_norm_legit_no_training.default(
        input, weight, bias, running_mean, running_var, momentum, eps)


# NOTE [Batch norm in train mode on ORT]: torchlib's translation of batch norm in training mode (batch
# statistics, updated running stats) gave outputs off by up to 1.9 and wrong running statistics on
# Linear+BatchNorm1d and Conv2d+BatchNorm2d in train() under no_grad (a silent wrong result since the
# backend's start). The train-mode ops are decomposed into mean/var/pointwise aten ops, which ORT runs
# exactly; eval-mode batch norm (`_native_batch_norm_legit_no_training`) stays one BatchNormalization.
# Training graphs do the same (NOTE [Batch norm in training graphs] in backends/joint.py).
_ALWAYS_DECOMPOSED = frozenset({"aten::_native_batch_norm_legit_functional", "aten::_native_batch_norm_legit",
                                "aten::_native_batch_norm_legit.no_stats",
                                "aten::native_batch_norm"})


# NOTE [Tensor literals in graphs]
# A graph may make a tensor from a literal (`torch.tensor([], dtype=...)`: transformers' DynamicCache
# starts every layer's keys and values so, and gpt2, llama and qwen2 concatenate onto them). make_fx
# records the literal as a constant and calls `aten.lift_fresh` on it, which the fake mode turns into
# a fake tensor. torch._decomp's table decomposes `lift_fresh` (and `lift`) into `alias`, which then
# reached the fake mode with the real constant ("Please convert all Tensors to FakeTensors first"), so
# these graphs ran wholly eagerly. They are kept out of the table.
_NEVER_DECOMPOSED = frozenset({"aten::lift", "aten::lift_fresh",
                               # torch._decomp's decomposition differs from eager's kernel (targets with
                               # entries after the -1 that ends them: 5.16 vs 1.81, tools/nn_sweep.py); the
                               # op runs in torch (translate.py, _WRONG_TRANSLATION)
                               "aten::multilabel_margin_loss_forward"})


# NOTE [Random ops stay whole]: an op that draws random numbers (tagged nondeterministic_seeded:
# exponential, bernoulli, normal, native_dropout, ...) runs in torch, as translate.py decides for random
# ops, so that torch's generator gives eager's numbers. Its torch._decomp decomposition draws them through
# other ops (exponential as -log(1 - rand_like(x)) / lambd, where eager's kernel draws its own way), which
# gave other numbers: F.gumbel_softmax (Tensor.exponential_) matched eager on the first call (checked in
# torch) and differed from the second on (tools/nn_sweep.py --backend onnxrt). Such ops are never decomposed.
def draws_random(op) -> bool:
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


# NOTE [Refunctionalize]
# Functionalization only sees the ops called at its own level. Composite ops whose C++ kernels
# mutate their temporaries (aten::gru_cell: `hgates[0].add_(igates[0]).sigmoid_()`, ...) run below
# it, so their in-place ops reached the trace as `copy_` nodes on intermediates; the partitioner must
# leave every `copy_` to eager torch, and the zoo's gru_cell graph was cut into 199 ORT parts (24 s to
# build, 4.6x slower than eager). When the first trace holds a mutation of anything but a graph input,
# the traced aten graph is functionalized and traced again: now the in-place ops are called at the
# functionalization level, which turns them into their functional forms (input mutations stay
# trailing `copy_` nodes). In-place ops are kept out of the decomposition table so that the first trace
# keeps them whole (`sigmoid_` -> one `sigmoid` later, not the prims chain `neg, exp, add, div, copy_`).


def _mutates_intermediates(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not node.target._schema.is_mutable:
            continue
        is_input_write = node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder"
        if not is_input_write:
            return True
    return False


def _has_symbolic_sizes(args: list) -> bool:
    for value in args:
        if isinstance(value, torch.SymInt):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape):
            return True
    return False


# NOTE [Symbolic lowering]
# Inputs with symbolic sizes (backends/symbolic.py) are traced with make_fx's symbolic mode, so sizes stay
# SymInts (sym_size nodes) instead of the hints' ints. Under functorch's functionalize, some composite C++
# kernels read plain sizes (linear with a bias on a 3-d input dispatched aten.size.default, which
# specialised batch and sequence to their example values); so a symbolic graph is first traced to aten
# WITHOUT functionalization (composites decompose with their SymInt-aware C++ code), and that aten graph
# is then functionalized and traced again, as NOTE [Refunctionalize] does.
def _trace(fn, table: dict, args: list, functionalize: bool = True) -> torch.fx.GraphModule:
    mode = "symbolic" if _has_symbolic_sizes(args) else "fake"
    traced_fn = torch.func.functionalize(fn, remove="mutations") if functionalize else fn
    from ..torch_methods import eager_dropout, original_tensor_methods
    # NOTE [Patched Tensor methods while lowering], NOTE [Dropout drawn as eager draws it]
    with grad_mode(False), original_tensor_methods(), eager_dropout(), keep_lstm_whole():
        traced = make_fx(traced_fn, decomposition_table=table, tracing_mode=mode)(*args)
    fake_modes.forget_modes_of(traced)  # NOTE [Traces leave no weak references] in fake_modes.py
    traced.graph.eliminate_dead_code()  # keeps impure nodes (the trailing copy_ of input mutations)
    traced.recompile()
    return traced


# NOTE [Grad mode after the traced graph]
# Lowering traces with grad mode off (_trace), but a graph with a `torch.no_grad()` region holds the switches
# themselves (_set_grad_enabled(False), then (True) back to the mode it was captured under) and leaves grad
# mode on. Functionalisation then wrote the graph's input mutations back onto the traced inputs with grad on:
# a parameter changed in place under no_grad (`with torch.no_grad(): self.w.mul_(0.99)` in forward) is a
# leaf that requires grad, so the trace raised and the inference program (no_grad calls, evaluation after
# training) ran eagerly. The graph's call restores the trace's grad mode when it returns.
# NOTE [In-place bitwise operators while lowering]: `m[0] |= v` calls `aten::__ior__`, whose schema returns an
# alias of self that torch.func.functionalize refuses ("a custom (non-ATen) operator whose output has alias
# annotations"): the graph ran eagerly (hsweep8: smolvlm's vision and text model). Such a graph is first traced
# without functionalization, where the dunder decomposes to `bitwise_or_`, then functionalized from that aten
# graph, as NOTE [Symbolic lowering] does.
_BITWISE_DUNDERS = frozenset({operator.ior, operator.iand, operator.ixor, operator.ilshift, operator.irshift})


def _calls_bitwise_dunders(gm: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_function" and n.target in _BITWISE_DUNDERS or
               n.op == "call_method" and n.target in ("__ior__", "__iand__", "__ixor__", "__ilshift__", "__irshift__")
               for n in gm.graph.nodes)


def lower(gm: torch.fx.GraphModule, inputs: list, translated_ops: frozenset) -> Lowered:
    """Trace `gm(*inputs)` to a functional aten graph over (state..., inputs...); see module docstring."""
    from ..foreach import expand_foreach  # NOTE [Foreach expansion]
    gm = expand_foreach(gm)
    if view_writes.writes_over_its_reads(gm):
        raise RuntimeError(view_writes.OVERLAP_REASON)  # NOTE [Writes over their own reads]: runs eagerly
    state = _state_of(gm)
    names = list(state)
    spec_box: list[pytree.TreeSpec] = []

    def flat_fn(*flat):
        # NOTE [Graph modules called through forward]: GraphModule.__call__ prints a traceback of its generated
        # code to stderr whenever that code raises (e.g. `1 / n` with n a graph input that became 0), output
        # eager never prints; backends call `gm.forward`, and this reparametrises the module the way
        # torch.func.functional_call does, then calls forward.
        from torch.nn.utils.stateless import _reparametrize_module
        # NOTE [Grad mode after the traced graph]
        with _reparametrize_module(gm, dict(zip(names, flat[: len(names)])), tie_weights=True), \
                grad_mode(torch._C.is_grad_enabled()):
            result = gm.forward(*flat[len(names):])
        leaves, spec = pytree.tree_flatten(result)
        spec_box.append(spec)
        return leaves

    table = decomposition_table(translated_ops)
    args = [*state.values(), *inputs]
    symbolic = _has_symbolic_sizes(args)
    unfunctional = symbolic or _calls_bitwise_dunders(gm)
    from ..torch_methods import original_api_functions  # NOTE [Patched torch functions while lowering]
    with original_api_functions(gm):
        lowered = _trace(flat_fn, table, args, functionalize=not unfunctional)  # NOTE [Symbolic lowering]
        plain = lowered if unfunctional else (_trace(flat_fn, table, args, functionalize=False)
                                              if view_writes.calls_unfold(gm) else None)
    if plain is not None and view_writes.writes_through_unfold(plain):
        raise RuntimeError(view_writes.REASON)  # NOTE [Writes through unfold]: the graph runs eagerly
    if changes_default_dtype(gm):
        pin_default_dtypes(lowered)  # NOTE [Default dtype in the lowered graph] (state.py): before a second trace
    out_spec = spec_box[-1]
    if unfunctional or _mutates_intermediates(lowered):
        from .prims_views import as_aten_views
        as_aten_views(lowered)  # NOTE [prims views before refunctionalizing]
        lowered = _trace(lowered, table, pytree.tree_leaves(args))
    if symbolic:
        drop_redundant_clones(lowered)  # NOTE [Copies of the symbolic trace]
    return Lowered(lowered, list(state.values()), names, out_spec)


# NOTE [Copies of the symbolic trace]
# The symbolic trace (NOTE [Symbolic lowering]) runs composite kernels without functionalization, and
# they copy more than the functionalized trace of static sizes does: the zoo's lstm got a clone of its
# embedding's result and two contiguous copies of the same transposed input (one per direction), which
# the static program makes once, in torch, on every call. In a functional graph a copy is observable only
# through aliasing, so (1) `clone(x)` of an op's fresh (non-aliasing) result read by nothing else, with
# the same strides, is `x` itself; (2) two clones of the same value with the same arguments are one,
# unless a result of either reaches the graph's output (the caller would get one tensor twice) or is
# read by an op whose result aliases it.
_CLONE = torch.ops.aten.clone.default


def _returns_fresh(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def _same_strides(a, b) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
        [str(s) for s in a.stride()] == [str(s) for s in b.stride()]


def _only_fresh_readers(node: torch.fx.Node) -> bool:
    return all(user.op == "call_function" and _returns_fresh(user) for user in node.users)


def drop_redundant_clones(gm: torch.fx.GraphModule) -> int:
    """Remove the copies NOTE [Copies of the symbolic trace] shows are not observable; returns how many."""
    removed = 0
    seen: dict = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _CLONE or not isinstance(node.args[0], torch.fx.Node):
            continue
        source = node.args[0]
        if len(source.users) == 1 and _returns_fresh(source) and _same_strides(
                source.meta.get("val"), node.meta.get("val")):
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
            removed += 1
            continue
        if not _only_fresh_readers(node):
            continue
        key = (source, tuple(sorted(node.kwargs.items())))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            gm.graph.erase_node(node)
            removed += 1
        else:
            seen[key] = node
    if removed:
        gm.recompile()
    return removed


def node_val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node
