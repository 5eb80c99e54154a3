"""In-place changes of a joint's outputs made before its backward raise eager's errors (NOTE [In-place changes of joint outputs]).

`output_checks(flat_gm, args)` runs the joint's graph once with fake tensors and autograd on, as eager
would run it, and returns an `OutputChecks` (or None where no output needs one): called on a joint call's
flat outputs, it makes the outputs eager forbids to change in place forbid it again, and registers a
check on the joint's backward node for outputs whose storage eager's autograd saved.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from .. import logs

# NOTE [In-place changes of joint outputs]
# In eager, an output of the graph that is a view of an intermediate stays tied to it: an in-place change
# of the output bumps the version counter the intermediate shares with its views, so when a backward
# formula saved that intermediate (exp and tanh save their result, mm its inputs), the backward raises
# "one of the variables needed for gradient computation has been modified by an inplace operation". A
# joint's outputs are fresh tensors of the compiled forward (AOT autograd returns a view of an intermediate
# through aten._unsafe_view, which gives it a version counter of its own, or regenerates it from an
# intermediate the backward does not read), so the change went unnoticed: the backward ran on the values
# saved before it, or on the changed ones where storage was shared, without an error (stock torch.compile
# does the same). Likewise eager forbids, at the in-place call itself, changing an output of a function
# that returns several views (unbind, split, chunk: "This view is the output of a function that returns
# multiple views") and a view made in a `torch.no_grad()` region of a tensor that requires grad ("A view
# was created in no_grad mode and is being modified inplace with grad mode enabled").
# When a joint is built, the graph runs once with fake tensors and autograd on, as eager runs it. Outputs
# that alias no input (those alias inputs are regenerated as real views of them by AOT autograd and behave
# as eager already) are classified:
#   - storage saved by a node of eager's autograd graph: lean calls (joint_function.py) save such outputs
#     with the context, so autograd's own version check raises eager's error, at no cost per call in
#     Python; AOT autograd's callable (a signature's first call, joints lean calls do not serve) keeps
#     each such output's version counter (through `detach()`, which shares it) and a pre-hook on the
#     joint's backward node raises eager's RuntimeError when one moved since the forward (about 25 us
#     per call, measured loaded);
#   - an in-place change of it raises in eager (tried on the fake output): multiple views -> the compiled
#     output is returned as `unbind(0)[0]` of itself unsqueezed, a view of a function returning several;
#     a no_grad view -> a view made under no_grad of a detached alias that requires grad. Either raises
#     eager's error at the in-place call, and reads, gradients and aliasing with the joint's values are
#     unchanged.
# The compiled graph is one autograd node, so the saved-storage check runs on every backward through it,
# where eager raises only when the backward reaches the node that saved it (a backward through another
# output alone): a rarer difference, towards an error. A graph the fake run cannot handle gets no checks
# (logged on output_code).

_VERSION_ERROR = ("one of the variables needed for gradient computation has been modified by an inplace "
                  "operation: [{kind} {shape}], which is output {index} of the compiled graph, is at version "
                  "{now}; expected version {then} instead. Hint: an output of the compiled graph that eager "
                  "would save for the backward (or a view of it) was changed in place before the backward "
                  "(NOTE [In-place changes of joint outputs])")
_JOINT_NODES = ("CompiledFunctionBackward", "LeanJointBackward")


class OutputChecks:
    """What a joint call does to its flat outputs (NOTE [In-place changes of joint outputs])."""

    __slots__ = ("saved", "multiple_views", "no_grad_views", "views", "logged")

    def __init__(self, saved: tuple, multiple_views: tuple, no_grad_views: tuple):
        self.saved, self.multiple_views, self.no_grad_views = saved, multiple_views, no_grad_views
        self.views = bool(multiple_views or no_grad_views)
        self.logged = False

    def __call__(self, outs, versions: bool = True):
        """`outs` with the view kinds remade; with `versions`, a check of the saved outputs' versions on
        the joint's backward node (lean calls save those outputs with the context instead)."""
        outs = list(outs)
        for k in self.multiple_views:
            out = outs[k]
            if isinstance(out, torch.Tensor):
                outs[k] = out.unsqueeze(0).unbind(0)[0]
        for k in self.no_grad_views:
            out = outs[k]
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                base = out.detach().requires_grad_()
                with torch.no_grad():
                    outs[k] = base.view(base.shape)
        if versions and self.saved:
            watched = [(k, outs[k].detach(), outs[k]._version) for k in self.saved
                       if isinstance(outs[k], torch.Tensor)]
            node = _joint_node(outs)
            if node is not None:
                node.register_prehook(_version_check(watched))
            elif not self.logged:
                self.logged = True
                logs.log("output_code", "joint: no backward node found for the version checks of outputs %s",
                         list(self.saved))
        return outs


def _version_check(watched: list):
    def check(grad_outputs):
        for k, alias, then in watched:
            now = alias._version
            if now != then:
                raise RuntimeError(_VERSION_ERROR.format(kind=alias.type(), shape=list(alias.shape), index=k,
                                                         now=now, then=then))
        return None
    return check


def _joint_node(outs):
    """The joint's autograd node: the grad_fn of an output requiring grad or a few steps above it (an
    output regenerated as a view of an intermediate)."""
    frontier = [o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    for _ in range(4):
        following = []
        for node in frontier:
            if type(node).__name__ in _JOINT_NODES:
                return node
            following.extend(n for n, _ in node.next_functions if n is not None)
        frontier = following
    return None


def output_checks(flat_gm: torch.fx.GraphModule, args: list) -> OutputChecks | None:
    """Run `flat_gm` on fake copies of `args` and its weights with autograd on and classify its outputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    from .torch_methods import original_tensor_methods

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # tensor constants of the graph
    state = {**dict(flat_gm.named_parameters(remove_duplicate=False)),
             **dict(flat_gm.named_buffers(remove_duplicate=False))}
    with mode:
        fake_state = {name: mode.from_tensor(t) for name, t in state.items()}
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode, torch.enable_grad(), original_tensor_methods():
        outs = torch.func.functional_call(flat_gm, fake_state, tuple(fake_args))
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]

        def storage(t):
            return StorageWeakRef(t.untyped_storage())
        inputs = {storage(t) for t in [*fake_state.values(), *fake_args] if isinstance(t, torch.Tensor)}
        saved = set()
        seen = set()
        stack = [o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            values = []
            for name in dir(node):
                if name.startswith("_saved_"):
                    try:
                        values.append(getattr(node, name))
                    except Exception:  # a value autograd cannot unpack here
                        continue
            try:
                values.append(getattr(node, "saved_tensors", ()))
            except Exception:
                pass
            for value in pytree.tree_leaves(values):
                if isinstance(value, torch.Tensor):
                    saved.add(storage(value))
            stack.extend(n for n, _ in node.next_functions if n is not None)
        kept, multiple_views, no_grad_views = [], [], []
        for k, out in enumerate(outs):
            if not isinstance(out, torch.Tensor) or storage(out) in inputs:
                continue
            if storage(out) in saved:
                kept.append(k)
        for k, out in enumerate(outs):  # after the walk: a tried change rebases the output's history
            if not isinstance(out, torch.Tensor) or storage(out) in inputs or not out._is_view():
                continue
            try:
                out.copy_(out.detach().clone())
            except RuntimeError as exc:
                if "returns multiple views" in str(exc):
                    multiple_views.append(k)
                elif "no_grad mode" in str(exc):
                    no_grad_views.append(k)
                else:
                    logs.log("output_code", "joint: output %d cannot change in place in eager (%s); not "
                             "reproduced", k, str(exc).split(".")[0])
    if not (kept or multiple_views or no_grad_views):
        return None
    return OutputChecks(tuple(kept), tuple(multiple_views), tuple(no_grad_views))

