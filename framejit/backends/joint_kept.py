"""Outputs of one compiled call backwarded one after the other train as in eager (NOTE [Saved tensors kept for the
other outputs]).

`saving_sets(roots, saved_by)` (in the fake run) gives, per source of a joint, the nodes of eager's graph below
it that save tensors; `watch_backwards(node, slots, saving)` on each call of a joint with two or more sources
keeps the joint's saved tensors for the sources not yet backwarded and raises eager's error where eager would.
"""
from __future__ import annotations

import weakref

import torch

# NOTE [Saved tensors kept for the other outputs]
# A joint is one autograd node for all its outputs, and a backward without retain_graph frees its saved tensors:
# with `a, b = cf(x, y)` for `(x * x).sum(), (y * y).sum()`, `a.backward(); b.backward()` raised "Trying to
# backward through the graph a second time" where eager trains both (a's and b's nodes are different and each
# frees only its own). Eager raises only when the second backward reaches a node that saved tensors and that
# an earlier backward without retain_graph already ran. The fake run of NOTE [Inputs no backward reaches]
# records for each source (output, new value of a written input) the nodes of eager's graph below it that
# save tensors. On a joint with two or more sources, each call registers a pre-hook on the joint's node that
# sees which sources bring a gradient. The first backward through the node, of every source, costs nothing
# more. Otherwise the hook raises eager's error when a node that backward needs was freed by an earlier one
# without retain_graph (`_get_current_graph_task_keep_graph`); and when a backward without retain_graph leaves
# a source whose eager nodes are not freed, it keeps the joint's saved tensors (unpacked, detached, with their
# versions) on the node, whose class is swapped for a subclass of the same name whose `saved_tensors` returns
# them (the engine still frees the originals; AOT autograd's callable and lean calls both read
# `ctx.saved_tensors`). An in-place change of a kept tensor before the later backward raises autograd's words
# for a saved tensor without a node. The kept tensors live until the backward after which no source can run,
# or until the node dies with the call's outputs: the memory of retain_graph=True, paid only after a backward
# of some sources only. Not covered: a first backward of every source with retain_graph=False followed by one
# of an output whose eager nodes save nothing (eager trains it again; the joint raises autograd's error).
_TWICE = ("Trying to backward through the graph a second time (or directly access saved tensors after they have "
          "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
          "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
          "if you need to access saved tensors after calling backward.")



def saving_sets(roots: list, saved_by: dict) -> tuple:
    """((source, frozenset of indices of the nodes below it that save tensors), ...) for `roots` ((source,
    node), ...); `saved_by`: node -> the storages it saved (joint_outputs._saved_below), missing: none."""
    index: dict = {}
    found = []
    for source, root in roots:
        saving, seen, stack = set(), set(), [root]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if saved_by.get(node):
                saving.add(index.setdefault(node, len(index)))
            stack.extend(n for n, _ in node.next_functions if n is not None)
        found.append((source, frozenset(saving)))
    return tuple(found)


def watch_backwards(node, slots: dict, saving: dict) -> None:
    """NOTE [Saved tensors kept for the other outputs]: `slots` source -> the node's output number, `saving`
    source -> its eager nodes that save tensors."""
    everyone = len(slots)
    state = [frozenset(), False]  # eager's nodes freed so far, the first backward seen
    ref = weakref.ref(node)  # the hook, kept by the node, holding it would be a cycle through C++

    def pre(grad_outputs):
        got = [s for s, nr in slots.items() if nr < len(grad_outputs) and grad_outputs[nr] is not None]
        consumed, seen = state
        state[1] = True
        if not seen and len(got) == everyone:
            return None
        need = frozenset().union(*(saving[s] for s in got))
        if need & consumed:
            raise RuntimeError(_TWICE)
        if torch._C._autograd._get_current_graph_task_keep_graph():
            return None
        consumed = state[0] = consumed | need
        later = any(not (nodes & consumed) for nodes in saving.values())
        alive = ref()
        if alive is None:
            return None
        if later and alive.__dict__.get("_framejit_kept") is None:
            _keep(alive)
        elif not later:  # this backward is the last: the kept tensors go once it has read them
            alive.__dict__["_framejit_last"] = True
        return None
    node.register_prehook(pre)


def _keep(node) -> None:
    try:
        saved = node.saved_tensors
    except RuntimeError:  # already freed (a backward before this watch saw it): autograd's error stays
        return
    # detached (same storage and version counter): a saved output's grad_fn is this node, a cycle through C++
    node._framejit_kept = tuple((t.detach(), t._version) if isinstance(t, torch.Tensor) else (t, None)
                                for t in saved)
    cls = type(node)
    if getattr(cls, "_framejit_kept_class", None) is not cls:
        if "_framejit_kept_class" not in cls.__dict__:  # one subclass per joint's node class, freed with it
            cls._framejit_kept_class = type(cls.__name__, (cls,), {"saved_tensors": property(_saved_tensors),
                                                                   "__module__": cls.__module__})
        node.__class__ = cls._framejit_kept_class


def _saved_tensors(ctx):
    kept = ctx.__dict__.get("_framejit_kept")
    if kept is None:
        return super(type(ctx), ctx).saved_tensors
    if ctx.__dict__.pop("_framejit_last", False):
        del ctx._framejit_kept
    for t, then in kept:
        if then is not None and t._version != then:  # autograd's words for a saved tensor it cannot name
            from .joint_outputs import _EAGER_LEAF_ERROR, _eager_hint
            raise RuntimeError(_EAGER_LEAF_ERROR.format(kind=t.type(), shape=list(t.shape), now=t._version,
                                                        then=then, hint=_eager_hint()))
    return tuple(t for t, _ in kept)


# NOTE [A backward that raises partway through a joint]
# Not reproduced (issue 14): eager's backward that raises partway has already accumulated the gradients of the
# leaves its engine reached before the failing node, and framejit's joint is one node that runs whole or not at
# all. The error's type and message are eager's except under anomaly mode (below); what differs is the partial
# `.grad` left behind, and only where the raising point is inside a joint's eager graph with some of that
# graph's leaves accumulated before it in eager's order. Surveyed (onnxrt and triton, 3 calls each, lean calls
# and AOT autograd's callable; /tmp/hbw5/ln2.py, /tmp/hbw7/raise2.py):
#   Same partial `.grad` as eager:
#   - a custom autograd.Function whose backward raises, inside the compiled function (a graph break splits the
#     joint there, so each piece is a node of its own in eager's order), below it, or between two graphs;
#   - a tensor hook or a post-accumulate-grad hook of a leaf (a weight) that raises, on the first or the last
#     layer (NOTE [Leaf gradients in eager's order] runs the leaves' AccumulateGrad in eager's order);
#   - a hook on a joint's output that eager's backward reaches first (the output made last) that raises.
#   Different (every leaf of the joint keeps `.grad` None; leaves outside it as in eager):
#   - a version error on a tensor eager saved: a conv's weight written under no_grad between the forward and
#     the backward of conv -> tanh -> linear. Eager accumulates the linear layer's grads, then raises at
#     ConvolutionBackward; framejit's check (NOTE [Inputs eager saves, checked where the joint does not])
#     raises in the joint's pre-hook;
#   - a hook that raises on an output that eager's backward reaches after another output's leaves (`a, c =
#     cf(x)`, a made first, a hook on a raising, `(a + c).backward()`): eager has accumulated c's leaves;
#     the hook runs before the joint's node (NOTE [Hooks of outputs no backward reaches]);
#   - anomaly mode (`detect_anomaly(check_nan=True)`) with a NaN made inside the graph: the error names the
#     joint's node ("Function 'LeanJointBackward' returned nan values in its 1th output.", or
#     'CompiledFunctionBackward' on a signature's first call) where eager names its op's node
#     ('MulBackward0'), and the output number is the joint's; the check runs on the whole joint's gradients,
#     before any of its leaves is accumulated, where eager has accumulated those reached before its failing
#     node (`(x * w1).sqrt().sum() + (x * w3).sum()` with a 0 in x: eager has w3's, framejit none;
#     raise2.py p_anomaly_nan_after_a_leaf).
# A fix would need eager's engine order for the failing backward (the ready queue by sequence number,
# AccumulateGrad first, simulated on the fake run's graph), the joint's backward run anyway, None handed to
# every input the order reaches only after the failing node (with NOTE [Hooks of inputs no backward reaches]),
# and the error raised once the node's children ran (an engine callback).
