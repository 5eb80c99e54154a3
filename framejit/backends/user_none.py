"""Nodes a None of the user's reaches in a backward (NOTE [Nones the user's backward sends]).

`install()` (from hook_dicts.install) wraps torch's BackwardCFunction.apply so that a Python Function's backward
returning None for an input is noted; `reached(node)` / `slot_reached(node, nr)` say whether such a None (or one
eager's engine passes on from it) reaches the node, or a joint's output slot, in the current graph task.
"""
from __future__ import annotations

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
# are noted where they are made: `install` wraps BackwardCFunction.apply (the `apply` every Python Function's
# node inherits, which the engine calls), and a backward returning None for an input with a gradient edge
# notes the edge under the graph task. On a query (at the time a node runs, all Nones that reach it were
# made) the noted edges are walked down through C++ and Python nodes (eager's engine runs them all: C++ nodes
# pass undefined gradients on, or a zero gradient that a formula turns into undefined ones, as a module's
# BackwardHookFunction's zeros through a Linear, revN p_m9; a Python node materialises zeros), up to leaves and
# joints' nodes (only the slot is reached; a joint that hands None on for a reached slot notes its input
# edges in turn: `note_edges`; one that got no gradient at all notes all of them, also those that eager's
# graph inside it does not connect to the reached slot: these run on zeros then). A reached node or slot runs
# as in eager: no joint skips for it, no Python Function node is skipped, no hook of a reached tensor skips
# its None. A node reached by both a None of the user's and one of framejit's runs too (eager's engine runs it
# with undefined gradients). The state of a graph task is dropped by a callback at its end; a backward that
# raises runs no callback, so only the newest _MAX_TASKS graph tasks keep state (nested backwards, a reentrant
# checkpoint's inside the outer one, stay below it): before, each failed backward kept its noted nodes, their
# saved tensors and the graph above alive for good, in any program after one framejit.compile (review revAA
# MED-1: 30 of 30 batches skipped by a raising NaN-check hook stayed alive). Not covered: a C++
# node whose formula gives an undefined gradient for an input (no Python backward to note it). Cost: a check of
# the returned tuple per Python Function backward; the walk only where framejit would skip.
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
    """The key under which `node` (or, for a leaf's AccumulateGrad, its tensor) is noted."""
    leaf = getattr(node, "variable", None)
    return ("leaf", id(leaf)) if leaf is not None else (node._sequence_nr(), type(node))


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
    def apply(self, *args):
        result = original(self, *args)
        try:
            if torch._C._current_graph_task_id() >= 0:
                _note_nones(self, result)
        except Exception:  # never the user's failure: only a None not noted
            pass
        return result
    apply.__wrapped__ = original
    apply.__doc__ = original.__doc__
    return apply


def install() -> None:
    from torch.autograd.function import BackwardCFunction
    original = BackwardCFunction.__dict__.get("apply")
    if original is not None and not hasattr(original, "__wrapped__"):
        _ORIGINAL[0] = original
        BackwardCFunction.apply = _noting(original)
