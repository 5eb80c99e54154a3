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
# post-accumulate-grad hooks anyway, with None (eager does not call them at all): NOTE [Hooks of inputs no
# backward reaches] skips those calls. Not covered (the joint's zeros stay, logged once): outputs that are views regenerated outside the
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


def partial_reach(edges: list, outs: list, written: list, n_weights: int, saved_by: dict | None = None) \
        -> "Unreached | None":
    """The sources (outputs j >= 0, written inputs -1 - position) reaching each input of `edges`, where some
    input is reached from some but not all of them, and the inputs written with grad on (NOTE [Hooks added to a
    written input after the call]); None: neither, or the walk failed (logged).
    `written`: (position, fake) of the inputs written."""
    try:
        return _partial_reach(edges, outs, written, n_weights, saved_by or {})
    except Exception as exc:  # the other checks of the fake run stay
        logs.log("output_code", "joint: inputs no output's backward reaches not found (%s: %s)", type(exc).__name__,
                 exc)
        return None


def _partial_reach(edges: list, outs: list, written: list, n_weights: int, saved_by: dict) -> "Unreached | None":
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
    # NOTE [Hooks of outputs no backward reaches]: the outputs in the order eager's backward reaches them
    gated = tuple(j for j, _ in sorted(((j, -r._sequence_nr()) for j, r in roots if j >= 0), key=lambda e: e[1])) \
        if len(every) >= 2 else ()
    if not (entries or hooked or gated):
        return None
    unreached = Unreached(n_weights, entries, hooked, gated)
    if len(every) >= 2:  # NOTE [Saved tensors kept for the other outputs] (joint_kept.py)
        from .joint_kept import saving_sets
        unreached.saving = dict(saving_sets(roots, saved_by))
    return unreached


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

    __slots__ = ("n_weights", "entries", "written", "logged", "gated", "saving")

    def __init__(self, n_weights: int, entries: tuple, written: tuple = (), gated: tuple = ()):
        self.n_weights, self.entries, self.logged = n_weights, entries, False
        self.written = written  # NOTE [Hooks added to a written input after the call]: argument positions
        self.gated = gated  # NOTE [Hooks of outputs no backward reaches]: output positions, in eager's order
        self.saving: dict = {}  # NOTE [Saved tensors kept for the other outputs]: source -> eager's saving nodes

    def gate(self, outs) -> None:
        """NOTE [Hooks of outputs no backward reaches]: the final outputs `outs` of a call."""
        if self.gated:
            from .joint_outputs import _joint_node
            gate_output_hooks([outs[j] for j in self.gated if j < len(outs)], _joint_node(outs))

    def register(self, outs, args) -> None:
        """Hook the joint's node of this call's flat outputs `outs` (for the call's `args`)."""
        from .joint_outputs import _joint_node
        node = _joint_node(outs)
        if self.written and node is not None:
            watch_written_hooks(node, [(k, args[k]) for k in self.written if k < len(args)])
        if self.saving and node is not None:
            self._watch_backwards(node, outs, args)
        if not self.entries:
            return
        plan = self._plan(node, outs, args) if node is not None else None
        if plan is None:
            if not self.logged:
                self.logged = True
                logs.log("output_code", "joint: inputs no output's backward reaches may get zero gradients "
                         "(NOTE [Inputs no backward reaches])")
            return
        node.register_hook(_post_hook(plan, weakref.ref(node)))
        node.__dict__[_PLAN] = plan  # NOTE [Inputs of a joint a None of the user's reaches]

    def _watch_backwards(self, node, outs, args) -> None:
        """NOTE [Saved tensors kept for the other outputs] (joint_kept.py)."""
        from .joint_kept import watch_backwards
        slots = {source: self._number(source, node, outs, args) for source in self.saving}
        if None in slots.values():
            if not self.logged:
                self.logged = True
                logs.log("output_code", "joint: a source's slot not found; a backward of some outputs frees the "
                         "saved tensors of all (NOTE [Saved tensors kept for the other outputs])")
            return
        watch_backwards(node, slots, self.saving)

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


def _post_hook(plan: list, node_ref):
    from .user_none import note_edges, slot_reached

    def hook(grad_inputs, grad_outputs):
        got = {nr for nr, g in enumerate(grad_outputs) if g is not None}
        changed, walked = None, False
        for q, nrs, ref in plan:
            if q >= len(grad_inputs) or grad_inputs[q] is None or nrs & got:
                continue
            changed = list(grad_inputs) if changed is None else changed
            changed[q] = None
            node = node_ref()
            if node is not None and any(slot_reached(node, nr) for nr in nrs):
                note_edges([node.next_functions[q]])  # eager's None: runs above (NOTE [Nones the user's ...])
                continue
            walked = True
            value = ref() if ref is not None else None
            if value is not None:  # the engine calls its hooks with None (eager: not at all)
                skip_hooks_once(value)
            if node is not None:  # and the leaves' above it, also where it is gone (NOTE [A joint no gradient ...])
                skip_hooks_above([node.next_functions[q][0]])
        if walked:  # NOTE [A joint no gradient reaches]
            _HANDED_NONE[0] = torch._C._current_graph_task_id()
        return tuple(changed) if changed is not None else None
    return hook


# NOTE [A joint no gradient reaches]
# A joint whose node gets no gradient at all still runs when the engine reaches it: with `a, b = heads(x,
# trunk(x))`, b using only trunk's output, `a.backward()` makes heads' node hand trunk's output None (NOTE
# [Inputs no backward reaches]), and the engine runs trunk's node, with an undefined gradient, because it is
# an edge of heads' node. autograd.Function materialised zeros, trunk's backward half ran on them and its
# weights got zero `.grad` where eager's backward never reaches them (None; weight decay then stepped them).
# So a joint's node that gets no gradient hands none on: lean calls do not materialise gradients (the
# backward makes zeros only for the outputs without one when another has one, as autograd.Function did) and
# return None for every input at once; AOT autograd's callable gets a post-hook that replaces its gradients
# by None then (its backward ran on zeros). The engine then calls the hooks of the joint's leaves (tensor and
# post-accumulate-grad hooks) with None, which eager calls only where its own backward brought None (a custom
# Function returning None): so where a None framejit handed out reached the node (the walk of `skip_hooks_above`
# from the node that handed it, which starts at the post-hook of NOTE [Inputs no backward reaches], marks the
# joints' nodes it stops at with the graph task's id; a per-task flag dropped a custom Function's None in a
# backward where framejit also handed one, review revJ M1; a joint, node or hook a None of the user's also
# reaches runs as in eager: NOTE [Nones the user's backward sends], user_none.py), the hooks of the joint's
# non-leaf inputs (with tensor hooks then), and of the leaves above its inputs up to the next joints' nodes
# (through eager ops: `skip_hooks_above`), skip that None (`skip_hooks_once`; a leaf that also gets a gradient by another path
# gets its hooks called with it, as in eager). The post-hook of NOTE [Inputs no backward reaches] does the
# same above each non-leaf input it hands None (`z = body(x)` in eager, then `a, b = heads(x, z)` compiled,
# `a.backward()`: body's weights' hooks were called with None). The joint's non-leaf inputs are noted at each
# call (weakly), so that hooks registered on them after the call skip too. Hooks of non-leaf tensors further
# up (an eager op's output between two joints, `u.register_hook(lambda g: g.clamp(-1, 1))` on `u = ct(x).relu()
# * 2` feeding `cm(u + 1)`, no loss using cm's output: AttributeError on None.clamp, review revJ H2) are found
# through the hook dicts `Tensor.register_hook` noted (NOTE [Hooks of activations a None reaches], hook_dicts.py)
# and skip too, Python Function nodes there skip their backward and module backward hooks of eager modules
# there are not called (NOTE [Python Function nodes a None reaches]); what the engine does by running the C++
# nodes there stays (hook_dicts.py says what). Handing zeros
# instead (as before) calls such hooks with zeros, still where eager does not, and gives the leaves and joints
# above zero gradients where eager leaves None. Cost:
# lean calls, a check of the gradients per backward and of the non-weight inputs' hooks per call; AOT's
# callable, a pre-hook and a post-hook; a backward that hands such a None, a walk of the nodes above up to the
# next joints. The engine frees the node's saved tensors after it ran in a backward without retain_graph, where
# eager's nodes are not even reached: `a.backward(); b.backward()` on the example then raised "Trying to backward
# through the graph a second time" where eager trains trunk. So the node's saved tensors are kept (NOTE [Saved
# tensors kept for the other outputs], joint_kept.py, unless its watch already kept them), for the next
# backward that brings a gradient, which reads them once (a third backward after a retain_graph=True second
# one then raises that error where eager trains).
_HANDED_NONE = [-2]  # the id of the last graph task in which framejit handed an input None
_NONE_TASK = "_framejit_none_task"  # a joint node's: the graph task in which a None framejit handed out reached it


def hooked_inputs(args) -> tuple:
    """Weak references to the non-leaf tensors of `args` (NOTE [A joint no gradient reaches]): their hooks, also
    those registered after the call, skip a None framejit hands them (review revJ H2, p_hook_after_call)."""
    found = ()
    for a in args:
        if isinstance(a, torch.Tensor) and a.grad_fn is not None:
            found += (weakref.ref(a),)
    return found


def nothing_came(node, hooked: tuple) -> None:
    """NOTE [A joint no gradient reaches]: `node` got no gradient and hands none on; where framejit handed out the
    None, the hooks of its leaves and of `hooked` (hooked_inputs' result) skip the None they get next."""
    keep_unreached(node)
    skip_after_none(node, hooked)


def skip_after_none(node, hooked: tuple) -> None:
    """nothing_came's hooks part: only where a None framejit handed out reached `node` (skip_hooks_above marked it)
    and none of the user's did (NOTE [Nones the user's backward sends]: then its inputs get eager's None)."""
    from .user_none import joint_reached, note_edges
    if joint_reached(node):
        plan = node.__dict__.get(_PLAN)
        if plan is None:  # every input is reached from every output (or no plan: as if)
            note_edges(node.next_functions)
        else:
            _note_reached_inputs(node, plan)
        return
    if node.__dict__.get(_NONE_TASK) != torch._C._current_graph_task_id():
        return
    skip_hooks_above([f for f, _ in node.next_functions])
    for ref in hooked:
        t = ref()
        if t is not None and t._backward_hooks:
            skip_hooks_once(t)


# NOTE [Inputs of a joint a None of the user's reaches]
# A joint that gets no gradient at all, one of whose output slots a None of the user's reaches (`o1, o2 = cb(a,
# b)`, the loss takes o1 through a Function returning None for it, o2 unused), hands None to its inputs; eager's
# engine runs, with undefined gradients, what the reached output's history reaches (a's, above it a Python
# Function materialising zeros), never what only o2's does (b's). Noting every input edge as reached by the
# user's None (NOTE [Nones the user's backward sends]) ran b's side on zeros too: eb got zero `.grad` where eager
# leaves None, and AdamW's weight decay moved it (review revAA MED-2: eb's |sum| 4.384 vs eager's 4.564 after 4
# steps). Where the fake run found inputs reached from some outputs only (NOTE [Inputs no backward reaches]),
# each call notes that call's plan on the joint's node: only the inputs some reached slot reaches are noted;
# the others get framejit's None (their hooks and the Python nodes above skip it), as the post-hook of NOTE
# [Inputs no backward reaches] does where another output brings a gradient.
_PLAN = "_framejit_reach_plan"


def _note_reached_inputs(node, plan: list) -> None:
    from .user_none import note_edges, slot_reached
    edges = node.next_functions
    unreached = {q: ref for q, nrs, ref in plan
                 if q < len(edges) and not any(slot_reached(node, nr) for nr in nrs)}
    note_edges([e for q, e in enumerate(edges) if q not in unreached])
    if not unreached:
        return
    for ref in unreached.values():
        value = ref() if ref is not None else None
        if value is not None:
            skip_hooks_once(value)
    skip_hooks_above([edges[q][0] for q in unreached])
    _HANDED_NONE[0] = torch._C._current_graph_task_id()


def skip_hooks_above(nodes: list) -> None:
    """NOTE [A joint no gradient reaches]: the hooks of the leaves at or above `nodes` (up to the next joints'
    nodes, which skip their own) skip the None they get next."""
    from .hook_dicts import arm_node, hook_dicts
    from .joint_outputs import _JOINT_NODES
    from .node_hooks import walked
    from .user_none import key_of
    seen, stack = set(), list(nodes)
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            if leaf._backward_hooks or leaf._post_accumulate_grad_hooks:
                skip_hooks_once(leaf)
            continue
        for hooks in hook_dicts(node):  # NOTE [Hooks of activations a None reaches] (hook_dicts.py)
            skip_dict_once(hooks, key_of(node))
        if type(node).__name__ not in _JOINT_NODES:
            walked(node)  # NOTE [Node hooks a None reaches] (node_hooks.py)
            arm_node(node)  # NOTE [Python Function nodes a None reaches] (hook_dicts.py)
            stack.extend(f for f, _ in node.next_functions)
        else:  # the next joint: skips its own where it then gets no gradient at all (skip_after_none)
            node.__dict__[_NONE_TASK] = torch._C._current_graph_task_id()


def keep_unreached(node, last: bool = True) -> None:
    """NOTE [A joint no gradient reaches]: before the engine frees the saved tensors of `node`, which no gradient
    reached, in a backward without retain_graph, keep them for a later backward that brings one (joint_kept);
    `last`: read once, by the next backward that reads them."""
    if not torch._C._autograd._get_current_graph_task_keep_graph() and node.__dict__.get("_framejit_kept") is None:
        from .joint_kept import _keep
        _keep(node)
        if last and node.__dict__.get("_framejit_kept") is not None:
            node.__dict__["_framejit_last"] = True


def nothing_came_hook(node, hooked: tuple) -> None:
    """Hooks on AOT autograd's joint node `node` (NOTE [A joint no gradient reaches]): a pre-hook keeping the
    saved tensors and a post-hook handing None on, where no gradient came."""
    node_ref = weakref.ref(node)
    state = [False]  # whether the pre-hook kept the saved tensors

    def pre(grad_outputs):
        for g in grad_outputs:
            if g is not None:
                return None
        node = node_ref()
        if node is not None:  # AOT's backward, run on zeros, reads them now: read once by the next one
            state[0] = node.__dict__.get("_framejit_kept") is None
            keep_unreached(node, last=False)
        return None

    def post(grad_inputs, grad_outputs):
        for g in grad_outputs:
            if g is not None:
                return None
        node = node_ref()
        if node is not None:
            if state[0] and node.__dict__.get("_framejit_kept") is not None:
                node.__dict__["_framejit_last"] = True
            skip_after_none(node, hooked)
        return (None,) * len(grad_inputs)
    node.register_prehook(pre)
    node.register_hook(post)


# NOTE [Hooks of inputs no backward reaches]
# When the joint's node hands an input no gradient (NOTE [Inputs no backward reaches]), the engine still runs
# the input's next node (its AccumulateGrad, or the node of an activation passed in) with an undefined
# gradient, and calls the input's tensor hooks with None and a leaf's post-accumulate-grad hooks (`.grad`
# untouched); eager never reaches the input, so never calls them. Before, such inputs kept the joint's zero
# gradient so that hooks ran on a tensor (grad clipping by `p.register_hook(lambda g: g.clamp(-1, 1))` on a
# two-head model: the head no loss reached got zeros, AdamW's weight decay moved it; review revZ HIGH).
# Now they get None too, and the post-hook wraps each of the input's hooks (in its own hook dicts, in place)
# in a one-shot wrapper: the hook's next call puts the original back and is skipped when the gradient is None
# (a post-accumulate-grad hook: when the gradient that reached the tensor's hooks was None, seen by a
# one-shot tensor hook of ours registered last); with a gradient (the input is also used outside the graph)
# the original runs as in eager. A wrapper acts only in the graph task that set it up: a backward that never
# runs the node (it raised before, or autograd.grad's inputs stop above it) leaves it in place, and its next
# call, in a later backward, runs the hook as torch would, a None included (a custom Function returning None;
# review revN MED-3, p_c1).
# Cost: only a backward that leaves such an input without a gradient pays, per hook. Not covered: hooks of
# tensors further up an activation passed in (its history runs with undefined gradients below the joint).
_SKIP = "_framejit_skip_none_once"


def skip_hooks_once(t) -> None:
    """NOTE [Hooks of inputs no backward reaches]: `t`'s hooks skip their next call when it brings None."""
    from .user_none import key_of_tensor
    key = key_of_tensor(t)
    skip_dict_once(t._backward_hooks, key)
    post = t._post_accumulate_grad_hooks if t.is_leaf else None
    if post and not all(getattr(fn, _SKIP, False) for fn in post.values()):
        state = [False]  # whether the gradient that reached t's tensor hooks was None

        def seen(grad):
            handle.remove()
            state[0] = grad is None
        setattr(seen, _SKIP, True)  # never wrapped itself: a second call here leaves it alone
        handle = t.register_hook(seen)
        for k, fn in list(post.items()):
            if not getattr(fn, _SKIP, False):
                post[k] = _once(post, k, fn, state, key)


def skip_dict_once(hooks, node_key=None) -> None:
    """skip_hooks_once's part for the tensor hooks `hooks` (a tensor's `_backward_hooks`, or None) that the node of
    `node_key` (user_none.key_of's) calls."""
    if hooks:
        for key, fn in list(hooks.items()):
            if not getattr(fn, _SKIP, False) and not _group_of_all(fn):
                hooks[key] = _once(hooks, key, fn, None, node_key)


# NOTE [Multi-grad hooks over inputs no backward reaches]
# torch.autograd.graph.register_multi_grad_hook(tensors, fn) (mode "all") registers one inner hook per tensor;
# on its first call in a graph task it counts the tensors' nodes the engine will run
# (`_will_engine_execute_node`) and calls fn with the gradients (None for the others) once that many inner hooks
# ran. A leaf framejit hands None (NOTE [Hooks of inputs no backward reaches]) still has its node run: its
# inner hook is counted, so skipping its None call left fn never called, where eager calls it with
# [g1, None, g3] (review revJ H1). So inner hooks are left unwrapped (they get the None and store it, as the
# slot eager never fills), and the group's fn is wrapped once, in the closure's cell, to skip a call whose
# gradients are all None in a graph task where framejit handed out a None: a group none of whose tensors gets
# a gradient (all of an unreached module's weights), which eager never runs. Not covered: a group whose
# gradients are all None in eager too (custom Functions returning None) in such a graph task is skipped.
# Mode "any" keeps the wrapper of NOTE [Hooks of inputs no backward reaches] (eager runs it with the first
# gradient that comes, never with None).
_INNER_ALL = "register_multi_grad_hook.<locals>.get_inner_hook.<locals>.inner_hook"


def _group_of_all(fn) -> bool:
    """Whether `fn` is the inner hook of a mode "all" multi-grad hook (its group's fn now wrapped)."""
    if getattr(fn, "__qualname__", None) != _INNER_ALL:
        return False
    try:
        cell = fn.__closure__[fn.__code__.co_freevars.index("fn")]
        user = cell.cell_contents
    except (AttributeError, TypeError, ValueError, IndexError):
        return False
    if not getattr(user, _SKIP, False):
        cell.cell_contents = _group_fn(user)
    return True


def _group_fn(user):
    def group(grads):
        if all(g is None for g in grads) and _HANDED_NONE[0] == torch._C._current_graph_task_id():
            return None
        return user(grads)
    setattr(group, _SKIP, True)
    return group


def _once(hooks, key, fn, state, node_key=None):
    from .user_none import reached_key
    task = torch._C._current_graph_task_id()

    def skip(value):
        if hooks.get(key) is skip:
            hooks[key] = fn
        if task != torch._C._current_graph_task_id():  # left by the backward that set it up: as torch's
            return fn(value)
        if ((value is None) if state is None else state[0]) and (node_key is None or not reached_key(node_key)):
            return None  # (a None of the user's reaching the node too: eager calls it, NOTE [Nones the user's ...])
        return fn(value)
    setattr(skip, _SKIP, True)
    return skip


# NOTE [Hooks of outputs no backward reaches]
# A joint is one node for all its outputs: a hook on output b (`b.register_hook(fn)`, a tensor pre-hook of
# the joint's node for b's slot) was called with None whenever a backward of another output ran the node
# (`a, b = cf(x, y); b.register_hook(...); a.backward()`), where eager never reaches b's node: the user's
# hook failed on None.clone() (review revZ MED-2). On a joint with two or more sources (outputs, new values
# of written inputs), each call gives each output whose node is the joint's a hook of framejit's own (in the
# dict the node calls) and then a fresh, unregistered dict as `_backward_hooks`, where the user's
# `register_hook` puts its hooks: framejit's hook calls them in order, each with the gradient the previous
# returned, only when the gradient is not None; `retain_grad()` (run by the engine after every tensor hook)
# sees the result, as in eager. The node calls those hooks in the order they were registered: framejit's go in
# the order in which eager's backward reaches the outputs' nodes (the latest made first, from the fake run of
# NOTE [Inputs no backward reaches]), so the user's hooks of several outputs run in eager's order. Cost per call: a hook and a dict per such output (single-output joints pay
# nothing).
def gate_output_hooks(outs, node) -> None:
    from collections import OrderedDict
    if node is None:
        return
    for out in outs:
        if isinstance(out, torch.Tensor) and out.grad_fn is node:
            user = OrderedDict()
            hooks = out._backward_hooks
            if hooks is None:  # Tensor.register_hook's steps, without its handle
                hooks = out._backward_hooks = {}
                node._register_hook_dict(out)
            hooks[_GATE] = _gate(user)
            out._backward_hooks = user


_GATE = object()  # framejit's key in the dict the node calls


def _gate(user):
    def gate(grad):
        if grad is None or not user:
            return None
        for fn in list(user.values()):
            result = fn(grad)
            if result is not None:
                grad = result
        return grad
    return gate


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
