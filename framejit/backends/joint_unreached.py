"""Inputs that the backward of a joint's outputs does not reach keep a None gradient (NOTE [Inputs no backward
reaches]).

`gradient_edges(fakes)` (before the fake run's forward) and `partial_reach(...)` (after it) give, per input of
the joint, the outputs whose eager backward reaches it; `Unreached.register(outs, args)` on each call hooks the
joint's autograd node so that it hands no gradient to an input that no output with a gradient reaches.
"""
from __future__ import annotations

import weakref

import torch

from .. import logs

# NOTE [Inputs no backward reaches]
# A joint is one autograd node for all its outputs. With `a, b = cf(x, y)` for `(x * 2).sum(), (y * 3).sum()`,
# `a.backward()` runs the joint's node with b's gradient missing: autograd.Function materialises it as zeros,
# the backward half computes y's gradient from those zeros and y.grad became a zero tensor, where eager's
# backward never reaches y (None: an optimizer with weight decay or momentum then steps a weight eager
# skips), and torch.autograd.grad(a, (x, y), allow_unused=True) returned zeros for y where eager returns None.
# The fake run of NOTE [In-place changes of joint outputs] (joint_outputs.examine) sees eager's autograd
# graph: for each input requiring grad it records which sources reach its gradient edge (taken before the
# forward: an input the graph writes gets a new node): the graph's outputs, and the new values of inputs the
# graph writes with grad on (AOT autograd's Function returns those, and the program's later use of the input
# sends their gradient into the joint's node). Where some input is reached from some sources only, each call
# registers a post-hook on the joint's node (lean calls and AOT autograd's callable alike); the hook sees the
# node's incoming gradients before materialisation (None where none came) and replaces the gradient of each
# input that no source with a gradient reaches by None, as eager. The node still calls the input's next node
# with nothing: AccumulateGrad leaves `.grad` None, but the engine calls the input's tensor hooks and
# post-accumulate-grad hooks anyway, with None (eager does not call them at all); so an input with such hooks
# (seen at the backward) keeps the computed zeros, as before: its hooks run with zeros rather than fail on a
# None. Not covered (the joint's zeros stay, logged once): outputs that are views regenerated outside the
# node, joints whose node's inputs are not the call's tensors one for one (AOT autograd deduplicated them).
# Cost: only such joints pay, a node walk and a hook per call.


def gradient_edges(fakes: list) -> list:
    """(position, gradient edge) of the fake inputs that require grad, taken before the forward."""
    from torch.autograd.graph import get_gradient_edge
    edges = []
    for k, t in enumerate(fakes):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            try:
                edge = get_gradient_edge(t)
            except Exception:  # no edge: never matched, so never made None
                continue
            edges.append((k, (edge.node, edge.output_nr)))
    return edges


def partial_reach(edges: list, outs: list, written: list, n_weights: int) -> "Unreached | None":
    """The sources (outputs j >= 0, written inputs -1 - position) reaching each input of `edges`, where some
    input is reached from some but not all of them, and the inputs written with grad on (NOTE [Hooks added to a
    written input after the call]); None: neither, or the walk failed (logged).
    `written`: (position, fake) of the inputs written."""
    try:
        return _partial_reach(edges, outs, written, n_weights)
    except Exception as exc:  # the other checks of the fake run stay
        logs.log("output_code", "joint: inputs no output's backward reaches not found (%s: %s)", type(exc).__name__,
                 exc)
        return None


def _partial_reach(edges: list, outs: list, written: list, n_weights: int) -> "Unreached | None":
    roots = [(j, o.grad_fn) for j, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    before = {k: node for k, (node, _) in edges}
    written = [(k, t) for k, t in written if t.grad_fn is not None and t.grad_fn is not before.get(k)]
    roots += [(-1 - k, t.grad_fn) for k, t in written]
    by_edge: dict = {}
    for k, (node, nr) in edges:
        if node is not None:
            by_edge.setdefault((node, nr), []).append(k)
    reach: dict = {}
    for source, root in roots:
        for k in _inputs_below(root, by_edge):
            reach.setdefault(k, set()).add(source)
    every = {source for source, _ in roots}
    entries = tuple((k, tuple(sorted(sources))) for k, sources in sorted(reach.items()) if sources != every)
    hooked = tuple(k - n_weights for k, _ in written if k >= n_weights)
    return Unreached(n_weights, entries, hooked) if entries or hooked else None


def _inputs_below(root, by_edge: dict) -> set:
    found, seen, stack = set(), set(), [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for edge in node.next_functions:
            if edge[0] is None:
                continue
            found.update(by_edge.get(edge, ()))
            stack.append(edge[0])
    return found


class Unreached:
    """NOTE [Inputs no backward reaches]: ((input position, sources), ...) for a joint's inputs."""

    __slots__ = ("n_weights", "entries", "written", "logged")

    def __init__(self, n_weights: int, entries: tuple, written: tuple = ()):
        self.n_weights, self.entries, self.logged = n_weights, entries, False
        self.written = written  # NOTE [Hooks added to a written input after the call]: argument positions

    def register(self, outs, args) -> None:
        """Hook the joint's node of this call's flat outputs `outs` (for the call's `args`)."""
        from .joint_outputs import _joint_node
        node = _joint_node(outs)
        if self.written and node is not None:
            watch_written_hooks(node, [(k, args[k]) for k in self.written if k < len(args)])
        if not self.entries:
            return
        plan = self._plan(node, outs, args) if node is not None else None
        if plan is None:
            if not self.logged:
                self.logged = True
                logs.log("output_code", "joint: inputs no output's backward reaches may get zero gradients "
                         "(NOTE [Inputs no backward reaches])")
            return
        node.register_hook(_post_hook(plan))

    def _plan(self, node, outs, args) -> list | None:
        """[(node input index, {node output numbers}, weak reference to the input or None), ...]."""
        from .joint_function import _leaf_of
        n_weights, tensors = self.n_weights, [0] * (len(args) + 1)
        for k, a in enumerate(args):
            tensors[k + 1] = tensors[k] + isinstance(a, torch.Tensor)
        edges = node.next_functions
        if len(edges) != n_weights + tensors[-1]:
            return None
        numbers: dict = {}
        plan = []
        for k, sources in self.entries:
            nrs = set()
            for source in sources:
                nr = numbers.get(source)
                if nr is None:
                    nr = numbers[source] = self._number(source, node, outs, args)
                if nr is None:
                    return None
                nrs.add(nr)
            if k < n_weights:  # a weight: a leaf, from its AccumulateGrad (or the identity view before it)
                leaf = _leaf_of(edges[k][0])
                plan.append((k, nrs, weakref.ref(leaf) if leaf is not None else None))
            elif isinstance(args[k - n_weights], torch.Tensor):
                plan.append((n_weights + tensors[k - n_weights], nrs, weakref.ref(args[k - n_weights])))
        return plan

    def _number(self, source: int, node, outs, args) -> int | None:
        """The node's output number through which `source` gets its gradient, or None."""
        if source >= 0:
            out = outs[source] if source < len(outs) else None
            return out.output_nr if isinstance(out, torch.Tensor) and out.grad_fn is node else None
        value = args[-1 - source - self.n_weights] if -1 - source >= self.n_weights else None
        grad_fn = value.grad_fn if isinstance(value, torch.Tensor) else None
        return next((nr for n, nr in grad_fn.next_functions if n is node), None) if grad_fn is not None else None


def _post_hook(plan: list):
    def hook(grad_inputs, grad_outputs):
        got = {nr for nr, g in enumerate(grad_outputs) if g is not None}
        changed = None
        for q, nrs, ref in plan:
            if q >= len(grad_inputs) or grad_inputs[q] is None or nrs & got:
                continue
            value = ref() if ref is not None else None
            if value is not None and (value._backward_hooks or value._post_accumulate_grad_hooks):
                continue  # the engine would call them with None (eager: not at all); the zeros stay
            changed = list(grad_inputs) if changed is None else changed
            changed[q] = None
        return tuple(changed) if changed is not None else None
    return hook


# NOTE [Hooks added to a written input after the call]
# An activation the graph writes in place with grad on (`h.mul_(w)` in the graph, h computed before the
# call) has, in eager, the in-place op's node as its grad_fn after the call: a hook registered on h then
# (`h.register_hook`, `h.retain_grad()`) sees the gradient of h's new value, everything the backward sends
# it (the graph's own uses of the new value included). The joint computes that gradient inside its compiled
# backward, and after AOT autograd's write-back (`h.copy_(new)`) h's grad_fn is the copy's node, which only
# the program's later uses of h reach: the hook never ran (or saw a part of the gradient), `h.grad` stayed
# None, silently. Exposing that gradient means splitting the joint at the write; not done. Instead each call
# notes the hooks of such inputs (the keys of `_backward_hooks` and `retains_grad`) after the call, and a
# pre-hook on the joint's node raises a RuntimeError naming the input when one gained a hook or
# retain_grad since: register them before the call, or compile with backend="eager". Not when the node's
# gradients come in only through h's own new value (a backward of a later use of h alone): h's hooks ran
# on the copy's node with all of its gradient, as in eager. Coarser than eager otherwise: it raises on a
# backward through the graph's outputs (or another written input's new value) even where eager's would not
# reach h's new value (no hook would run there). Hooks registered before the call run as in eager.
_ADDED_HOOK = ("framejit: a {what} was added after the call to the compiled graph's argument {index} "
               "([{kind} {shape}]), which the graph changes in place: the compiled backward computes the "
               "gradient of its new value internally, so the {what} would not see it (NOTE [Hooks added to a "
               "written input after the call]). Register it before the call, or compile the function with "
               "backend=\"eager\".")


def watch_written_hooks(node, inputs: list) -> None:
    """NOTE [Hooks added to a written input after the call]: `inputs` ((argument position, tensor), ...) of one
    call, whose joint's node is `node`."""
    watched = [(k, weakref.ref(t), _hooks_of(t), _new_value_slots(node, t)) for k, t in inputs
               if isinstance(t, torch.Tensor) and t.requires_grad]
    if not watched:
        return

    def check(grad_outputs):
        got = {nr for nr, g in enumerate(grad_outputs) if g is not None}
        for k, ref, then, own in watched:
            t = ref()
            if t is None or got <= own:  # only t's own new value: t's hooks saw all its gradient
                continue
            now = _hooks_of(t)
            what = "tensor hook" if now[0] - then[0] else "retain_grad()" if now[1] and not then[1] else None
            if what is not None:
                raise RuntimeError(_ADDED_HOOK.format(what=what, index=k, kind=t.type(), shape=list(t.shape)))
        return None
    node.register_prehook(check)


def _new_value_slots(node, t) -> frozenset:
    """The output numbers of `node` through which the written input `t` gets the gradient of its new value
    (the edges to `node` of the write-back's copy node, t's grad_fn after the call)."""
    grad_fn = t.grad_fn
    return frozenset(nr for n, nr in grad_fn.next_functions if n is node) if grad_fn is not None else frozenset()


def _hooks_of(t) -> tuple:
    return frozenset(t._backward_hooks or ()), t.retains_grad
