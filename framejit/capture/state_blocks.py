"""More torch state traced at its place in the graph: profiler ranges and
`torch.autograd.graph.disable_saved_tensors_hooks` as CtxValues (context.py), `torch.set_default_dtype`.

NOTE [Profiler blocks]: `torch.profiler.profile()`, `torch.autograd.profiler.profile()` and
`record_function(name)` made inside the region with constant arguments only (no `on_trace_ready`
callback, no schedule object) are null blocks, as TorchDynamo treats them: nothing is recorded in the
graph and the profiler does not run around the captured ops. What such a profiler would record is only
observable through the profiler object itself, so the value `with ... as p` binds is opaque.
NOTE [Profiler objects used]: a use of it that needs the real object (its type, an attribute, a call)
is a graph break moved to the root frame's instruction that made the profiler: that call runs as plain
Python and makes a real profiler, and the resume function goes on from it, so the code before stays
captured (before, the whole frame ran eagerly). A graph break elsewhere while it is live cannot rebuild
it, and the frame then runs eagerly with a real profiler. A graph break inside the block re-enters it as a
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

NOTE [Default dtype changes]: `torch.set_default_dtype(d)` (a constant float dtype) inside the region
changes the tracer's default dtype (fake propagation and `torch.get_default_dtype()` see it; the dtype at
entry is guarded by convert._global_guards) and records a `torch.set_default_dtype(d)` node, so the ops
after it in the graph run under it. As with grad mode, a graph ends in the dtype of its entry (a last
node sets it back) and the code after the graph sets the dtype the traced code reached, so a backend that
runs state nodes only while lowering still leaves eager's state. Such entries are not persisted.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.autograd.profiler as autograd_profiler

from . import sdp_state
from .breaks import BreakKind, Unsupported
from .values import ConstantValue, Value

PROFILER_CLASSES = (torch.profiler.profile, autograd_profiler.profile, autograd_profiler.record_function)

_get_message = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message
_disable = torch._C._autograd._saved_tensors_hooks_disable
_enable = torch._C._autograd._saved_tensors_hooks_enable


class OpaqueProfilerValue(Value):
    """What `with torch.profiler.profile() as p` binds inside the region (NOTE [Profiler blocks])."""

    def __init__(self, cls: type, made_at: int | None = None) -> None:
        self.cls = cls
        self.made_at = made_at  # the root frame's instruction that made the profiler, when known

    def python_type(self) -> type:
        raise self.used(f"a {self.cls.__name__} profiler object")

    def used(self, what: str) -> Unsupported:
        """The break for a use of the real profiler, moved to where it was made (NOTE [Profiler objects used])."""
        e = Unsupported(BreakKind.UNSUPPORTED_VALUE, what)
        e.root_index = self.made_at
        return e

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


def make_profiler_ctx(cls: type, args: list[Value], kwargs: dict[str, Value], tx=None):
    from .context import CtxValue
    if not all(a.is_constant() for a in [*args, *kwargs.values()]):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__} with non-constant arguments")
    ctx = CtxValue("null", None, cls)
    root = tx.output.tx_stack[0] if tx is not None and tx.output.tx_stack else None
    ctx.made_at = root.current.index if root is not None and root.current is not None else None
    return ctx


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
           "query_message", "current_default_dtype", "default_dtype_changed", "end_default_dtype",
           "restore_default_dtype", "restores_for", "set_default_dtype"]

def current_default_dtype(out) -> torch.dtype:
    """The default dtype at this point of the trace (NOTE [Default dtype changes])."""
    return out.__dict__.get("default_dtype") or torch._C.get_default_dtype()


def set_default_dtype(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch.set_default_dtype(d)` inside the region (NOTE [Default dtype changes])."""
    value = args[0] if len(args) == 1 and not kwargs else kwargs.get("d")
    if value is None or len(args) + len(kwargs) != 1 or not value.is_constant() \
            or not isinstance(value.as_constant(), torch.dtype) or not value.as_constant().is_floating_point:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.set_default_dtype of anything but a constant float dtype")
    out, dtype = tx.output, value.as_constant()
    if dtype is not current_default_dtype(out):
        out.record_effect(torch.set_default_dtype, (dtype,))
        out.default_dtype = dtype
    return ConstantValue(None)


def end_default_dtype(out) -> None:
    """At the end of a graph: back to the dtype of its entry (the code after the graph sets the final one)."""
    if current_default_dtype(out) is not torch._C.get_default_dtype():
        out.record_effect(torch.set_default_dtype, (torch._C.get_default_dtype(),))
    sdp_state.end_flags(out)  # NOTE [SDPA backend flags]


def restore_default_dtype(cg, out) -> None:
    """After the graph: `torch.set_default_dtype(final)` where the traced code changed it."""
    if current_default_dtype(out) is not torch._C.get_default_dtype():
        cg.push_null()
        cg.load_const(torch.set_default_dtype)
        cg.load_const(current_default_dtype(out))
        cg.call(1)
        cg.emit("POP_TOP")
    sdp_state.restore_flags(cg, out)  # NOTE [SDPA backend flags]


def restores_for(gm: torch.fx.GraphModule) -> tuple:
    """(function, args) calls that put back the default dtype and saved-tensors-hooks state `gm` may
    change, as they are now (at compile time, the guarded state at entry), for a rerun after the graph
    raised (NOTE [Graph failures rerun eagerly] in convert.py)."""
    targets = {node.target for node in gm.graph.nodes if node.op == "call_function"}
    restores: tuple = ()
    if torch.set_default_dtype in targets:
        restores += ((torch.set_default_dtype, (torch._C.get_default_dtype(),)),)
    if _disable in targets:
        restores += (_restore_call(_get_message()),)
    return restores + sdp_state.restores_for(targets)


def default_dtype_changed(out) -> bool:
    return "default_dtype" in out.__dict__ or sdp_state.touched(out)  # NOTE [SDPA backend flags]


from .builtins import BUILTIN_HANDLERS  # noqa: E402  (builtins imports this module to register it)

BUILTIN_HANDLERS[torch.autograd.graph.disable_saved_tensors_hooks] = make_saved_hooks_ctx
from .module_hooks import TRACE_TIME  # noqa: E402  (also where the contextmanager helper is inlined as code)
TRACE_TIME[torch.autograd.graph.disable_saved_tensors_hooks] = make_saved_hooks_ctx
BUILTIN_HANDLERS[_get_message] = query_message
BUILTIN_HANDLERS[torch.set_default_dtype] = set_default_dtype
sdp_state.register(BUILTIN_HANDLERS)


def _direct_change(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a direct change of the saved-tensors-hooks state")


BUILTIN_HANDLERS[_disable] = BUILTIN_HANDLERS[_enable] = _direct_change
