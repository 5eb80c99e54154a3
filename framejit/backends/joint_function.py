"""A joint's two compiled halves called through framejit's own `torch.autograd.Function` (NOTE [Lean joint calls]).

`lean_call(aot, forward_half, backward_half, params_buffers)` returns a callable `run(args) -> list` doing
what AOT autograd's runtime wrappers do for the joint described by `aot` (the arguments AOT autograd gave
`_cache_autograd_info` while building it: backends/joint_cache.py's Recorder), or a string saying why the
joint is not one this module serves (the caller keeps AOT autograd's callable then).
"""
from __future__ import annotations

import operator
import weakref

import torch
from ..grad_mode import grad_mode

# NOTE [Lean joint calls]
# AOT autograd glues a joint's compiled forward and backward into an autograd.Function behind layers of
# runtime wrappers written for every case it supports (input mutations written back, outputs that alias
# inputs or intermediates regenerated as views, tensor subclasses, RNG state, effect tokens, donated
# buffers, lazy backward compilation, the first-call custom-op analysis). Per training step of the zoo's
# mlp on onnxrt they cost about as much as the forward ORT program itself (measured, thread CPU, loaded:
# JointGraph call 283 us around a forward half of 144 us; see h14e's report). For the common joint --
# no input mutated but buffers' data (NOTE [Buffers written back]), every output a fresh tensor (or a view
# of an intermediate hidden from autograd by aten._unsafe_view, as AOT autograd returns it), plain tensors
# only, no RNG state or tokens, no symbolic sizes saved, autocast off when built -- those wrappers reduce
# to: prepend the parameters, detach the inputs that never need gradients, call the forward half, save what
# the backward reads
# (views detached: Note [Detaching saved tensors in AOTAutograd]), mark outputs that need no gradient
# non-differentiable; in the backward, the vmap and deterministic-algorithm checks, the tangents in their
# traced memory format, the backward half, and for `create_graph=True` the same double-backward error.
# `lean_call` does exactly that and nothing else, with the same halves (joint._Counted) and the metadata
# AOT autograd recorded; any joint outside that case keeps AOT autograd's callable (`_reason` says why,
# logged once on `output_code`). It takes over after the joint's first backward has run through AOT
# autograd's callable (AOT compiles the backward half lazily at that point; persisted joints are saved
# then too). Saved tensors go through `ctx.save_for_backward` as in AOT autograd, so a second backward
# without `retain_graph` and an in-place change of a saved tensor raise autograd's own errors, and saved
# tensor hooks apply. onnxrt and triton joints use it (triton since issue 14's second pass: with halves that
# cost nothing, the wrappers outside them took 1118 -> 839 us per forward+backward of the zoo's mlp and
# 1342 -> 1206 us of its gpt, thread CPU, loaded machine; /tmp/h14tr/bench_wrap.py in h14tr's report).
# Not taken: torch's compiled autograd sees an opaque autograd.Function (AOT's has a
# `_compiled_autograd_key`); framejit does not use compiled autograd.

DOUBLE_BACKWARD = "torch.compile with aot_autograd does not currently support double backward"
_VMAP = ("It looks like you're trying to call a compiled backward function within vmap/grad/vjp, which isn't "
         "supported. Try wrapping vmap inside torch.compile, or skip compiling the backward function.")
_DETERMINISTIC = ("This compiled backward function is being run with torch.use_deterministic_algorithms(True), "
                  "but it was previously generated during the forward function while "
                  "torch.use_deterministic_algorithms(False) was set.")


# NOTE [Buffers written back]
# BatchNorm in train mode updates its running statistics (and num_batches_tracked): inputs of the joint that
# the forward graph mutates. AOT autograd's forward returns their new values first (before the outputs,
# non-differentiable) and its runtime wrapper writes them into the inputs with `copy_` after the Function
# ran (Tensor.copy_ on a leaf that does not require grad: one version bump, as eager's in-place update).
# lean_call does the same for inputs whose data alone is mutated and that are leaves not requiring grad
# (buffers); any other mutation (metadata, storage, a tensor requiring grad, a view) keeps AOT's wrappers.
def _reason(aot: dict, params_buffers: list, hooks_disabled: bool, disable_amp: bool) -> str | None:
    """Why the joint `aot` describes is not served by lean_call (None: it is)."""
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    meta = aot.get("fw_metadata")
    if meta is None:
        return "no AOT metadata"
    if aot.get("maybe_subclass_meta") is not None or aot.get("num_symints_saved_for_bw"):
        return "tensor subclasses or symbolic sizes saved for the backward"
    for wrapper in aot.get("wrappers", ()):
        if type(wrapper).__name__ not in ("AOTDedupeWrapper", "AOTSyntheticBaseWrapper") or \
                getattr(wrapper, "needs_post_compile", True):
            return f"AOT wrapper {type(wrapper).__name__} rewrites the arguments"
    if hooks_disabled or disable_amp:
        return "saved-tensor hooks disabled or autocast on when built"
    mutated = [meta.input_info[k] for k in meta.mutated_inp_runtime_indices]
    streams = meta.mutated_inp_stream_indices or ()
    if meta.mutated_graph_handled_indices or any(x is not None for x in streams) or \
            len(mutated) != sum(1 for i in meta.input_info if i.mutates_data or i.mutates_metadata) or any(
                not i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata or i.requires_grad
                or not i.is_leaf or i.mutation_inductor_storage_resize for i in mutated):
        return "an input is mutated other than a buffer's data (NOTE [Buffers written back])"
    if meta.num_intermediate_bases or meta.num_outputs_aliased or any(
            o.output_type not in (OutputType.non_alias, OutputType.unsafe_view_alias)
            or not issubclass(o.raw_type, torch.Tensor) for o in meta.output_info):
        return "an output aliases an input or an intermediate, or is not a tensor"
    if meta.num_forward_returns != len(mutated) + meta.num_outputs or meta.num_outputs_rng_offset or \
            meta.is_rng_op_functionalized or meta.num_graphsafe_rng_states or meta.tokens or meta.num_backward_tokens:
        return "RNG state or effect tokens"
    if meta.num_symints_saved_for_bw or meta.num_opaque_objects_saved_for_bw or meta.dynamic_saved_tensors_idxs \
            or meta.dynamic_outputs or meta.grad_enabled_mutation is not None:
        return "symbolic sizes, opaque objects or grad-mode changes"
    if meta.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
        return "inputs mutated in the backward"
    if not all(type(m) is PlainTensorMeta and m.memory_format is not None for m in meta.subclass_tangent_meta):
        return "tangents without a plain memory format"
    survivors = [o for o in meta.output_info if o.requires_grad_for_backward]
    if len(survivors) != len(meta.subclass_tangent_meta):
        return "tangent count differs"
    if len(params_buffers) > len(meta.input_info):
        return "more weights than inputs"
    return None


# NOTE [Double backward through lean joints]
# With create_graph=True, the backward of a lean joint runs inside LeanBackward, whose own backward raises
# AOT autograd's double-backward error. Its inputs were the saved tensors and the tangents only: a gradient
# of the first-order gradient with respect to a joint input the forward did not save (tanh(x + w) saves
# only its result) found no path to that input, so torch.autograd.grad(g, x) said "appears to not have been
# used in the graph" and with allow_unused=True returned None where eager returns the second derivative.
# The joint's inputs that require grad (known per signature) are also inputs of LeanBackward, so every
# gradient of a gradient through the joint reaches it and raises the clear error. Leaves are read from the
# node's edges (AccumulateGrad.variable) in such a backward only: nothing per call; a non-leaf input is held
# by the context (ctx.grad_inputs) as an empty clone of an empty as_strided view of it (its autograd history
# without its storage, so an activation from an earlier graph is not kept alive by this: about 10 us per
# such input and call).
def lean_call(aot: dict, forward_half, backward_half, params_buffers: list, *, hooks_disabled: bool,
              disable_amp: bool, checked_outputs: tuple = (), copied_outputs: tuple = (), described: dict = {},
              order: tuple = ()):
    """`run(args) -> list of outputs`, or a str (why not: NOTE [Lean joint calls])."""
    why = _reason(aot, params_buffers, hooks_disabled, disable_amp)
    if why is not None:
        return why
    plan = _LeanPlan(aot["fw_metadata"], aot, checked_outputs, copied_outputs)
    plan.n_weights = len(params_buffers)  # NOTE [A joint no gradient reaches] (joint_unreached.py)
    plan.described = {plan.n_mut + k: d for k, d in described.items()}  # NOTE [Eager's words for a changed ...]
    plan.referred = tuple(m for m, d in plan.described.items() if not d[3])  # named by their node at the backward

    class LeanJoint(torch.autograd.Function):  # its node is LeanJointBackward (joint_outputs._JOINT_NODES)
        forward = staticmethod(_lean_forward(plan, forward_half))
        backward = staticmethod(_lean_backward(plan, backward_half))

    return _lean_run(plan, LeanJoint.apply, list(params_buffers), order)


class _LeanPlan:
    """What a lean joint's calls read of AOT autograd's metadata, computed once per joint."""

    def __init__(self, meta, aot: dict, checked_outputs: tuple, copied_outputs: tuple):
        self.mutated = tuple(meta.mutated_inp_runtime_indices)  # NOTE [Buffers written back]
        n_mut = self.n_mut = len(self.mutated)
        self.n_returns = n_mut + meta.num_outputs
        self.vc_slice = meta.tensors_saved_for_backwards_with_vc_check_slice
        # NOTE [In-place changes of joint outputs] (joint_outputs.py): outputs whose storage eager saves are
        # saved too, so autograd's own version check raises eager's error when one changed in place
        self.checked = tuple(n_mut + k for k in checked_outputs)
        # NOTE [Checks where eager's backward reaches] (joint_outputs.py): such an output that the forward
        # also saves for the backward is returned as a copy, so the saved tensor stays as computed
        self.copied = tuple(n_mut + k for k in copied_outputs)
        self.no_vc_slice = meta.tensors_saved_for_backwards_no_vc_check_slice
        self.has_no_vc = bool(meta.num_tensors_saved_with_no_vc_check)
        # the Function returns the mutated inputs' new values first, then the outputs (as AOT autograd's)
        returns_meta = [meta.input_info[k] for k in self.mutated] + list(meta.output_info)
        self.non_diff = tuple(k for k, o in enumerate(returns_meta) if not o.requires_grad)
        # a view of an intermediate that aliases no other output is returned through aten._unsafe_view, which
        # hides the aliasing from autograd, as AOT autograd's forward does (Note [Intermediate Bases
        # Optimization])
        self.unsafe_views = tuple(n_mut + k for k in meta.unsafe_view_out_indices)
        self.survivors = tuple(n_mut + k for k, o in enumerate(meta.output_info) if o.requires_grad_for_backward)
        self.tangent_metas = list(meta.subclass_tangent_meta)
        self.formats = [m.memory_format for m in self.tangent_metas]
        self.tangent_descs = meta.traced_tangents_descs
        self.stack_traces = meta.tangent_source_stack_traces or ()
        self.compile_id = meta.compile_id_str
        self.check_deterministic = meta.deterministic is not None and not meta.deterministic
        self.inputs_require_grad = any(i.requires_grad for i in meta.input_info)
        # NOTE [Double backward through lean joints]
        self.grad_non_leaves = tuple(k for k, i in enumerate(meta.input_info) if i.requires_grad and not i.is_leaf)
        self.detach = tuple(aot.get("indices_of_inps_to_detach") or aot.get("_indices_of_inps_to_detach") or ())


def _lean_forward(plan: _LeanPlan, forward_half):
    """LeanJoint.forward: the forward half, then what AOT autograd's forward saves and marks."""
    from .joint_outputs import _same_storage as same_storage
    grad_non_leaves, copied, checked, non_diff = plan.grad_non_leaves, plan.copied, plan.checked, plan.non_diff
    vc_slice, no_vc_slice, has_no_vc = plan.vc_slice, plan.no_vc_slice, plan.has_no_vc
    unsafe_views, n_returns, n_weights = plan.unsafe_views, plan.n_returns, plan.n_weights
    unsafe_view = torch.ops.aten._unsafe_view
    from .joint_unreached import hooked_inputs
    from .user_none import watch

    def forward(ctx, *args):
        ctx.set_materialize_grads(False)  # NOTE [A joint no gradient reaches] (joint_unreached.py)
        watch(ctx)  # NOTE [Noting Nones only while a joint lives] (user_none.py)
        hooked = hooked_inputs(args[n_weights:])
        if hooked:
            ctx.hooked = hooked
        if grad_non_leaves:  # NOTE [Double backward through lean joints] (forward runs with grad mode off)
            with grad_mode(True):
                ctx.grad_inputs = [args[k].as_strided((0,), (1,)).clone() for k in grad_non_leaves]
        outs = forward_half(list(args))
        if not isinstance(outs, list):
            outs = list(outs) if isinstance(outs, tuple) else [outs]
        # Note [Detaching saved tensors in AOTAutograd]: saved views are saved detached
        if copied:
            kept = outs[vc_slice] + (outs[no_vc_slice] if has_no_vc else [])
            for k in copied:
                if any(same_storage(x, outs[k]) for x in kept):
                    outs[k] = outs[k].clone()
        saved = [x.detach() if x._is_view() else x for x in outs[vc_slice]]
        if has_no_vc:
            ctx._tensors_no_vc_check = [x.detach() if x._is_view() else x for x in outs[no_vc_slice]]
        for k in unsafe_views:
            outs[k] = unsafe_view(outs[k], outs[k].shape)
        if checked:
            ctx.n_saved = len(saved)
            saved += [outs[k] for k in checked]
            if plan.referred:  # NOTE [Eager's words for a changed saved output] (joint_outputs.py)
                ctx.refs = {m: weakref.ref(outs[m]) for m in plan.referred}
        ctx.save_for_backward(*saved)
        if non_diff:
            ctx.mark_non_differentiable(*[outs[k] for k in non_diff if isinstance(outs[k], torch.Tensor)])
        ctx._materialize_non_diff_grads = False
        return tuple(outs[:n_returns])
    return forward


class _LeanBackward(torch.autograd.Function):
    """A backward that ran with grad mode on (create_graph=True): its own gradient is an error."""

    @staticmethod
    def forward(double_ctx, impl, *unused):
        return impl()

    @staticmethod
    def backward(double_ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD)


def _tangent_maker(plan: _LeanPlan):
    """`tangents(ctx, grads) -> list`: the backward half's tangents from the node's gradients, as traced."""
    from torch._functorch._aot_autograd.runtime_wrappers import (AOTDispatchAutograd,
                                                                   coerce_to_expected_memory_format)
    process_tangent = AOTDispatchAutograd.process_runtime_tangent
    survivors, formats, tangent_metas = plan.survivors, plan.formats, plan.tangent_metas
    tangent_descs, stack_traces, compile_id = plan.tangent_descs, plan.stack_traces, plan.compile_id

    def tangents_of(ctx, grads) -> list:
        tangents = []
        for j, k in enumerate(survivors):
            t = grads[k]
            if t is None:  # materialised as autograd.Function does (NOTE [A joint no gradient reaches])
                meta = ctx._input_metadata[k]
                t = torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)
            if type(t) is torch.Tensor:
                t = coerce_to_expected_memory_format(t, formats[j])
            else:  # subclasses, non-tensors: AOT autograd's own handling
                t = process_tangent(t, tangent_metas[j], j, tangent_descs[j], compile_id,
                                    stack_traces[j] if stack_traces else None)[0]
            tangents.append(t)
        return tangents
    return tangents_of


def _lean_backward(plan: _LeanPlan, backward_half):
    """LeanJoint.backward: AOT autograd's checks, the tangents as traced, the backward half."""
    peek = torch._C._functorch.peek_interpreter_stack
    check_deterministic, checked, has_no_vc = plan.check_deterministic, plan.checked, plan.has_no_vc
    inputs_require_grad, grad_non_leaves = plan.inputs_require_grad, plan.grad_non_leaves
    tangents_of = _tangent_maker(plan)
    from .joint_outputs import eager_words
    from .joint_unreached import nothing_came

    def backward_impl(ctx, all_args):
        ctx.maybe_clear_saved_tensors()
        return tuple(backward_half(all_args))

    def backward(ctx, *grads):
        for g in grads:
            if g is not None:
                break
        else:  # NOTE [A joint no gradient reaches] (joint_unreached.py)
            nothing_came(ctx, getattr(ctx, "hooked", ()))
            return (None,) * len(ctx.next_functions)
        if peek() is not None:
            raise RuntimeError(_VMAP)
        if check_deterministic and torch.are_deterministic_algorithms_enabled():
            raise RuntimeError(_DETERMINISTIC)
        try:
            saved = ctx.saved_tensors
        except RuntimeError as exc:  # NOTE [Eager's words for a changed saved output] (joint_outputs.py)
            words = eager_words(exc, plan.described, getattr(ctx, "refs", {}))
            if words is None:
                raise
            raise words from None
        if checked:
            saved = saved[:ctx.n_saved]
        if has_no_vc:
            saved = (*saved, *ctx._tensors_no_vc_check)
        all_args = [*saved, *tangents_of(ctx, grads)]
        del saved, grads

        def impl(double_ctx=None):
            return backward_impl(ctx, all_args)
        if torch._C._is_key_in_tls("context") and (cc := torch._C._get_obj_in_tls("context")) is not None:
            impl = _partial(cc.run, impl)
        if torch._C.is_grad_enabled() and (inputs_require_grad or any(
                t.requires_grad for t in all_args if isinstance(t, torch.Tensor))):
            # NOTE [Double backward through lean joints]: the leaves from the node's edges
            leaves = [leaf for f, _ in ctx.next_functions if (leaf := _leaf_of(f)) is not None]
            args = [*all_args, *leaves, *(ctx.grad_inputs if grad_non_leaves else ())]
            if not any(t.requires_grad for t in args if isinstance(t, torch.Tensor)):
                args = [torch.empty(0, requires_grad=True), *args]
            return _LeanBackward.apply(impl, *args)
        return impl()
    return backward


def _lean_run(plan: _LeanPlan, apply, params: list, order: tuple = ()):
    """`run(args) -> list`: the weights prepended, inputs detached, view replay on, buffers written back."""
    mutated, n_mut, detach = plan.mutated, plan.n_mut, plan.detach
    is_view_replay_enabled, set_view_replay = torch._C._is_view_replay_enabled, torch._C._set_view_replay_enabled
    order = tuple(k for k in order if k not in detach)
    hooks, post_hooks = operator.attrgetter("_backward_hooks"), operator.attrgetter("_post_accumulate_grad_hooks")

    def run(args) -> list:
        full = [*params, *args]
        targets = [full[k] for k in mutated] if n_mut else None  # before any detach, as AOT autograd's
        for k in detach:
            if isinstance(full[k], torch.Tensor):
                full[k] = full[k].detach()
        if order:  # NOTE [Leaf gradients in eager's order]
            leaves = [full[k] for k in order]
            if any(map(hooks, leaves)) or any(map(post_hooks, leaves)):
                _route_in_order(full, order)
        replay = is_view_replay_enabled()
        try:
            if not replay:
                set_view_replay(True)
            outs = apply(*full)
        finally:
            if not replay:
                set_view_replay(False)
        if n_mut:  # NOTE [Buffers written back]
            for target, value in zip(targets, outs):
                target.copy_(value)
            return list(outs[n_mut:])
        return list(outs)
    return run


# NOTE [Leaf gradients in eager's order]
# A joint's node hands the gradients of all its leaf inputs (parameters) out at once, and the engine runs
# their AccumulateGrad nodes (equal priority) in the order of its heap, not in eager's order, where each
# leaf's gradient is accumulated as soon as the backward reaches its first use in the forward (so a layer's
# weights used last are accumulated first). Hooks see it: a hook on the first layer's weight that raises
# left every other `.grad` None where eager had accumulated them (review revC F3), and a hook reading
# another parameter's `.grad` or logging saw another order. So on a call where a leaf input requiring grad
# has a tensor hook or a post-accumulate-grad hook, each such leaf is passed through an identity view
# (`view_as`) created in the reverse of eager's order: the views' backward nodes get increasing sequence
# numbers, the engine runs the newest first, and each leaf's AccumulateGrad runs right after its view's
# node. `accumulation_order` reads eager's order off the graph: inputs by their first use, latest first;
# inputs of one op by argument position (linear's bias before its weight, as addmm's backward hands them
# out). Lean calls do it in _lean_run; AOT autograd's callable (a signature's first call, joints lean calls
# do not serve) is called through its boxed function with the weights prepended here (`boxed_in_order`),
# inputs it mutates not routed. Calls without hooks pay only the check (about 0.1 us per leaf). Not
# covered: hooks registered on a leaf's AccumulateGrad node directly; a leaf the graph writes in place
# (under no_grad) is not routed (the Function's write rebases the view's history), so it keeps the node's
# order; ties inside other ops than linear follow argument order (as eager's engine for conv).
_BIAS_FIRST = {"linear"}


def accumulation_order(gm: torch.fx.GraphModule, params_buffers: list, args: list) -> tuple:
    """Positions in `[*params_buffers, *args]` (args: `gm`'s placeholders) of the leaf tensors that require
    grad, in eager's accumulation order (NOTE [Leaf gradients in eager's order])."""
    full = [*params_buffers, *args]
    position = {name: k for k, name in enumerate([*dict(gm.named_parameters(remove_duplicate=False)),
                                                  *dict(gm.named_buffers(remove_duplicate=False))])}
    nodes = list(gm.graph.nodes)
    index = {node: k for k, node in enumerate(nodes)}
    placeholders = [node for node in nodes if node.op == "placeholder"]
    inputs = [(node, len(params_buffers) + j) for j, node in enumerate(placeholders)] + \
        [(node, position[node.target]) for node in nodes if node.op == "get_attr" and node.target in position]
    keys = []
    for node, k in inputs:
        value = full[k] if k < len(full) else None
        if not isinstance(value, torch.Tensor) or not value.is_leaf or not value.requires_grad or not node.users:
            continue
        user = min(node.users, key=index.__getitem__)
        operands = torch.utils._pytree.tree_leaves((user.args, user.kwargs))
        argpos = next((j for j, a in enumerate(operands) if a is node), 0)
        bias_first = getattr(user.target, "__name__", str(user.target)).split(".")[-1] in _BIAS_FIRST
        keys.append(((-index[user], -argpos if bias_first else argpos), k))
    return tuple(k for _, k in sorted(keys))


def boxed_in_order(boxed, order: tuple):
    """`call(args) -> outputs` running AOT autograd's callable with the leaves routed in eager's order on calls
    where one has hooks, or None (NOTE [Leaf gradients in eager's order]). `boxed` is (AOT autograd's boxed
    callable, the weights it prepends, the metadata it recorded); inputs it mutates are never routed."""
    if boxed is None or not order or boxed[2] is None or boxed[2].get("fw_metadata") is None:
        return None
    compiled, weights, meta = boxed[0], list(boxed[1]), boxed[2]["fw_metadata"]
    order = tuple(k for k in order if k < len(meta.input_info) and not meta.input_info[k].mutates_data
                  and not meta.input_info[k].mutates_metadata)
    if not order:
        return None
    hooks, post_hooks = operator.attrgetter("_backward_hooks"), operator.attrgetter("_post_accumulate_grad_hooks")

    def call(args):
        full = [*weights, *args]
        leaves = [full[k] for k in order]
        if any(map(hooks, leaves)) or any(map(post_hooks, leaves)):
            _route_in_order(full, order)
        return compiled(full)
    return call


def _leaf_of(node):
    """The leaf whose AccumulateGrad is `node`, or behind its identity view (NOTE [Leaf gradients in eager's
    order])."""
    if node is not None and not hasattr(node, "variable") and type(node).__name__ == "ViewBackward0":
        node = node.next_functions[0][0]
    return getattr(node, "variable", None) if node is not None else None


def _route_in_order(full: list, order: tuple) -> None:
    """NOTE [Leaf gradients in eager's order]: leaves replaced by identity views, the last accumulated first."""
    for k in reversed(order):
        t = full[k]
        if t.is_leaf and t.requires_grad:
            full[k] = t.view_as(t)


def _partial(fn, *args):
    import functools
    return functools.partial(fn, *args)


# NOTE [Double backward on a signature's first call]
# A signature's first call (and every call of a joint lean calls do not serve) runs AOT autograd's callable,
# whose backward node (CompiledFunctionBackward) has the saved tensors and the tangents as its only inputs
# when `create_graph=True`: a gradient of a gradient with respect to a joint input the forward did not save
# (tanh(x + w) saves only its result) found no path to it, and torch.autograd.grad(g, x, allow_unused=True)
# returned None where eager returns the second derivative (stock aot_eager too). On such calls a pre-hook on
# the joint's node ties each incoming gradient to the joint's inputs that require grad (`_Tied`, an
# identity whose own backward raises the double-backward error), in a create_graph backward only: the
# gradient then reaches those inputs through AOT's backward and raises its clear error, as lean calls do
# (NOTE [Double backward through lean joints]). A plain backward only runs the hook (grad mode off there).
# Leaves are held as they are; a non-leaf input as an empty clone of an empty view of it (its history, not
# its storage). Calls lean calls serve never pay this.
class _Tied(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, *inputs):
        return grad.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD)


def tie_double_backward(outs, args, weights) -> None:
    """NOTE [Double backward on a signature's first call]: `outs` of AOT autograd's callable for `args`; and
    the post-hook of NOTE [A joint no gradient reaches] (joint_unreached.py)."""
    from .joint_outputs import _joint_node

    inputs = [t for t in (*weights, *args) if isinstance(t, torch.Tensor) and t.requires_grad]
    node = _joint_node(outs) if inputs else None
    if node is None:
        return
    from .joint_unreached import hooked_inputs, nothing_came_hook
    from .user_none import watch
    watch(node)  # NOTE [Noting Nones only while a joint lives] (user_none.py)
    nothing_came_hook(node, hooked_inputs(args))  # NOTE [A joint no gradient reaches]
    with grad_mode(True):
        held = [t if t.is_leaf else t.as_strided((0,), (1,)).clone() for t in inputs]

    def tie(grads):
        if not torch._C.is_grad_enabled():
            return None
        return tuple(g if not isinstance(g, torch.Tensor) else _Tied.apply(g, *held) for g in grads)
    node.register_prehook(tie)
