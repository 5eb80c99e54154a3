"""Nodes a None of the user's reaches in a backward (NOTE [Nones the user's backward sends]).

`install()` (from hook_dicts.install) makes a wrapper of torch's BackwardCFunction.apply, which `watch(node)` (from
each joint call) puts on while a joint's node lives, so that a Python Function's backward returning None for an
input is noted; `reached(node)` / `slot_reached(node, nr)` say whether such a None (or one
eager's engine passes on from it) reaches the node, or a joint's output slot, in the current graph task.
"""
from __future__ import annotations

import threading
import weakref

import torch

# NOTE [Nones the user's backward sends]
# framejit hands None where eager's backward never reaches (NOTE [A joint no gradient reaches],
# joint_unreached.py), and skips what the engine then runs above with undefined gradients: Python Function nodes
# (NOTE [Python Function nodes a None reaches]), tensor hooks of activations and leaves. A None can also come
# from the user's code: a Function whose backward returns None for an input (`Decline.apply(a, b)` giving
# `(gr * b, None)`), a reentrant checkpoint whose block does not differentiate one tensor argument. Eager's engine
# runs b's history then, with undefined gradients through the C++ nodes, and a Python Function above
# materialises zeros (the eager layers above get zero `.grad`, AdamW's weight decay moves them; review revR
# HIGH-R1). A joint's node cannot tell that None on its output slot from a slot nothing reached, so such Nones
# are noted where they are made: a wrapper of BackwardCFunction.apply (the `apply` every Python Function's
# node inherits, which the engine calls; on while a joint lives: NOTE [Noting Nones only while a joint lives]), and a backward returning None for an input with a gradient edge
# notes the edge under the graph task. On a query (at the time a node runs, all Nones that reach it were
# made) the noted edges are walked down through C++ and Python nodes (eager's engine runs them all: C++ nodes
# pass undefined gradients on, or a zero gradient that a formula turns into undefined ones, as a module's
# BackwardHookFunction's zeros through a Linear, revN p_m9; a Python node materialises zeros), up to leaves and
# joints' nodes (only the slot is reached; a joint that hands None on for a reached slot notes its input
# edges in turn, `note_edges`: those eager's graph inside it connects to a reached slot, NOTE [Inputs of a joint
# a None of the user's reaches] in joint_unreached.py). A reached node or slot runs
# as in eager: no joint skips for it, no Python Function node is skipped, no hook of a reached tensor skips
# its None. A node reached by both a None of the user's and one of framejit's runs too (eager's engine runs it
# with undefined gradients). The state of a graph task is dropped by a callback at its end; a backward that
# raises runs no callback, so only the newest _MAX_TASKS graph tasks keep state (nested backwards, a reentrant
# checkpoint's inside the outer one, stay below it): before, each failed backward kept its noted nodes, their
# saved tensors and the graph above alive for good, in any program after one framejit.compile (review revAA
# MED-1: 30 of 30 batches skipped by a raising NaN-check hook stayed alive). Not covered: a C++
# node whose formula gives an undefined gradient for an input (no Python backward to note it). Cost: a check of
# the returned tuple per Python Function backward while a joint lives; the walk only where framejit would skip.
_ORIGINAL = [None]
_PENDING: dict[int, list] = {}  # graph task id -> [(node, output number), ...] noted, not yet walked
_REACHED: dict[int, set] = {}  # graph task id -> keys of nodes (and joint slots) reached
_MAX_TASKS = 4


def _state(task: int) -> list:
    pending = _PENDING.get(task)
    if pending is None:
        pending = _PENDING[task] = []
        _REACHED[task] = set()
        try:
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _drop(task))
        except Exception:  # no callback: dropped with the oldest below
            pass
        while len(_PENDING) > _MAX_TASKS:  # tasks of backwards that raised (no callback ran)
            _drop(min(_PENDING))
    return pending


def _drop(task: int) -> None:
    _PENDING.pop(task, None)
    _REACHED.pop(task, None)


def note_edges(edges) -> None:
    """`edges` ((node, output number), ...) get a None eager's engine sends them in this graph task."""
    task = torch._C._current_graph_task_id()
    if task < 0:
        return
    pending = _state(task)
    pending.extend(e for e in edges if e[0] is not None)


def _walk(task: int) -> set:
    from .joint_outputs import _JOINT_NODES
    reached, pending = _REACHED.get(task), _PENDING.get(task)
    if reached is None:
        return set()
    while pending:
        node, nr = pending.pop()
        key = key_of(node)
        if type(node).__name__ in _JOINT_NODES:
            reached.update(((key, nr), ("joint", key)))
            continue
        if key in reached:
            continue
        reached.add(key)
        if key[0] != "leaf":  # eager's engine runs what its edges reach too (a Python node on zeros, or Nones)
            pending.extend(e for e in node.next_functions if e[0] is not None)
    return reached


def key_of(node):
    """The key under which `node` (or, for a leaf's AccumulateGrad, its tensor) is noted. A joint's node
    whose class joint_kept swapped for its keeping subclass (NOTE [Saved tensors kept for the other outputs]
    in joint_kept.py) keeps the key of its own class: a walk that noted it before the swap (a later joint's
    edge, walked first) and the joint's own query after it name the same node (review revAC HIGH-1/2)."""
    leaf = getattr(node, "variable", None)
    if leaf is not None:
        return ("leaf", id(leaf))
    cls = type(node)
    if cls.__dict__.get("_framejit_kept_class") is None and getattr(cls, "_framejit_kept_class", None) is cls:
        cls = cls.__base__
    return (node._sequence_nr(), cls)


def key_of_tensor(t):
    """The key of the node that calls `t`'s tensor hooks."""
    return key_of(t.grad_fn) if t.grad_fn is not None else ("leaf", id(t))


def reached_key(key) -> bool:
    """Whether a None of the user's reaches the node of `key` (key_of's) in the current graph task."""
    task = torch._C._current_graph_task_id()
    return task in _PENDING and key in _walk(task)


def reached(node) -> bool:
    """Whether a None of the user's reaches `node` (a leaf's AccumulateGrad, a C++ or Python node) now."""
    return reached_key(key_of(node))


def slot_reached(node, nr: int) -> bool:
    """Whether a None of the user's reaches output slot `nr` of the joint's node `node` now."""
    return reached_key((key_of(node), nr))


def joint_reached(node) -> bool:
    """Whether a None of the user's reaches some output slot of the joint's node `node` now."""
    return reached_key(("joint", key_of(node)))


def _note_nones(node, result) -> None:
    from .joint_outputs import _JOINT_NODES
    if type(node).__name__ in _JOINT_NODES:  # framejit's own Nones (NOTE [A joint no gradient reaches])
        return
    grads = result if isinstance(result, tuple) else (result,)
    if all(g is not None for g in grads):
        return
    edges = [e for e in node.next_functions if e[0] is not None]
    wanted = [k for k, needed in enumerate(node.needs_input_grad) if needed]
    if len(wanted) != len(edges) or len(grads) < len(node.needs_input_grad):
        note_edges(edges)  # cannot match them: as if every input got a None (eager-like: nothing skipped)
        return
    note_edges(e for k, e in zip(wanted, edges) if grads[k] is None)


def _noting(original):
    current_task = torch._C._current_graph_task_id

    def apply(self, *args):
        result = original(self, *args)
        if type(result) is tuple:
            for g in result:
                if g is None:
                    break
            else:
                return result
        elif result is not None:
            return result
        try:
            if current_task() >= 0:
                _note_nones(self, result)
        except Exception:  # never the user's failure: only a None not noted
            pass
        return result
    apply.__wrapped__ = original
    apply.__doc__ = original.__doc__
    return apply


# NOTE [Noting Nones only while a joint lives]
# Only a backward that runs a joint's node (or a walk that starts at one) asks what a None of the user's
# reaches, and a node is alive from the call that made it to the end of every backward through it. So the
# wrapper of NOTE [Nones the user's backward sends] is put on BackwardCFunction.apply while some joint's node
# made by a call lives (`watch`, from each joint call; a weak reference whose callback takes it off after the
# last one goes), not for the whole process after the first framejit.compile: an eager-only program, or the
# backwards of a program whose compiled graphs need no gradient, run torch's own apply (review revAA: +12-18%
# backward on a model of 50 Linears with a Python Function and full backward hooks per layer, one framejit.compile
# of an unrelated function before). Where a joint lives, a backward returning no None pays a type check and a
# pass over its tuple. The wrapper is put on and taken off only where BackwardCFunction's own `apply` is
# torch's (or ours): a wrapper of someone else's stays as it is.
_WRAPPER = [None]
_LIVE: dict[int, object] = {}  # id of a live joint's node -> a weak reference to it
_LOCK = threading.RLock()  # a weak reference's callback may run in any thread, also inside `watch`


def watch(node) -> None:
    """NOTE [Noting Nones only while a joint lives]: `node`, a joint's node a call made now."""
    key = id(node)
    with _LOCK:
        if key in _LIVE:
            return
        try:
            _LIVE[key] = weakref.ref(node, lambda ref, key=key: _gone(key, ref))
        except TypeError:  # not weakly referable: the wrapper stays from now on
            _LIVE[key] = node
        _sync()


def _gone(key: int, ref) -> None:
    with _LOCK:
        if _LIVE.get(key) is ref:
            del _LIVE[key]
            _sync()


def _sync() -> None:
    from torch.autograd.function import BackwardCFunction
    wrapper, original = _WRAPPER[0], _ORIGINAL[0]
    if wrapper is None:
        return
    now = BackwardCFunction.__dict__.get("apply")
    if _LIVE and now is original:
        BackwardCFunction.apply = wrapper
    elif not _LIVE and now is wrapper:
        BackwardCFunction.apply = original


def install() -> None:
    """NOTE [Noting Nones only while a joint lives]: from now on, `watch` puts the wrapper on."""
    from torch.autograd.function import BackwardCFunction
    original = BackwardCFunction.__dict__.get("apply")
    if _WRAPPER[0] is None and original is not None and not hasattr(original, "__wrapped__"):
        _ORIGINAL[0] = original
        with _LOCK:
            _WRAPPER[0] = _noting(original)
            _sync()
