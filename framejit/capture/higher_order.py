"""torch's higher-order functions that take Python callables, traced as the Python they stand for.

NOTE [Associative scan]: `torch._higher_order_ops.associative_scan(combine_fn, xs, dim, reverse,
combine_mode)` is what libraries call on their compile path (transformers' Mamba and FalconMamba
selective scan, when `is_torchdynamo_compiling()`). Its result is defined elementwise along `dim`:
out[0] = x[0], out[i] = combine_fn(out[i - 1], x[i]) (from the end when `reverse`), with combine_fn
applied to the slices at one position (the "generic" mode vmaps it over the scan dimension; the
"pointwise" mode, CUDA only, applies it elementwise). The substitute below computes exactly that, one
position after another: combine_fn is inlined per step on `x.select(dim, i)` and the results are
stacked along `dim`, so the scan becomes ordinary graph ops (as many steps as the dimension is long,
like the sequential loop such libraries run eagerly; the length is specialised: the steps walk a list of
the positions, not the range itself, which with a symbolic length would be a loop run as Python, NOTE
[Loops over symbolic ranges], a break that left the scan outside the graphs). An associative
combine_fn gives the real op's values up to floating-point reassociation, which the real op leaves
unspecified too. Anything else (a pytree other than a tensor, tuple or list of tensors, arguments the
real op rejects) is a graph break, so the real function runs and raises its own errors.

NOTE [Activation checkpointing]: `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False,
**kwargs)` returns `fn(*args, **kwargs)` and gives the same gradients: the non-reentrant variant only
changes *when* the activations are computed (again, during backward, under the RNG state of the first
run, so dropout masks are equal). transformers' gradient checkpointing (`gradient_checkpointing_enable()`,
whose default is `use_reentrant=False`) calls it for every layer in train mode. The substitute below
inlines `fn` into the graph, so the graph keeps every layer; what it gives up is the memory saving (the
graph's autograd keeps the activations, as it does for any layer). `checkpoint_sequential(...,
use_reentrant=False)` is inlined as written (it calls `checkpoint` per segment). Anything else stays a
graph break, so torch's own code runs, with `fn` called through its frame hook so that its body is still
captured (NOTE [Reentrant checkpoint at a break] in hook.py): a missing `use_reentrant` (torch warns at the
caller's line and picks the reentrant one), a `context_fn`, and `debug=True`; the break's logged reason names
which (modules.disabled_reason). `use_reentrant=True` is traced apart (NOTE [Reentrant checkpoint in the graph]
in reentrant_checkpoint.py): torch's reentrant autograd Function applied in the graph to the traced `fn`.

NOTE [Checkpointed regions]: inlining alone would give up the memory saving the user asked for (the
graph's autograd would keep every activation of every layer, and a model that fits only with gradient
checkpointing would run out of memory). So the nodes that the inlined `fn` added are tagged with a region
number (`meta["fj_checkpoint"]`), and when the GraphModule is built, `checkpoint_regions(gm)` moves each
region whose outputs require grad into a submodule called through `torch.utils.checkpoint.checkpoint(...,
use_reentrant=False)`: its inputs are the values the region reads from before it, its outputs the values
used after it. Autograd then saves only the region's inputs and recomputes the rest during backward, as
eager does (RNG state preserved, so dropout masks are equal). Only the inputs that require grad are
checkpoint's arguments; the others (buffers such as BatchNorm's running statistics, masks) reach the region
through the wrapper's closure, as a layer's buffers reach `fn` in eager: checkpoint saves its arguments with
their versions, and a buffer the region updates in place (`num_batches_tracked.add_(1)`) would fail that
check on recomputation, where eager reads it as module state. A region that does not need grad stays
inlined (checkpoint changes nothing there, and backends lower it as usual); a region whose nodes are not
contiguous (something else was inserted among them) stays inlined too, which is correct but keeps the
activations. Such graphs call a submodule, persisted as its region's graph (NOTE [Persisted checkpointed
regions] in frame_cache.py).

NOTE [Checkpointed Python effects]: eager's non-reentrant checkpoint calls `fn` again during backward,
so the Python effects of `fn` happen twice: `def blk(x): log.append("run"); return torch.sin(x) * 2` logs
"run" on the forward and again on `loss.backward()`. The traced region recomputes only the graph's ops, so
a replayed effect happened once (a log of 1 where eager has 2). A checkpointed call whose inlining recorded
an effect on state outside the trace (a container, attribute, global or cell store, a Python random draw:
side_effects.version, less in-place tensor ops, which the region's recomputation repeats as eager's does) is
a graph break instead: torch's checkpoint runs, `fn` through its frame hook, and calls it again in backward.
"""
from __future__ import annotations

import torch

from .modules import graph_break


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    single = isinstance(xs, torch.Tensor)
    leaves = [xs] if single else list(xs) if type(xs) in (tuple, list) else []
    if not leaves or not all(isinstance(x, torch.Tensor) for x in leaves):
        graph_break("associative_scan over something other than a tensor, tuple or list of tensors")
    if not callable(combine_fn) or type(dim) is not int or type(reverse) is not bool \
            or combine_mode not in ("generic", "pointwise"):
        graph_break("associative_scan with arguments it rejects")
    ndim = leaves[0].ndim
    if not -ndim <= dim < ndim:
        graph_break("associative_scan with a dimension out of range")
    dim = dim + ndim if dim < 0 else dim
    length = leaves[0].shape[dim]
    for x in leaves:
        if x.ndim <= dim or x.shape[dim] != length or length == 0 or x.is_sparse:
            graph_break("associative_scan over leaves it rejects")
        if combine_mode == "pointwise" and x.device.type not in ("cuda", "xpu"):
            graph_break("associative_scan in pointwise mode off CUDA (the real op raises)")
    positions = list(range(length - 1, -1, -1) if reverse else range(length))  # NOTE [Associative scan]
    steps = []
    for i in positions:
        parts = [x.select(dim, i) for x in leaves]
        current = parts[0] if single else type(xs)(parts)
        steps.append(current if not steps else combine_fn(steps[-1], current))
    if reverse:
        steps.reverse()
    if single:
        return torch.stack(steps, dim)
    return type(xs)([torch.stack([step[k] for step in steps], dim) for k in range(len(leaves))])


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               early_stop=True, **kwargs):
    """torch.utils.checkpoint.checkpoint, non-reentrant, traced (NOTE [Activation checkpointing])."""
    from torch.utils.checkpoint import noop_context_fn
    if use_reentrant is not False:  # NOTE [Activation checkpointing]: True is traced apart (NOTE [Reentrant
        graph_break("torch.utils.checkpoint.checkpoint without use_reentrant (torch warns at the caller's line, "  # checkpoint in the graph])
                    "then runs the reentrant variant) runs torch's own code, its function compiled apart; "
                    "use_reentrant=True or False is captured in the graph")
    if context_fn not in (None, noop_context_fn) or debug is not False:
        graph_break("torch.utils.checkpoint.checkpoint with a context_fn or debug=True")
    kwargs.pop("preserve_rng_state", None)
    return function(*args, **kwargs)


def _checkpoint_sequential_handler(real):
    def handler(tx, args, kwargs):
        from .breaks import BreakKind, Unsupported
        from .values import UserFunctionValue
        reentrant = kwargs.get("use_reentrant", args[3] if len(args) > 3 else None)
        if reentrant is None or not reentrant.is_constant() or reentrant.as_constant() is not False:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "checkpoint_sequential other than use_reentrant=False")
        return tx.inline(UserFunctionValue(real), args, kwargs)  # calls `checkpoint` per segment
    return handler


_REGIONS = [0]


def _checkpoint_handler(tx, args, kwargs):
    """Inline `checkpoint` and tag the nodes `fn` added (NOTE [Checkpointed regions])."""
    from .breaks import BreakKind, Unsupported
    from .values import UserFunctionValue
    reentrant = kwargs.get("use_reentrant")
    if reentrant is not None and reentrant.is_constant() and reentrant.as_constant() is True:
        from .reentrant_checkpoint import call_reentrant  # NOTE [Reentrant checkpoint in the graph]
        return call_reentrant(tx, args, kwargs)
    context_fn = kwargs.get("context_fn")
    if context_fn is not None and not _no_context(context_fn):
        # NOTE [Checkpoint context functions]: decided here on the value, not by `context_fn not in (None,
        # noop_context_fn)` in the traced substitute, which compared a functools.partial (selective activation
        # checkpointing's create_selective_checkpoint_contexts) by `==` and broke with "comparison eq of
        # Constant(None) and PartialValue" instead of this reason
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.utils.checkpoint.checkpoint with a context_fn or "
                                                      "debug=True")
    options = _checkpoint_options(kwargs) + _early_stop_set_here(tx.output.side_effects)  # NOTE [Checkpoint options]
    if tx.output.__dict__.get("reentrant_depth") and not dict(options)["preserve_rng_state"]:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.utils.checkpoint.checkpoint with preserve_rng_state="
                                                      "False inside a reentrant checkpoint (NOTE [Checkpoint options])")
    if args:
        from .nonreentrant_cells import note
        note(tx, args[0])  # NOTE [Non-reentrant checkpoint over cells written later]
    graph, effects = tx.output.graph, tx.output.side_effects
    before, python_effects = set(graph.nodes), effects.version - effects.tensor_writes
    result = tx.inline(UserFunctionValue(checkpoint), args, kwargs)
    if effects.version - effects.tensor_writes != python_effects:  # NOTE [Checkpointed Python effects]
        raise Unsupported(BreakKind.SIDE_EFFECT, "a checkpointed function with effects on Python state (the "
                                                 "backward runs it again)")
    _REGIONS[0] += 1
    added = [n for n in graph.nodes if n not in before and n.op in ("call_function", "call_method", "call_module")]
    inner = {n.meta["fj_checkpoint_options"] for n in added if "fj_checkpoint_options" in n.meta}
    if inner and any(not dict(o)["preserve_rng_state"] for o in inner | {options}):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "nested torch.utils.checkpoint.checkpoint calls with "
                                                      "preserve_rng_state=False (their recomputations draw "
                                                      "random numbers in an order of their own)")
    for node in added:
        node.meta["fj_checkpoint"] = _REGIONS[0]  # an enclosing checkpoint retags its inner ones
        node.meta["fj_checkpoint_options"] = options
    return result


# NOTE [Checkpoint options]: the options of eager's non-reentrant checkpoint that change what it computes
# are passed on to the torch checkpoint that recomputes the region (_Checkpointed): preserve_rng_state=False
# makes the backward's recomputation draw new random numbers from the global generator (a new dropout mask,
# and the stream after backward advanced), early_stop decides where that recomputation stops (so how many
# numbers it draws), determinism_check is checked by torch. A lowering backend (onnxrt) runs a graph holding
# a region with preserve_rng_state=False as torch runs it (`_Checkpointed.fj_eager_only`, NOTE [Calls that run
# as torch runs them] in backends/state.py): its AOT joint saved the forward's mask. Torch's global early-stop
# override is read when the checkpoint is called: where the frame itself set it before the call (`with
# set_checkpoint_early_stop(False):` inside the compiled function), the region ran after the block had been
# undone, so it stopped early where eager's recomputation drew every random number (review revBC MED-1); the
# value the trace stored is kept with the options ("early_stop_global") and set around the region's torch
# checkpoint. They must be constants of the trace (guarded as
# any constant); an unknown determinism_check is a break, so that torch raises its own ValueError. Torch's
# global overrides (set_checkpoint_early_stop, set_checkpoint_debug_enabled) apply when the region runs, as
# in eager. Nested checkpoints are one region (the outer one); with preserve_rng_state=False on either, the
# order of eager's draws is not one region's, so that is a break. So is a non-reentrant one with
# preserve_rng_state=False inside a reentrant checkpoint's function (its nodes are the reentrant region's, which
# torch's CheckpointFunction recomputes with the forward's RNG state: the forward's mask again where eager's inner
# recomputation draws a new one; review revBC HIGH-2).
_OPTION_DEFAULTS = (("preserve_rng_state", True), ("early_stop", True), ("determinism_check", "default"))


def _checkpoint_options(kwargs) -> tuple:
    from torch.utils.checkpoint import _allowed_determinism_checks_to_fns
    from .breaks import BreakKind, Unsupported
    options = []
    for name, default in _OPTION_DEFAULTS:
        value = kwargs.get(name)
        if value is not None and not value.is_constant():
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.utils.checkpoint.checkpoint with a {name} "
                                                          "that is not a constant")
        options.append((name, default if value is None else value.as_constant()))
    if dict(options)["determinism_check"] not in _allowed_determinism_checks_to_fns:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.utils.checkpoint.checkpoint with a determinism_check "
                                                      "torch rejects")
    return tuple(options)


def _early_stop_set_here(effects) -> tuple:
    """(("early_stop_global", value),) where the frame stored torch's global early-stop override before the call
    (`with set_checkpoint_early_stop(False):` inside the frame), else () (NOTE [Checkpoint options])."""
    import torch.utils.checkpoint as torch_checkpoint
    from .breaks import BreakKind, Unsupported
    entry = effects.globals.get((id(torch_checkpoint.__dict__), "_enable_checkpoint_early_stop"))
    if entry is None:
        return ()
    if not entry[2].is_constant() or entry[2].as_constant() not in (None, True, False):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.utils.checkpoint.checkpoint under an early-stop "
                                                      "override that is not a constant")
    return (("early_stop_global", entry[2].as_constant()),)


def _no_context(value) -> bool:
    """`context_fn` given as None or torch's own noop_context_fn."""
    from torch.utils.checkpoint import noop_context_fn
    from .values import ConstantValue
    return isinstance(value, ConstantValue) and value.value is None or getattr(value, "obj", None) is noop_context_fn


# NOTE [Non-reentrant recomputation runs eagerly]: at a break (NOTE [Reentrant checkpoint at a break] in
# hook.py) the non-reentrant checkpoint reruns its function during backward and stops it, raising from its
# pack hook, once the last tensor it saves is recomputed: the Python effects before that point happen again,
# those after it do not (`log.append` calls around the ops of `fn` give [a, b, c, a, b] where the stop falls
# between b and c). A compiled frame replays its effects after its graph, which the stop leaves: so only the
# forward goes through the frame hook, and a recomputation calls the function itself, as eager does.
def checkpoint_at_break(hooked, function, args: tuple, kwargs: dict):
    """torch's `checkpoint(hooked, *args, **kwargs)`; non-reentrant: `function` itself recomputes."""
    from torch.utils.checkpoint import checkpoint as torch_checkpoint
    if kwargs.get("use_reentrant") is not False or hooked is function:
        return torch_checkpoint(hooked, *args, **kwargs)
    calls = [0]

    def run(*inner_args, **inner_kwargs):
        calls[0] += 1
        return (hooked if calls[0] == 1 else function)(*inner_args, **inner_kwargs)
    return torch_checkpoint(run, *args, **kwargs)


class _Checkpointed(torch.nn.Module):
    """A region of a graph run under non-reentrant activation checkpointing."""

    def __init__(self, region: torch.fx.GraphModule, grad_positions: tuple, options: tuple = ()) -> None:
        super().__init__()
        self.region = region
        self.grad_positions = grad_positions  # the inputs that require grad: checkpoint's own arguments
        self.options = options  # NOTE [Checkpoint options]
        if not dict(options).get("preserve_rng_state", True):  # NOTE [Calls that run as torch runs them]
            self.fj_eager_only = ("it holds a checkpointed region with preserve_rng_state=False, whose recomputation "
                                  "in backward draws new random numbers (NOTE [Checkpoint options])")

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint as torch_checkpoint, set_checkpoint_early_stop

        def run(*grad_args):
            full = list(args)
            for position, arg in zip(self.grad_positions, grad_args):
                full[position] = arg
            return self.region(*full)
        options = dict(self.options)
        if "early_stop_global" not in options:
            return torch_checkpoint(run, *[args[i] for i in self.grad_positions], use_reentrant=False, **options)
        with set_checkpoint_early_stop(options.pop("early_stop_global")):  # NOTE [Checkpoint options]
            return torch_checkpoint(run, *[args[i] for i in self.grad_positions], use_reentrant=False, **options)


def _requires_grad(node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.requires_grad


def checkpoint_regions(gm: torch.fx.GraphModule) -> None:
    """Move each tagged region whose outputs need grad into a checkpointed submodule
    (NOTE [Checkpointed regions])."""
    import operator
    regions: dict[int, list] = {}
    for node in gm.graph.nodes:
        if "fj_checkpoint" in node.meta:
            regions.setdefault(node.meta["fj_checkpoint"], []).append(node)
    if not regions:
        return
    changed = False
    for number, nodes in regions.items():
        members = set(nodes)
        order = list(gm.graph.nodes)
        start = order.index(nodes[0])
        if order[start:start + len(nodes)] != nodes:
            continue  # not contiguous: stays inlined
        inputs = []
        for node in nodes:
            for arg in node.all_input_nodes:
                if arg not in members and arg not in inputs:
                    inputs.append(arg)
        outputs = [n for n in nodes if any(user not in members for user in n.users)]
        if not outputs or not any(_requires_grad(n) for n in outputs):
            continue
        from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
        sub = new_graph()
        env = {}
        for arg in inputs:
            env[arg] = sub.placeholder(arg.name)
            env[arg].meta = dict(arg.meta)
        for node in nodes:
            env[node] = sub.node_copy(node, lambda n: env[n])
        sub.output(tuple(env[n] for n in outputs))
        name = f"fj_checkpoint_{number}"
        grad_positions = tuple(i for i, arg in enumerate(inputs) if _requires_grad(arg))
        gm.add_submodule(name, _Checkpointed(torch.fx.GraphModule(torch.nn.Module(), sub), grad_positions,
                                             nodes[0].meta.get("fj_checkpoint_options", ())))
        with gm.graph.inserting_before(nodes[0]):
            call = gm.graph.call_module(name, tuple(inputs))
            for index, node in enumerate(outputs):
                item = gm.graph.call_function(operator.getitem, (call, index))
                item.meta = {k: v for k, v in node.meta.items() if not k.startswith("fj_checkpoint")}
                node.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
        for node in reversed(nodes):
            gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()


def _register_handlers() -> None:
    from .builtins import BUILTIN_HANDLERS
    from .values import UserFunctionValue
    import torch.utils.checkpoint as torch_checkpoint
    BUILTIN_HANDLERS[torch_checkpoint.checkpoint] = _checkpoint_handler
    BUILTIN_HANDLERS[torch_checkpoint.checkpoint_sequential] = \
        _checkpoint_sequential_handler(torch_checkpoint.checkpoint_sequential)
    from . import vmap_capture
    vmap_capture.register()  # NOTE [vmap regions]
    from . import reentrant_checkpoint
    reentrant_checkpoint.register()  # NOTE [Reentrant checkpoint in the graph]
    from . import flex
    flex.register()  # NOTE [Flex attention in the graph]
    try:
        from torch._higher_order_ops.associative_scan import associative_scan as real  # imported by torch
    except ImportError:
        return
    BUILTIN_HANDLERS[real] = lambda tx, args, kwargs: tx.inline(UserFunctionValue(associative_scan), args, kwargs)


_register_handlers()
