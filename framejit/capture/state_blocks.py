"""More torch state context managers traced as CtxValues (context.py): profiler ranges and
`torch.autograd.graph.disable_saved_tensors_hooks`.

NOTE [Profiler blocks]: `torch.profiler.profile()`, `torch.autograd.profiler.profile()` and
`record_function(name)` made inside the region with constant arguments only (no `on_trace_ready`
callback, no schedule object) are null blocks, as TorchDynamo treats them: nothing is recorded in the
graph and the profiler does not run around the captured ops. What such a profiler would record is only
observable through the profiler object itself, so the value `with ... as p` binds is opaque: any use of
it (attribute, call, a graph break while it is live) cannot be modelled, and the frame then runs that
code, or all of it, eagerly with a real profiler. A graph break inside the block re-enters it as a
`contextlib.nullcontext()` (context.block_for).

NOTE [Saved-tensors-hooks blocks]: `disable_saved_tensors_hooks(message)` (a constant string) is kind
'saved_hooks'. The message in force is global state: its value at frame entry is read when the trace
first needs it and guarded (a line of the guard function calls
`torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()`). Entering records
`_saved_tensors_hooks_disable(message)` in the graph; exiting records what the generator's `finally`
does: `_saved_tensors_hooks_enable()` when no message was in force before, else
`_saved_tensors_hooks_disable(previous)`. A graph ends in the state it started with (the enter node
carries its restoring call in `meta["restore"]`, which graph.output records for blocks still open), and
a break inside the block re-enters it through a SavedHooksBlock. The decorator form is a clone of the
manager around the call (NOTE [Context managers as decorators]).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.autograd.profiler as autograd_profiler

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, Value

PROFILER_CLASSES = (torch.profiler.profile, autograd_profiler.profile, autograd_profiler.record_function)

_get_message = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message
_disable = torch._C._autograd._saved_tensors_hooks_disable
_enable = torch._C._autograd._saved_tensors_hooks_enable


class OpaqueProfilerValue(Value):
    """What `with torch.profiler.profile() as p` binds inside the region (NOTE [Profiler blocks])."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def python_type(self) -> type:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a {self.cls.__name__} profiler object")

    def describe(self) -> str:
        return f"{self.cls.__name__} profiler object"


class SavedHooksBlock:
    """An open `disable_saved_tensors_hooks(message)` block carried across a graph break."""

    def __init__(self, message: str) -> None:
        self.message = message
        self._previous: list = []

    def __enter__(self) -> None:
        self._previous.append(_get_message())
        _disable(self.message)

    def __exit__(self, *exc_info: Any) -> None:
        previous = self._previous.pop()
        if previous is None:
            _enable()
        else:
            _disable(previous)

    def __repr__(self) -> str:
        return f"SavedHooksBlock({self.message!r})"


def is_profiler_class(cls: Any) -> bool:
    return cls in PROFILER_CLASSES


def make_profiler_ctx(cls: type, args: list[Value], kwargs: dict[str, Value]):
    from .context import CtxValue
    if not all(a.is_constant() for a in [*args, *kwargs.values()]):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__} with non-constant arguments")
    return CtxValue("null", None, cls)


def make_saved_hooks_ctx(tx, args: list[Value], kwargs: dict[str, Value]):
    from .context import CtxValue
    message = args[0] if len(args) == 1 and not kwargs else kwargs.get("error_message")
    if message is None or len(args) + len(kwargs) != 1 or not message.is_constant() \
            or not isinstance(message.as_constant(), str):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "disable_saved_tensors_hooks without a constant message")
    return CtxValue("saved_hooks", message.as_constant(), contextlib._GeneratorContextManager)


def _current_message(out) -> str | None:
    """The message in force at this point of the trace; its value at entry is guarded when first read."""
    if "saved_hooks_message" not in out.__dict__:
        message = _get_message()
        name = out.name_of(_get_message, "saved_tensors_hooks_message")
        expr = f"{name}() is None" if message is None else f"{name}() == {message!r}"
        out.add_guard("GLOBAL_STATE", expr, None, expected=repr(message), actual=f"{name}()")
        out.saved_hooks_message = message
    return out.saved_hooks_message


def query_message(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`_saved_tensors_hooks_get_disabled_error_message()`: the message in force at this point of the trace."""
    if args or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "_saved_tensors_hooks_get_disabled_error_message with arguments")
    return ConstantValue(_current_message(tx.output))


def _restore_call(previous: str | None) -> tuple:
    return (_enable, ()) if previous is None else (_disable, (previous,))


def enter_saved_hooks(out, message: str) -> tuple:
    """Record the block's entry; returns what its exit needs: (previous message, the enter node)."""
    previous = _current_message(out)
    node = out.record_effect(_disable, (message,))
    node.meta["restore"] = _restore_call(previous)
    out.open_regions.append(node)
    out.saved_hooks_message = message
    return previous, node


def exit_saved_hooks(out, saved: tuple) -> Value:
    previous, node = saved
    out.record_effect(*_restore_call(previous))
    out.open_regions.remove(node)
    out.saved_hooks_message = previous
    return ConstantValue(None)


def ctx_from_block(out, obj: SavedHooksBlock, source) -> Value:
    from .context import CtxValue
    from .sources import AttrSource
    out.guard_constant(AttrSource(source, "message"), obj.message)
    return CtxValue("saved_hooks", obj.message, SavedHooksBlock, source)


__all__ = ["OpaqueProfilerValue", "PROFILER_CLASSES", "SavedHooksBlock", "ctx_from_block", "enter_saved_hooks",
           "exit_saved_hooks", "is_profiler_class", "make_profiler_ctx", "make_saved_hooks_ctx",
           "query_message"]

from .builtins import BUILTIN_HANDLERS  # noqa: E402  (builtins imports this module to register it)

BUILTIN_HANDLERS[torch.autograd.graph.disable_saved_tensors_hooks] = make_saved_hooks_ctx
BUILTIN_HANDLERS[_get_message] = query_message


def _direct_change(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a direct change of the saved-tensors-hooks state")


BUILTIN_HANDLERS[_disable] = BUILTIN_HANDLERS[_enable] = _direct_change
