"""Training through compiled graphs: one graph that needs gradients becomes a forward and a backward graph.

`JointGraph(gm, compile_fn, backend_name)` is called like `gm`. On a call where autograd would record
the graph (grad mode on, an input or a weight of `gm` requires grad; see `needs_autograd`) it runs the
graph through a joint built for the call's input signature; otherwise it runs `inference(*args)` (the
backend's inference callable, given by the caller). Per signature, the joint is built once:

1. torch's AOT autograd (`torch._functorch.aot_autograd.aot_module_simplified`) traces `gm` with fake
   tensors and functionalisation into one joint forward+backward aten graph, with `gm`'s parameters and
   buffers lifted to inputs;
2. the joint is partitioned (NOTE [Partition]) into a forward graph (user outputs + the tensors the
   backward needs) and a backward graph (saved tensors + output gradients -> input gradients);
3. each graph is handed to `compile_fn(graph, fake_example_inputs)` (the backend's own compiler: an
   ONNX Runtime program, or Triton kernels) and AOT autograd glues the two compiled callables into one
   `torch.autograd.Function`.

Eager semantics come from AOT autograd's runtime wrappers: mutated inputs (BatchNorm running statistics
in train mode) are written back with `copy_` after the forward, outputs that alias inputs are regenerated
as views of the inputs (outputs eager would not let the user change in place before the backward still
raise eager's errors: NOTE [In-place changes of joint outputs] in joint_outputs.py), `torch.no_grad()`
regions and `detach` inside the graph produce no gradient,
parameters with `requires_grad=False` get none, and `retain_graph=True` keeps the saved tensors for a
second backward. Double backward (`create_graph=True` through the graph, then a gradient of a gradient)
raises a RuntimeError naming the limitation (NOTE [Double backward]).

A signature whose joint cannot be built (tracing fails, a backend compiler raises) runs `gm` eagerly
from then on, logged once on `eager_fallback`. Nothing here imports torch._dynamo or calls torch.compile
(AOT autograd may use torch._dynamo utilities internally; framejit does not).

With a backend's `Persistence` and the cache on, a joint is stored once its backward has run and a later
JointGraph (another process) loads it instead of tracing (NOTE [Persisted joints] in joint_cache.py);
`STATS` counts joints traced, loaded and saved in this process.

`stats` counts forward and backward runs of compiled graphs (for tests: proof the backward ran in the
backend, with the backend's own counters); `compiled_forwards`/`compiled_backwards` keep what
`compile_fn` returned, per signature.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import operator
from typing import Callable

import torch
import torch.fx
import torch.utils._pytree as pytree

from ..grad_mode import grad_mode
from .. import config, fake_modes, logs
from .state import changes_default_dtype, keep_traced_dtypes, refuse_eager_only, switches_grad_on

# NOTE [Partition]
# The joint graph is partitioned with torch's min-cut rematerialisation partitioner: it starts from
# "save what the backward needs" and then recomputes cheap pointwise ops in the backward instead of
# saving their results where that lowers the bytes saved between the two graphs (a min cut over the
# joint graph, weighted by tensor sizes, with non-recomputable ops such as matmuls and random ops
# always saved). Where the min-cut partitioner fails on a graph, the default partitioner (save every
# forward value the backward reads) is used instead and that is logged.
# A backend may pass `partition_config`: torch._functorch.config values set while its joints are
# partitioned (onnxrt: NOTE [Recomputation for ORT programs] in onnxrt/training.py).
#
# NOTE [Grad switched on inside]
# A graph that turns grad mode on inside (`torch.enable_grad()` in a function called under no_grad) has
# outputs that need grad although the call starts with grad off; AOT autograd decides between its
# inference and its autograd path from the grad mode at the call, so such calls run eagerly (logged).
# With grad on at the call, the switches are `torch.no_grad()` regions (off, then back on), which AOT
# autograd traces as such: those calls run through the joint.
#
# NOTE [Double backward]
# The backward graph is traced once, ahead of time, as a graph of aten ops run with grad mode off; it
# has no autograd history of its own. A gradient of a gradient therefore cannot flow through it: AOT
# autograd raises "torch.compile with aot_autograd does not currently support double backward" when the
# second backward reaches the graph. `create_graph=True` on a first backward alone is allowed (the
# first-order gradients are correct, they just carry no history through this graph). Lean calls tie every
# input that requires grad to the backward's node, so a gradient of a gradient with respect to an input
# the forward did not save raises that error too (NOTE [Double backward through lean joints] in
# joint_function.py); the first call of a signature runs AOT autograd's wrappers, where such a gradient
# found no path to the input (None with allow_unused=True, as stock torch.compile gives on every call):
# a pre-hook ties it there (NOTE [Double backward on a signature's first call] in joint_function.py).


def needs_autograd(args, weights_require_grad: bool, grad_inside: bool = False) -> bool:
    """Autograd would record the call: grad mode is on (at the call, or switched on inside the graph)
    and an input or weight requires grad."""
    if not (torch._C.is_grad_enabled() or grad_inside):
        return False
    return weights_require_grad or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _partition(joint_module, joint_inputs, *, num_fwd_outputs, config: dict | None = None, written: tuple = (),
               eager_saved: dict | None = None, record: dict | None = None, **kwargs):
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    _save_random_values(joint_module)  # NOTE [Random values are saved, never recomputed]
    for attempt in range(_REPARTITIONS + 1):
        try:
            with torch._functorch.config.patch(**(config or {})):
                forward, backward = min_cut_rematerialization_partition(joint_module, joint_inputs,
                                                                        num_fwd_outputs=num_fwd_outputs, **kwargs)
        except Exception as exc:  # NOTE [Partition]
            logs.log("output_code", "joint: min-cut partition failed (%s: %s); saving every value the backward "
                     "reads", type(exc).__name__, exc)
            forward, backward = default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                                  **kwargs)
            break
        if eager_saved is None or attempt == _REPARTITIONS or \
                not _save_instead_of_inputs(joint_module, forward, backward, num_fwd_outputs, eager_saved):
            break  # NOTE [Inputs eager does not save stay unsaved]
    fold_identity_views(forward, first=num_fwd_outputs)  # NOTE [Identity views between the halves]
    fold_identity_views(backward)
    _save_clones_of_written_inputs(forward, num_fwd_outputs, written)
    if record is not None:  # NOTE [Inputs eager saves, checked where the joint does not] (joint_outputs.py)
        record["saved_inputs"], record["primals"] = _saved_inputs(forward, num_fwd_outputs)
    return forward, backward


def _saved_inputs(forward: torch.fx.GraphModule, num_fwd_outputs: int) -> tuple:
    """(the positions of the joint inputs the forward half saves, or views of which it saves; how many inputs)."""
    from .aliasing import is_view
    saved = {_input_index(node, is_view) for node in forward.graph.output_node().args[0][num_fwd_outputs:]}
    primals = sum(1 for node in forward.graph.find_nodes(op="placeholder") if node.name.startswith("primals_"))
    return frozenset(saved - {None}), primals


# NOTE [Inputs eager does not save stay unsaved]
# The min-cut partitioner may save an input to recompute a pointwise op from it in the backward instead of
# saving the op's result (onnxrt's NOTE [Recomputation for ORT programs] does so aggressively): for
# `(x * w).tanh().sum()` it saved x and the weight w and recomputed tanh, where eager's autograd saves x and
# tanh's result. Autograd checks the version of every saved tensor, so a write of w between the forward and
# the backward (`with torch.no_grad(): w.mul_(0.9)`: an EMA, weight clipping, an optimizer stepped early)
# made the backward raise "modified by an inplace operation" where eager trains. The fake run of NOTE
# [In-place changes of joint outputs] records which inputs eager's autograd saves (`eager_saved`, by
# storage, in AOT autograd's order). Where the partition saves any other input (or a view of one, which
# shares its version counter), the forward ops the backward recomputes from it are marked MUST_SAVE and the
# joint is partitioned again (at most _REPARTITIONS times): their results are saved instead, which nobody
# outside the graph can write. Inputs eager saves are left as they are, so eager's errors stay.
_REPARTITIONS = 3


def _save_instead_of_inputs(joint_module, forward, backward, num_fwd_outputs: int, eager_saved) -> int:
    """Marks MUST_SAVE the forward ops of `joint_module` the backward recomputes from saved inputs eager does
    not save; how many (NOTE [Inputs eager does not save stay unsaved])."""
    from torch.utils.checkpoint import CheckpointPolicy
    from .aliasing import is_view

    unsaved = [node.name for node in forward.graph.output_node().args[0][num_fwd_outputs:]
               if _input_index(node, is_view) not in (None, *eager_saved)]
    if not unsaved:
        return 0
    joint_nodes, after_tangents = {}, set()
    for node in joint_module.graph.nodes:
        joint_nodes[node.name] = node
        if (node.op == "placeholder" and node.name.startswith("tangents")) or \
                any(a in after_tangents for a in node.all_input_nodes):
            after_tangents.add(node)
    stack = [n for n in backward.graph.find_nodes(op="placeholder") if n.name in unsaved]
    marked, seen = 0, set(stack)
    while stack:
        for user in stack.pop().users:
            if user in seen:
                continue
            seen.add(user)
            if is_view(user) and user.target is not operator.getitem:
                stack.append(user)  # a view of the input has its version counter: save its users
                continue
            target = joint_nodes.get(user.name)
            if target is not None and target.op == "call_function" and target not in after_tangents and \
                    target.meta.get("recompute") != CheckpointPolicy.MUST_SAVE:
                target.meta["recompute"] = CheckpointPolicy.MUST_SAVE
                marked += 1
    if marked:
        logs.log("output_code", "joint: the partition saved %s, which eager does not save; %d ops they were read "
                 "by are saved instead (NOTE [Inputs eager does not save stay unsaved])", unsaved, marked)
    return marked


def _input_index(node, is_view) -> int | None:
    """The joint input a saved value is (or is a view of): its position, or None."""
    while isinstance(node, torch.fx.Node) and is_view(node) and node.target is not operator.getitem:
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder" or not node.name.startswith("primals_"):
        return None
    number = node.name[len("primals_"):]
    return int(number) - 1 if number.isdigit() else None


# NOTE [Inputs written in place are saved as their clone]
# An input that requires grad and that the graph writes in place (`h.mul_(w)` on an activation passed in)
# is cloned by AOT autograd at the start of the joint (`maybe_to_fresh_input`: every op of the traced
# forward reads the clone, never the input), and AOT autograd's runtime wrapper writes the new value back
# into the input with `copy_` after the forward, which bumps the input's version. Where the partitioner
# saved the input itself for the backward (mul's backward reads the old h), the backward then raised "one
# of the variables needed for gradient computation has been modified by an inplace operation" where eager,
# which saves the original value of an input written in place, succeeds (stock torch.compile with
# aot_eager raises too). The forward half saves AOT's clone instead: the same value, already computed,
# which nothing writes. Only for the inputs AOT autograd clones (`written`: data written outside the
# graph, requiring grad, read off its ViewAndMutationMeta by `partition_sees_mutations`): a user's own
# `x.clone()` of an input the graph never writes is no such clone, and there the saved input must stay,
# so that the user's write of x before the backward raises eager's error (review revJ HIGH-1).
def _save_clones_of_written_inputs(forward: torch.fx.GraphModule, num_fwd_outputs: int, written) -> int:
    primals = [n for n in forward.graph.find_nodes(op="placeholder") if n.name.startswith("primals_")]
    written_nodes = {primals[k] for k in written if k < len(primals) and primals[k].name == f"primals_{k + 1}"}
    if not written_nodes:
        return 0
    output = forward.graph.output_node()
    values = list(output.args[0])
    changed = 0
    for k in range(num_fwd_outputs, len(values)):
        node = values[k]
        if node not in written_nodes:
            continue
        clone = next((u for u in node.users if u.target is torch.ops.aten.clone.default and u.args == (node,)
                      and u.kwargs.get("memory_format") in (None, torch.preserve_format)), None)
        if clone is not None:
            values[k], changed = clone, changed + 1
    if changed:
        output.args = (tuple(values),)
        forward.recompile()
    return changed


@contextlib.contextmanager
def partition_sees_mutations():
    """While a joint is traced, framejit's `_partition` gets `written`: the indices of the joint's inputs that
    AOT autograd clones because the graph writes them (NOTE [Inputs written in place are saved as their
    clone]), from the metadata AOT autograd hands its partition step. Without that step (another torch),
    nothing is substituted: the input stays saved."""
    from torch._functorch._aot_autograd import graph_compile
    from .joint_cache import _AOT_LOCK

    original = getattr(graph_compile, "_partition_joint_graph_into_fw_bw", None)
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    if signature is None or not {"inner_meta", "partition_fn"} <= set(signature.parameters):
        yield
        return

    def partition(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        fn, meta = bound.arguments["partition_fn"], bound.arguments["inner_meta"]
        if isinstance(fn, functools.partial) and fn.func is _partition:
            bound.arguments["partition_fn"] = functools.partial(fn, written=_written_inputs(meta))
        return original(*bound.args, **bound.kwargs)

    with _AOT_LOCK:
        graph_compile._partition_joint_graph_into_fw_bw = partition
        try:
            yield
        finally:
            graph_compile._partition_joint_graph_into_fw_bw = original


def _written_inputs(meta) -> tuple:
    """The inputs AOT autograd's maybe_to_fresh_input clones: written outside the graph, data, requiring grad."""
    info = meta.input_info
    return tuple(k for k in meta.mutated_inp_runtime_indices
                 if k < len(info) and info[k].mutates_data and info[k].requires_grad)


# NOTE [Random values are saved, never recomputed]
# The min-cut partitioner bans recomputing only the random ops it lists (native_dropout, rand_like,
# randn_like); other ops are kept out of the backward by its allowlist, which `aggressive_recomputation`
# turns off (onnxrt's partition_config, NOTE [Recomputation for ORT programs]). Then `aten.rand` (drawn by
# F.fractional_max_pool2d for its samples, nn.FractionalMaxPool2d in train mode) was recomputed in the
# backward: new numbers, other pooling windows, gradients in the wrong places (1.0 off against eager,
# tools/nn_sweep.py). Every op tagged nondeterministic_seeded (rand, randn, bernoulli, normal, randint,
# randperm, ...) is marked MUST_SAVE before partitioning, whatever the config.
def _save_random_values(joint_module: torch.fx.GraphModule) -> int:
    from torch.utils.checkpoint import CheckpointPolicy

    marked = 0
    for node in joint_module.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in node.target.tags and "recompute" not in node.meta:
            node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            marked += 1
    return marked


# NOTE [Identity views between the halves]
# Linear layers leave chains of views that end where they started: the forward saves `t(t(w))` for the
# backward (the partitioner saves the transposed weight's transpose) and the backward returns each weight
# gradient as `t(t(mm))`. In a backend that runs views in torch between its programs (onnxrt), each is two
# Python op calls per step (52 in the zoo's moe backward). A returned chain of views whose result has its
# base's shape, strides and offset is the base itself: the forward's saved tensors (outputs from
# `num_fwd_outputs` on: only the backward reads them) and the backward's gradients return the base, when
# the base has its traced strides at run time (a graph input, or a contiguous value: see _keeps_its_layout).
# User outputs of the forward are left as they are (AOT autograd regenerates outputs that alias inputs).
# Likewise a returned `clone(y)` of a fresh intermediate y that nothing else returns is y (the zoo's gru_cell
# forward saved 32 clones, each a torch copy of an ORT output: 16 are of such y): the graphs are functional, so only
# aliasing could tell them apart, and y is seen by nobody else.
def fold_identity_views(graph_module: torch.fx.GraphModule, first: int = 0) -> int:
    """Outputs from index `first` on that are view chains equal to their base return the base, and needless
    clones their source; returns how many (NOTE [Identity views between the halves])."""
    from .aliasing import is_view

    output = next(n for n in reversed(graph_module.graph.nodes) if n.op == "output")
    values = list(output.args[0])
    folded = 0
    returned = {v for v in values if isinstance(v, torch.fx.Node)}
    for k in range(first, len(values)):
        node = values[k]
        if _needless_clone(node, returned):
            returned.add(node.args[0])
            values[k] = node.args[0]
            folded += 1
            continue
        if not isinstance(node, torch.fx.Node) or not is_view(node) or node.target is operator.getitem:
            continue
        base = node
        while is_view(base) and base.target is not operator.getitem:
            base = base.args[0]
        if _same_layout(node.meta.get("val"), base.meta.get("val")) and _keeps_its_layout(base):
            values[k] = base
            folded += 1
    if folded:
        output.args = (type(output.args[0])(values), *output.args[1:])
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return folded


def _needless_clone(node, returned: set) -> bool:
    """`node` is `clone(y)` of a fresh intermediate `y` (computed by a non-view op, returned by nothing
    else) with the clone's layout: in a functional graph nobody outside can tell y from its copy."""
    from .aliasing import is_view

    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or \
            node.target is not torch.ops.aten.clone.default or not isinstance(node.args[0], torch.fx.Node):
        return False
    source = node.args[0]
    if source.op != "call_function" or source in returned or is_view(source) or \
            (source.target is operator.getitem and is_view(source.args[0])):
        return False
    return _same_layout(node.meta.get("val"), source.meta.get("val")) and _keeps_its_layout(source)


def _keeps_its_layout(base: torch.fx.Node) -> bool:
    """`base`'s value at run time has its traced strides: a graph input (joints are built per input
    signature), or a contiguous value. A backend may return other values with other strides (ORT's
    outputs are contiguous; a torch op may not lay out its result as its meta kernel does), and other
    views the graph takes of an output then run on those strides (a transformers llama forward failed
    with `view` of a flash-attention output that had become an output)."""
    if base.op == "placeholder":
        return True
    val = base.meta.get("val")
    try:
        return isinstance(val, torch.Tensor) and val.is_contiguous()
    except Exception:
        return False


def _same_layout(a, b) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    try:
        return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and tuple(a.stride()) == tuple(b.stride())
                and a.storage_offset() == b.storage_offset())
    except Exception:  # symbolic sizes that cannot be compared here
        return False


def _signature(args, weights: list[torch.Tensor]) -> tuple:
    sig = [torch._C.is_grad_enabled()]
    for value in args:
        if isinstance(value, torch.Tensor):
            sig.append((value.dtype, tuple(value.shape), value.stride(), value.device, value.requires_grad,
                        value.is_leaf))
        else:
            sig.append((type(value), value))
    sig.append(tuple(w.requires_grad for w in weights))
    return tuple(sig)


_FAILED = object()


class _Counted:
    """A compiled graph whose runs are counted in `stats[key]`, called with AOT autograd's boxed
    convention (one list of arguments, which the callee clears so the inputs can be freed early)."""

    _boxed_call = True

    def __init__(self, compiled, stats: collections.Counter, key: str, after_first: Callable | None = None):
        self.compiled, self.stats, self.key = compiled, stats, key
        self.after_first = after_first  # NOTE [Persisted joints]: saved once the backward has run
        self.calls = 0  # this half's own runs (NOTE [Lean joint calls]: lean once the backward ran)

    def __call__(self, args: list):
        self.stats[self.key] += 1
        self.calls += 1
        values = list(args)
        args.clear()
        result = self.compiled(*values)
        if self.after_first is not None:
            after_first, self.after_first = self.after_first, None
            after_first()
        return result


# Process-wide counts of joints traced by AOT autograd, loaded from the persistent store (NOTE [Persisted
# joints] in joint_cache.py) and stored there; for tests and benchmarks.
STATS: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class Persistence:
    """How a backend persists the halves of its joints (NOTE [Persisted joints] in joint_cache.py):
    `version` names everything of the backend that changes what a half compiles to (revision, options);
    `save_half(compiled) -> bytes | None`; `load_half(data, gm) -> compiled` without compiling."""

    version: str
    save_half: Callable
    load_half: Callable


class JointGraph:
    def __init__(self, gm: torch.fx.GraphModule, compile_fn: Callable, backend_name: str,
                 inference: Callable | None = None, decompositions: dict | None = None,
                 partition_config: dict | None = None, lstm_layers: bool = False,
                 persistence: Persistence | None = None, lean: bool = False):
        self.gm, self.compile_fn, self.backend_name = gm, compile_fn, backend_name
        self.partition_config = partition_config  # NOTE [Partition]
        self.lstm_layers = lstm_layers  # NOTE [LSTM layers in training graphs] in recurrent.py
        self.inference = inference if inference is not None else gm.forward
        self.decompositions = decompositions
        self.grad_inside = switches_grad_on(gm)
        self.weights = list(gm.parameters()) + list(gm.buffers())
        self.joints: dict[tuple, object] = {}
        self.stats: collections.Counter = collections.Counter()
        self.compiled_forwards: list = []
        self.compiled_backwards: list = []
        self.persistence = persistence if config.cache_enabled else None
        self.lean = lean  # NOTE [Lean joint calls] in joint_function.py

    def needs_autograd(self, args) -> bool:
        return needs_autograd(args, any(w.requires_grad for w in self.weights), self.grad_inside)

    def __call__(self, *args):
        if not self.needs_autograd(args):
            return self.inference(*args)
        if self.grad_inside and not torch._C.is_grad_enabled():  # NOTE [Grad switched on inside]
            if not self.stats["grad_inside_logged"]:
                self.stats["grad_inside_logged"] = 1
                logs.log("eager_fallback", "%s: the graph turns grad mode on inside a call made with grad off; "
                         "it runs eagerly so that autograd records it", self.backend_name)
            return self.gm.forward(*args)
        sig = _signature(args, self.weights)
        joint = self.joints.get(sig)
        if joint is None:  # NOTE [Warnings of graph ops at compile time] (capture/op_warnings.py)
            quietly = getattr(self.gm, "compile_quietly", None)
            joint = self.joints[sig] = quietly(lambda: self._build(list(args))) if quietly else self._build(list(args))
        if joint is _FAILED:
            return self.gm.forward(*args)
        self.stats["joint_calls"] += 1
        return joint(args)

    def _compiler(self, kind: str, recorder=None, made: dict | None = None):
        def compile_graph(graph: torch.fx.GraphModule, example_inputs):
            if self.lstm_layers and kind == "forward":
                from .recurrent import keep_workspace
                keep_workspace(graph)  # NOTE [LSTM layers in training graphs]
            elif self.lstm_layers:
                from .recurrent import sized_workspaces
                example_inputs = sized_workspaces(graph, example_inputs)  # NOTE [The workspace's size]
            if changes_default_dtype(self.gm):  # NOTE [Default dtype in the lowered graph] (state.py)
                keep_traced_dtypes(graph)
            with grad_mode(False):
                compiled = self.compile_fn(graph, list(example_inputs))
            fake_modes.forget_modes_of(graph)  # AOT autograd's mode is done (NOTE [Traces leave no weak references])
            (self.compiled_forwards if kind == "forward" else self.compiled_backwards).append(compiled)
            logs.log("output_code", "joint (%s): %s graph with %d inputs:\n%s", self.backend_name, kind,
                     len(example_inputs), graph.code)
            after_first = None
            if recorder is not None:  # the backward may be compiled lazily, at the first backward
                recorder.halves[kind] = (graph, compiled)
                if kind == "backward" and recorder.key is not None:  # NOTE [Persisted joints]: the halves
                    after_first = functools.partial(self._save, recorder)  # build their programs on first use
            counted = _Counted(compiled, self.stats, kind, after_first)
            if made is not None:
                made[kind] = counted
            return counted
        return compile_graph

    def _build(self, args: list):
        from torch._functorch.aot_autograd import aot_module_simplified

        try:
            refuse_eager_only(self.gm)  # NOTE [Calls that run as torch runs them] in state.py: before any fake run
            from .foreach import expand_foreach  # NOTE [Foreach expansion]: before AOT autograd traces them whole
            flat_gm, rebuild = _flat_outputs(self.gm)
            flat_gm = expand_foreach(flat_gm)
            checks, eager_saved = _output_checks(flat_gm, args, self.backend_name)  # NOTE [In-place changes ...]
            from .joint_outputs import with_saved_input_checks  # NOTE [Inputs eager saves, checked where ...]
            order = _accumulation_order(flat_gm, args)  # NOTE [Leaf gradients in eager's order]
            loaded, key = self._load(flat_gm, args)
            if loaded is not None:
                checks = with_saved_input_checks(checks, eager_saved, {}, len(_params_buffers(flat_gm)) + len(args))
                return _Joint(loaded, rebuild, self, getattr(loaded, "lean_parts", None) if self.lean else None,
                              checks, order, getattr(loaded, "boxed", None))
            from .recurrent import dropout_between_layers, keep_lstm_layers
            from .torch_methods import eager_dropout, original_api_functions, original_tensor_methods
            from .joint_cache import Recorder
            layers = keep_lstm_layers() if self.lstm_layers else contextlib.nullcontext()
            recorder = Recorder(key)  # also what NOTE [Lean joint calls] reads (key None: not persisted)
            made, record = {}, {}  # record: what the partition saved
            params_buffers = _params_buffers(flat_gm)  # what aot_module_simplified prepends to every call
            # NOTE [No donated buffers]
            # NOTE [Patched Tensor methods while lowering], [Patched torch functions while lowering], NOTE
            # [Dropout drawn as eager draws it]
            with original_tensor_methods(), original_api_functions(flat_gm), eager_dropout(), layers, \
                    dropout_between_layers(), ops_kept_whole(), recorder.recording(), \
                    torch._functorch.config.patch(donated_buffer=False), partition_sees_mutations():
                joint = aot_module_simplified(flat_gm, args, fw_compiler=self._compiler("forward", recorder, made),
                                              bw_compiler=self._compiler("backward", recorder, made),
                                              partition_fn=functools.partial(_partition, config=self.partition_config,
                                                                           eager_saved=eager_saved, record=record),
                                              decompositions=self.decompositions,
                                              keep_inference_input_mutations=keeps_input_mutations(flat_gm))
            STATS["traced"] += 1
            checks = with_saved_input_checks(checks, eager_saved, record, len(params_buffers) + len(args))
            flags = _runtime_flags()
        except Exception as exc:
            logs.log("eager_fallback", "%s: the training graph runs eagerly: building its forward and backward "
                     "graphs failed (%s: %s)", self.backend_name, type(exc).__name__, exc)
            return _FAILED

        def lean_parts():
            if recorder.aot is None or "forward" not in made or "backward" not in made:
                return None
            return made["forward"], made["backward"], recorder.aot, params_buffers, flags
        boxed = getattr(joint, "__wrapped__", None)  # NOTE [Leaf gradients in eager's order]
        return _Joint(joint, rebuild, self, lean_parts if self.lean else None, checks, order,
                      (boxed, params_buffers, recorder.aot) if boxed is not None else None)

    def _load(self, flat_gm: torch.fx.GraphModule, args: list) -> tuple:
        """(the joint loaded from the persistent store or None, the store key or None: NOTE [Persisted joints])."""
        if self.persistence is None:
            return None, None
        from . import joint_cache
        try:
            key = joint_cache.joint_key(flat_gm, args, self.persistence.version, self.decompositions,
                                        self.partition_config, self.lstm_layers)
            files = joint_cache.lookup(key)
        except Exception as exc:  # NotPersisted, or an input the key cannot describe: built as before
            logs.log("cache", "joint (%s) not persisted: %s", self.backend_name, exc)
            return None, None
        if files is None:
            return None, key
        try:
            loaded = joint_cache.load(files, flat_gm, args, self.decompositions, self.persistence.load_half,
                                      self._wrap_loaded)
        except Exception as exc:  # a stale or damaged entry is a miss, rebuilt and stored again
            logs.log("cache", "persisted joint (%s) not used: %s: %s", self.backend_name, type(exc).__name__, exc)
            return None, key
        STATS["loaded"] += 1
        return loaded, key

    def _wrap_loaded(self, kind: str, gm: torch.fx.GraphModule, compiled) -> _Counted:
        (self.compiled_forwards if kind == "forward" else self.compiled_backwards).append(compiled)
        return _Counted(compiled, self.stats, kind)

    def _save(self, recorder) -> None:
        from . import joint_cache
        try:
            if joint_cache.save(recorder, self.persistence.save_half, self.backend_name):
                STATS["saved"] += 1
        except Exception as exc:  # never reaches the user's program
            logs.log("cache", "joint (%s) not stored: %s: %s", self.backend_name, type(exc).__name__, exc)


# NOTE [No donated buffers]
# With torch._functorch.config.donated_buffer on (torch's default), AOT autograd lists saved tensors the
# backward may overwrite (`bw_donated_idxs`: inductor reuses their memory) and then refuses any backward with
# `retain_graph=True` or `create_graph=True` ("This backward function was compiled with non-empty donated
# buffers ..."), where eager allows it: framejit's onnxrt training failed so on the zoo's mlp when the first
# backward was a plain one and a later one retained the graph. framejit's backends never write into saved
# tensors, so joints are built with the option off (it is in the persisted key through torch._functorch's
# config only at build time; the key is taken before, so persisted joints are built the same way).
# NOTE [Writes under no_grad kept in the forward graph]
# An input that requires grad and is written in place only under `torch.no_grad()` inside the graph
# (`with torch.no_grad(): b.mul_(0.5)`, an EMA or a clamp of a weight) is, by AOT autograd's default, a
# mutation done outside the graph: its new value is one more output of the autograd.Function, a
# differentiable one (the input requires grad), whose backward hands the output's tangent straight to the
# input. Nobody uses that output, so autograd materialises a zero tangent and the input's `.grad` became a
# zero tensor where eager leaves None (the write is invisible to autograd); AdamW then decayed and stepped
# a weight eager skips (/tmp/hprog/adv_f5.py). Stock `aot_eager` and inductor pass
# `keep_inference_input_mutations=True`: such a write (and a buffer's data write) stays in the forward graph
# as a `copy_` into the input, the input is no output of the Function and gets no gradient from it. framejit
# passes it where the graph switches grad off somewhere inside (the only place such writes come from; a
# joint runs with grad on at the call), so other joints keep their lean calls (NOTE [Buffers written back]
# in joint_function.py). The backends lower the `copy_` into an input as any input write. A persisted joint
# is loaded with the same flag (joint_cache.load).
def keeps_input_mutations(flat_gm: torch.fx.GraphModule) -> bool:
    """NOTE [Writes under no_grad kept in the forward graph]: the graph has a no_grad or inference_mode region."""
    from torch.autograd.grad_mode import _enter_inference_mode
    return any(node.op == "call_function" and node.args and (
        (node.target is torch._C._set_grad_enabled and node.args[0] is False)
        or (node.target is _enter_inference_mode and node.args[0] is True)) for node in flat_gm.graph.nodes)


def _runtime_flags() -> tuple[bool, bool]:
    """(saved-tensor hooks disabled around the call, autocast disabled around the halves): what AOT autograd
    decides when it makes its runtime wrapper (NOTE [Lean joint calls]: either one keeps AOT's callable)."""
    from torch._functorch._aot_autograd import utils

    # AOT's _should_disable_saved_tensors_hooks, without its compiled-autograd exception (it reads a
    # torch._dynamo flag; framejit never enables compiled autograd): inlineable hooks keep AOT's callable
    hooks = utils.top_saved_tensors_hooks()
    return bool(utils.saved_tensors_hooks_are_inlineable(hooks)), bool(torch._C._is_any_autocast_enabled())


def _output_checks(flat_gm: torch.fx.GraphModule, args: list, backend_name: str) -> tuple:
    """joint_outputs.examine: (output checks, inputs eager saves), or (None, None) (logged) where the fake run
    fails: NOTE [In-place changes of joint outputs], NOTE [Inputs eager does not save stay unsaved]."""
    from .joint_outputs import examine
    try:
        return examine(flat_gm, args)
    except Exception as exc:
        logs.log("output_code", "joint (%s): outputs not checked for in-place changes (%s: %s)", backend_name,
                 type(exc).__name__, exc)
        return None, None


def _accumulation_order(flat_gm: torch.fx.GraphModule, args: list) -> tuple:
    from .joint_function import accumulation_order
    try:
        return accumulation_order(flat_gm, _params_buffers(flat_gm), args)
    except Exception as exc:  # the joint's node keeps its own order
        logs.log("output_code", "joint: no accumulation order (%s: %s)", type(exc).__name__, exc)
        return ()


def _params_buffers(flat_gm: torch.fx.GraphModule) -> list:
    """The weights aot_module_simplified passes before the call's arguments, in its order."""
    return [*dict(flat_gm.named_parameters(remove_duplicate=False)).values(),
            *dict(flat_gm.named_buffers(remove_duplicate=False)).values()]


class _Joint:
    """One signature's joint: AOT autograd's callable (`aot(*args)`) until the joint's backward has run once,
    then framejit's own autograd.Function where the joint allows it (NOTE [Lean joint calls])."""

    __slots__ = ("aot", "rebuild", "owner", "parts", "lean", "checks", "order", "boxed")

    def __init__(self, aot, rebuild, owner: "JointGraph", parts: Callable | None, checks=None, order=(),
                 boxed=None):
        from .joint_function import boxed_in_order

        self.aot, self.rebuild, self.owner, self.parts, self.lean = aot, rebuild, owner, parts, None
        self.checks = checks  # NOTE [In-place changes of joint outputs] (joint_outputs.py)
        self.order = order  # NOTE [Leaf gradients in eager's order] (joint_function.py)
        self.boxed = boxed_in_order(boxed, order)

    def __call__(self, args: tuple):
        lean = self.lean
        if lean is None and self.parts is not None:
            self._try_lean()
            lean = self.lean
        if lean is not None:
            outs = lean(args)
            if self.checks is not None and self.checks.views:  # lean calls save checked outputs themselves
                outs = self.checks(outs, versions=False, args=args)
            return self.rebuild(outs)
        outs = self.aot(*args) if self.boxed is None else self.boxed(args)
        if self.checks is not None:
            outs = self.checks(outs, args=args)
        from .joint_function import tie_double_backward
        tie_double_backward(outs, args, self.owner.weights)  # NOTE [Double backward on a signature's first call]
        return self.rebuild(outs)

    def _try_lean(self) -> None:
        parts = self.parts()
        if parts is None or not parts[1].calls:  # the backward has not run yet (AOT compiles it lazily)
            return
        self.parts = None
        from .joint_function import lean_call

        forward, backward, aot, params_buffers, (hooks_disabled, disable_amp) = parts
        try:
            lean = lean_call(aot, forward, backward, params_buffers, hooks_disabled=hooks_disabled,
                             disable_amp=disable_amp, checked_outputs=self.checks.saved if self.checks else (),
                             copied_outputs=tuple(k for k, _ in self.checks.reached_from) if self.checks else (),
                             described=self.checks.described if self.checks else {}, order=self.order)
        except Exception as exc:  # AOT autograd's callable stays
            lean = f"{type(exc).__name__}: {exc}"
        if isinstance(lean, str):
            logs.log("output_code", "joint (%s): AOT autograd's runtime wrappers stay: %s",
                     self.owner.backend_name, lean)
            return
        self.owner.stats["lean_joints"] += 1
        self.lean = lean


def _flat_outputs(gm: torch.fx.GraphModule):
    """A GraphModule sharing `gm`'s modules and weights whose output is the flat tuple of the tensors (and
    symbolic ints) `gm` returns, and a function that rebuilds `gm`'s output structure from it (constants
    such as None stay in the structure: AOT autograd wants a flat tuple of traced values)."""
    graph = torch.fx.Graph()
    value_map: dict = {}
    result = graph.graph_copy(gm.graph, value_map)
    leaves, spec = pytree.tree_flatten(result)
    traced = [k for k, leaf in enumerate(leaves) if isinstance(leaf, torch.fx.Node)]
    graph.output(tuple(leaves[k] for k in traced))
    flat = torch.fx.GraphModule(gm, graph)

    def rebuild(outputs):
        values = list(leaves)
        for k, value in zip(traced, outputs):
            values[k] = value
        return pytree.tree_unflatten(values, spec)
    if spec.type in (tuple, list) and len(traced) == len(leaves) == spec.num_children and \
            all(child.is_leaf() for child in spec.children()):
        return flat, spec.type  # a flat tuple or list of traced values: the same container of the outputs
    return flat, rebuild


# NOTE [Batch norm in training graphs]
# Batch norm in train mode is traced as `_native_batch_norm_legit_functional` (output, batch mean, rstd,
# new running mean and var). ONNX Runtime's BatchNormalization in training mode gave outputs off by more
# than 1.0 on a Linear+BatchNorm1d graph (torch 2.13, onnxscript's torchlib), so training graphs decompose
# it into mean/var/pointwise ops for every backend; the backward of the decomposition is plain aten too.
# Likewise `nll_loss_forward`: torchlib's translation returns a wrong `total_weight` (its second output,
# unused in inference but saved for `nll_loss_backward`, which divides by it), so the loss and its
# backward are decomposed as well (cross-entropy gradients were 15x eager's on the zoo's gpt_loss).
# Only ops whose decomposition returns every output with its original meaning may be listed: the
# decompositions apply below autograd, so the backward formula of the original op consumes them.
# `_scaled_dot_product_flash_attention_for_cpu`'s decomposition returns the attention weights where the op
# returns the logsumexp its backward needs (GPT-2's losses drifted by 1e-3 per step), so backends that
# cannot run that op exactly keep it in torch instead (onnxrt: NOTE [Flash attention in training]).


@functools.lru_cache(maxsize=None)
def training_decompositions(with_backward_ops: bool = False) -> dict:
    """Decompositions applied while tracing joint graphs: batch norm in train mode (NOTE [Batch norm in
    training graphs]) and, with `with_backward_ops`, torch._decomp's decompositions of the aten backward
    ops into plain aten ops (for backends that lower pointwise ops and reductions themselves: triton)."""
    from torch._decomp import decomposition_table, get_decompositions

    aten = torch.ops.aten
    table = get_decompositions([aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit,
                                aten.native_batch_norm, aten.native_batch_norm_backward,
                                aten.nll_loss_forward, aten.nll_loss_backward])
    if with_backward_ops:
        table.update({op: fn for op, fn in decomposition_table.items() if "backward" in op.name()})
        table.update(eager_exact_decompositions())
    from .reduced_cpu import keep_whole  # NOTE [Reduced-precision kernels kept whole on CPU]
    return keep_whole(table)


# NOTE [Decompositions that follow eager's kernels]
# torch._decomp's hardsigmoid_backward multiplies by the double 1.0 / 6.0; eager's CPU kernel by
# `one_sixth(1.0f / 6.0f)`, the float32 sixth, also for float64 tensors (eager's float64 gradient of
# F.hardsigmoid is 0.1666666716337204 at 0): float64 joints on triton and onnxrt were 5e-9 off eager. The entry
# here multiplies by the float32 sixth as eager does (the same number for float32 tensors).
def eager_exact_decompositions() -> dict:
    aten = torch.ops.aten
    one_sixth = float(torch.tensor(1.0 / 6.0, dtype=torch.float32))

    def hardsigmoid_backward(grad_output, self):
        inside = torch.logical_and(self > -3.0, self < 3.0)
        return torch.where(inside, grad_output * one_sixth, 0.0)
    return {aten.hardsigmoid_backward.default: hardsigmoid_backward}


# NOTE [Ops kept whole in joints]
# Some ops carry a Python decomposition registered at the Autograd key (`py_impl(DispatchKey.Autograd)` in
# torch/_decomp/decompositions.py), which AOT autograd's joint trace runs (it traces with the Python
# dispatcher on) whatever decompositions a backend asks for. Where that decomposition computes other values
# than eager's kernel, every joint computed them too. `multilabel_margin_loss_forward`'s differs for
# targets with entries after the -1 that ends them (nn.MultiLabelMarginLoss in train mode under onnxrt: 1.2-3.6
# off eager, tools/nn_sweep.py; torch 2.13 and 2.14). While a joint is traced, the ops listed here lose that
# Python kernel, so they stay one op whose backward is torch's own derivative (multilabel_margin_loss_backward);
# a backend that cannot run them runs them in torch (onnxrt: _NEVER_DECOMPOSED in onnxrt/lowering.py).
_KEPT_WHOLE_IN_JOINTS = ("multilabel_margin_loss_forward",)


@contextlib.contextmanager
def ops_kept_whole():
    """While tracing a joint: the ops of NOTE [Ops kept whole in joints] skip their Autograd-key decompositions."""
    autograd = torch._C.DispatchKey.Autograd
    removed = []
    for name in _KEPT_WHOLE_IN_JOINTS:
        op = getattr(torch.ops.aten, name).default
        kernel = op.py_kernels.pop(autograd, None)
        if kernel is not None:
            op._dispatch_cache.clear()
            removed.append((op, kernel))
    try:
        yield
    finally:
        for op, kernel in removed:
            op.py_kernels[autograd] = kernel
            op._dispatch_cache.clear()
