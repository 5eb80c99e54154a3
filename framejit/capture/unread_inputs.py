"""Tensor inputs a trace handed on without reading them: guarded by their type only (NOTE [Tensors passed through
unread]).

`watch` marks a plain tensor input as it is wrapped; its TensorValue then notes every read of its fake. `relax`,
run before an entry's guard function is built, replaces the full tensor guard of each input that was never read
by a check of its type.
"""
from __future__ import annotations

from typing import Any

import torch

# NOTE [Tensors passed through unread]: a frame that only hands a tensor on (a decorator's `wrapper(*args,
# **kwargs)` calling the function it wraps, `forward` calling `self.model(input_ids=input_ids)`, the resume
# function that returns the value its call produced) was guarded on the tensor's shape, strides and
# requires_grad all the same, because wrapping an argument guards all its metadata. Where the callee breaks
# (transformers' wrappers hold try/finally blocks, so the break stays at the call) every such frame recompiled
# when a size changed, one frame after the other down the stack: tiny DBRX over inputs (2, 8), (2, 8), (2, 12),
# (1, 5) recompiled 21 frames at the third call and 21 at the fourth, 14 of them entries with no graph at all.
# An entry that compiled no graph and whose trace never read a plain torch.Tensor input (no read of its fake:
# no size, dtype, device, requires_grad, method or op; no guard on anything reached through it, as `x.grad` or
# a Python attribute) ran nothing that depended on its metadata: its code loads the tensor from its source and
# hands it on (to a callee through its hook, a resume function, the return value, a replayed store), and each
# of those guards what it reads itself. Such an input is guarded by its type alone (stock torch.compile leaves a
# tensor it only passes along unguarded, as a lazy variable). Reads while the break's code is generated count
# too, except the marks handed to resume functions (NOTE [Symbols carried into resume functions]), which decide
# nothing. Not for inputs wrapped with symbolic sizes (the shape env's guards bind them), subclasses and
# parameters, entries with a graph (the graph takes its inputs with the sizes it was compiled for), nested breaks
# or eager entries.
class _Watch:
    __slots__ = ("read",)

    def __init__(self) -> None:
        self.read = False


def watch(out: Any, value: Any, tensor: torch.Tensor, symbolic: bool) -> None:
    """Note the reads of `value`, the input just wrapped from `tensor` whose tensor guard is `out.guards[-1]`."""
    if symbolic or type(tensor) is not torch.Tensor or not out.guards or out.guards[-1].kind != "TENSOR_MATCH":
        return
    value.watch = _Watch()
    out.__dict__.setdefault("watched_inputs", []).append((value, out.guards[-1]))


def relax(out: Any, graphs: list) -> None:
    """Guard by type only the watched inputs of `out` that its entry (compiling `graphs`) never read."""
    watched = out.__dict__.get("watched_inputs")
    if not watched or graphs or out.op_count:
        return
    unread = {id(guard): guard for value, guard in watched if not value.watch.read and not value.node.users
              and not _reached_through(out, value.source.describe(), guard)}
    if unread:
        out.guards[:] = [unread[id(g)].parts[0] if id(g) in unread else g for g in out.guards]
        out.relaxed_inputs = {id(value) for value, guard in watched if id(guard) in unread}


def maybe_requires_grad(out: Any, value: Any) -> bool:
    """`value`, an input of `out`, may require grad when its entry runs: it did at the trace, or its entry does not
    guard it (relaxed above). Facts read after `relax` are not guarded (revBE HIGH-1: an entry traced when its
    argument did not require grad, relaxed, was taken as returning no argument that requires grad)."""
    return id(value) in out.__dict__.get("relaxed_inputs", ()) or value.fake.requires_grad


def _reached_through(out: Any, where: str, own: Any) -> bool:
    """Some other guard checks the input at `where` (an instance attribute absent) or a value reached through it
    (`x.grad`, `x.tag`)."""
    return any(g is not own and (g.source == where or g.source.startswith((where + ".", where + "[")))
               for g in out.guards)
