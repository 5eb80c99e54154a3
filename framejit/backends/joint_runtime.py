"""The lean runtime of a joint graph: one `torch.autograd.Function` over the two compiled halves.

`lean_runtime(meta, weights, forward, backward, grad_is_none)` returns a callable that runs a joint built by
backends/joint.py (called with the graph's user inputs, returning the forward graph's user outputs), or the
reason it cannot (NOTE [Lean joint runtime]). `meta` is AOT autograd's `ViewAndMutationMeta` of the compiled
forward, `weights` the lifted parameters and buffers (AOT autograd's order), `forward`/`backward` the
backend's compiled halves (boxed convention: one list of arguments), `grad_is_none[i]` whether the backward
graph returns no gradient for flat input i.
"""
from __future__ import annotations

import torch

# NOTE [Lean joint runtime]
# AOT autograd glues the compiled halves with general runtime wrappers: input mutations written back,
# outputs aliasing inputs or intermediates regenerated as views, effect tokens, functionalised RNG, tensor
# subclasses, autocast, compiled autograd, view replay. For the common joint that needs none of them they
# are overhead (zoo mlp, loaded machine, thread CPU time, 10th percentile of 400 calls outside a training
# loop: AOT autograd's joint call 47 us, this one 38 us, the compiled forward alone 27 us; in whole training
# steps the difference is within the noise, ~1%). A joint whose metadata shows none of them runs through
# `LeanFunction` instead, which
# does what AOT autograd's CompiledFunction does for such a joint and nothing else:
# - forward (autograd runs it with grad off): the compiled forward on weights + inputs; its outputs are the
#   user outputs, then the tensors saved for the backward (with and without version-counter check), then
#   saved symbolic ints. Saved views are detached (as AOT autograd does), outputs that do not require grad
#   are marked non-differentiable, and their gradients are not materialised.
# - non-leaf inputs requiring grad whose gradient the backward graph never produces are detached before the
#   call (AOT autograd's indices_of_inps_to_detach), so autograd does not connect the graph through them.
# - backward: the output gradients of the outputs the backward graph takes (requires_grad_for_backward) are
#   coerced to their traced memory format, saved tensors are released unless retain_graph, and the compiled
#   backward returns one gradient (or None) per flat input. Reading freed saved tensors raises autograd's
#   own "backward through the graph a second time" error, as on the old path.
# - double backward: with create_graph=True the backward runs inside `_BackwardOnce`, so first-order
#   gradients are right and a gradient of a gradient raises AOT autograd's error (NOTE [Double backward]).
# - the same checks as AOT autograd's backward prologue: not inside vmap/grad, and deterministic algorithms
#   not switched on after a trace that used nondeterministic ones.
# Anything else (a mutated input, an aliased, unsafe-view or non-tensor output, intermediate bases, effect
# tokens, functionalised or graph-safe RNG, opaque saved objects, subclasses, autocast at trace time, a grad
# mode change left by the graph, inputs deduplicated or merged into a synthetic base) keeps AOT autograd's
# runtime, which `lean_runtime` reports with the reason.


def ineligible(meta, num_flat_inputs: int, num_forward_placeholders: int, autocast: bool) -> str | None:
    """Why a joint with forward metadata `meta` needs AOT autograd's runtime wrappers, or None."""
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    checks = [
        (any(i.mutates_data or i.mutates_metadata for i in meta.input_info), "an input is mutated"),
        (any(o.output_type != OutputType.non_alias or not issubclass(o.raw_type, torch.Tensor)
             or o.dynamic_dims for o in meta.output_info), "an output aliases, or is not a plain tensor"),
        (meta.num_intermediate_bases or meta.num_mutated_inp_runtime_indices, "intermediate bases"),
        (meta.tokens or meta.num_backward_tokens, "effect tokens"),
        (meta.is_rng_op_functionalized or meta.num_graphsafe_rng_states, "functionalised RNG"),
        (meta.num_opaque_objects_saved_for_bw, "opaque objects saved for the backward"),
        (meta.grad_enabled_mutation is not None, "the graph leaves grad mode changed"),
        (meta.indices_of_inputs_that_requires_grad_with_mutations_in_bw, "mutations in the backward"),
        (not all(isinstance(m, PlainTensorMeta) for m in meta.subclass_tangent_meta), "tensor subclasses"),
        (num_forward_placeholders != num_flat_inputs, "inputs deduplicated or merged into a synthetic base"),
        (autocast, "autocast was on when traced"),
    ]
    return next((reason for failed, reason in checks if failed), None)


class _BackwardOnce(torch.autograd.Function):
    """Runs a compiled backward under create_graph=True: its results carry history that raises on a
    second backward (NOTE [Double backward] in joint.py)."""

    @staticmethod
    def forward(ctx, run, *args):
        return tuple(run())

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("torch.compile with aot_autograd does not currently support double backward")


def lean_runtime(meta, weights: list, forward, backward, grad_is_none: list[bool]):
    """The joint's call: weights + user inputs through `LeanFunction` (NOTE [Lean joint runtime])."""
    from torch._functorch._aot_autograd.runtime_wrappers import coerce_to_expected_memory_format

    num_outputs = meta.num_outputs
    saved_vc = meta.tensors_saved_for_backwards_with_vc_check_slice
    saved_no_vc = meta.tensors_saved_for_backwards_no_vc_check_slice
    saved_symints = meta.symints_saved_for_backwards_slice
    non_differentiable = [k for k, o in enumerate(meta.output_info) if not o.requires_grad]
    tangent_outputs = [k for k, o in enumerate(meta.output_info) if o.requires_grad_for_backward]
    tangent_formats = [m.memory_format for m in meta.subclass_tangent_meta]
    assert len(tangent_formats) == len(tangent_outputs), (tangent_formats, tangent_outputs)
    nondeterministic = meta.deterministic is not None and not meta.deterministic
    num_weights = len(weights)
    to_detach = [k - num_weights for k, info in enumerate(meta.input_info)
                 if grad_is_none[k] and info.requires_grad and not info.is_leaf and k >= num_weights]

    class LeanFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *flat):
            outs = forward(list(flat))
            ctx.save_for_backward(*[t.detach() if t._is_view() else t for t in outs[saved_vc]])
            ctx.saved_no_vc = [t.detach() if t._is_view() else t for t in outs[saved_no_vc]]
            ctx.symints = outs[saved_symints]
            user = tuple(outs[:num_outputs])
            if non_differentiable:
                ctx.mark_non_differentiable(*[user[k] for k in non_differentiable])
            ctx._materialize_non_diff_grads = False
            return user

        @staticmethod
        def backward(ctx, *grads):
            torch._check(torch._C._functorch.peek_interpreter_stack() is None, lambda: (
                "It looks like you're trying to call a compiled backward function within vmap/grad/vjp, "
                "which isn't supported."))
            if nondeterministic:
                torch._check(not torch.are_deterministic_algorithms_enabled(), lambda: (
                    "This compiled backward function is being run with torch.use_deterministic_algorithms(True), "
                    "but it was previously generated during the forward function while "
                    "torch.use_deterministic_algorithms(False) was set."))
            tangents = [grads[k] for k in tangent_outputs]
            for j, t in enumerate(tangents):
                if isinstance(t, torch.Tensor):
                    tangents[j] = coerce_to_expected_memory_format(t, tangent_formats[j])
            args = [*ctx.symints, *ctx.saved_tensors, *ctx.saved_no_vc, *tangents]
            ctx.maybe_clear_saved_tensors()
            if not torch._C._autograd._get_current_graph_task_keep_graph():
                ctx.saved_no_vc = None
            if torch.is_grad_enabled():  # create_graph=True: NOTE [Double backward]
                anchor = torch.empty(0, requires_grad=True)
                return _BackwardOnce.apply(lambda: backward(args), anchor)
            return tuple(backward(args))

    apply = LeanFunction.apply

    if not to_detach:
        return lambda *args: apply(*weights, *args)

    def call(*args):
        args = list(args)
        for k in to_detach:
            if isinstance(args[k], torch.Tensor):
                args[k] = args[k].detach()
        return apply(*weights, *args)
    return call
