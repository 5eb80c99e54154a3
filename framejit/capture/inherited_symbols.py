"""Symbolic sizes and ints carried into resume functions (NOTE [Symbols carried into resume functions]).

At a graph break the frame's live tensors and ints are handed to a resume function, which is traced on
its own. This module tells that resume function's hook which of those values were symbolic in the trace
that broke, so that its first trace makes them symbolic too.
"""
from __future__ import annotations

from typing import Any

# NOTE [Symbols carried into resume functions]: a resume function is a frame of its own, and automatic
# dynamic (NOTE [Automatic dynamic] in hook.py) learns per frame which sizes change. So a frame that broke
# after its sizes had become symbolic (under automatic dynamic, or from its first call with
# `mark_dynamic`) handed tensors with symbolic sizes (`y = x * 2` before a print) and ints computed from
# sizes (`n = x.size(0)`) to a resume function that traced them static first and recompiled at the next
# size: `mark_dynamic(x, 0)` and a function with two prints compiled 5 graphs over 6 sizes (stock
# torch.compile 5 as well) where the issue asks for one per frame. Now, where the break calls a hooked
# resume function, every tensor on the stack or in the locals it passes whose fake has a symbolic size
# marks that dimension dynamic in the resume function's hook, an int (or a torch.Size) that is a symbol
# marks its argument dynamic (as `inherit_dynamic_results` does for a break's result), before its first
# trace. Only marks are added: the resume function's own trace still guards what it reads (a size that is
# 0 or 1 there, a value it specialises), so no entry serves a call it was not traced for. Under
# dynamic=True everything is symbolic already; under dynamic=False nothing is symbolic to carry. Items of
# containers are not looked at (their sources are not the resume function's arguments).
def inherit_symbols(body: Any, slots: dict[str, Any], out: Any) -> None:
    """Mark in `body` (a resume function's FrameHook) the arguments `slots` ({source text: value in the
    breaking trace `out`}) that are symbolic there."""
    if not hasattr(body, "dynamic_dims"):
        return
    from .carried_loops import OpaqueSequenceValue, OpaqueStringValue, _dynamic_scalar, changes_marker
    from .carried_loops import OpaqueMethodValue
    sequences = {source: value for source, value in slots.items() if type(value) is OpaqueSequenceValue}
    sequences.update({f"{source}.__self__": value for source, value in slots.items()  # NOTE [Bound methods of
                      if type(value) is OpaqueMethodValue})  # sequences of changing length] in carried_loops.py
    opaque = set(sequences)
    opaque |= {changes_marker(source) for source, value in sequences.items()  # NOTE [Lengths that change between
               if getattr(value, "changes", False)}  # calls]
    if not opaque <= body.dynamic_ints:  # NOTE [Comprehension results of changing length] in carried_loops.py
        body.dynamic_ints = body.dynamic_ints | opaque
    if getattr(getattr(body, "request", None), "dynamic", None) is not None:
        return
    from .values.base import LazyArg
    from .python_draws import DrawValue
    from .values.scalars import SymFloatValue
    dims, ints, floats = dict(body.dynamic_dims), set(body.dynamic_ints), set(body.dynamic_floats)
    for source, value in slots.items():
        if isinstance(value, LazyArg):  # passed on unread: what this frame marked for it
            symbolic = out.dynamic_dims.get(f"L['{value.name}']", frozenset())
            if f"L['{value.name}']" in out.dynamic_ints and type(value.obj) in (int, str, torch_size()):
                ints.add(source)
        else:
            symbolic = _symbolic_dims(value)
        if symbolic and not symbolic <= dims.get(source, frozenset()):
            dims[source] = dims.get(source, frozenset()) | symbolic
        elif _symbolic_int(value) or _symbolic_size(value) or type(value) is OpaqueStringValue:
            ints.add(source)  # a symbol, a torch.Size of symbols, an opaque string there too
        elif type(value) is SymFloatValue and _dynamic_scalar(value):
            floats.add(source)  # a graph input there (NOTE [Dynamic floats])
        elif type(value) is DrawValue and value.kind in (int, float):  # NOTE [Draws from the random module]
            (ints if value.kind is int else floats).add(source)  # drawn anew each call
    if dims != body.dynamic_dims:
        body.dynamic_dims = dims
    if len(ints) != len(body.dynamic_ints):
        body.dynamic_ints = frozenset(ints)
    if len(floats) != len(body.dynamic_floats):
        body.dynamic_floats = frozenset(floats)


def torch_size() -> type:
    import torch
    return torch.Size


def _symbolic_dims(value: Any) -> frozenset[int]:
    from .values import TensorValue
    if not isinstance(value, TensorValue) or getattr(value._fake, "is_sparse", False):  # not a read: marks only (NOTE
        return frozenset()  # [Tensors passed through unread] in unread_inputs.py)
    return frozenset(d for d, size in enumerate(value._fake.shape) if not _concrete(size))


def _symbolic_int(value: Any) -> bool:
    from .values.scalars import SymNodeValue
    return type(value) is SymNodeValue and value.python_type() is int and not _concrete(value.sym)


def _symbolic_size(value: Any) -> bool:
    import torch
    from .values import TupleValue
    return isinstance(value, TupleValue) and value.python_type() is torch.Size and any(
        _symbolic_int(item) for item in value.items)


def _concrete(size: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import is_concrete_int
    return is_concrete_int(size)
