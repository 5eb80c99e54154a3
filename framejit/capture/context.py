"""Context managers and global state: grad mode, inference mode, autocast, and user context managers.

Entering a torch state manager inside a compiled region changes the tracer's view of that state (so
fake propagation sees the right grad mode and autocast dtypes) and records a node in the graph that
changes the real state at the same point when the graph runs, so the compiled code has exactly eager's
effect: `torch._C._set_grad_enabled`, `_enter_inference_mode`/`_exit_inference_mode`,
`_enter_autocast`/`_exit_autocast`. The state in force at entry of the frame is guarded (grad mode,
default dtype; see convert.global_guards).

User context managers whose `__enter__`/`__exit__` are Python code are inlined like any method.
The decorator forms (`@torch.no_grad()`) work because torch's `decorate_context` wrapper is inlined as
user code and its `ctx_factory()` yields one of these values.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.amp.autocast_mode as autocast_mode
import torch.autograd.grad_mode as grad_mode

from .breaks import BreakKind, Unsupported
from .sources import AttrSource, Source
from .values import ConstantValue, NewObjectValue, ObjectValue, Value

GRAD_CLASSES = (grad_mode.no_grad, grad_mode.enable_grad, grad_mode.set_grad_enabled, grad_mode.inference_mode)
AUTOCAST_CLASSES = (torch.autocast, torch.amp.autocast)


class CtxValue(Value):
    """A torch state context manager: kind 'grad' (mode: bool), 'inference' (mode) or 'autocast'."""

    def __init__(self, kind: str, mode: Any, cls: type, source: Source | None = None) -> None:
        self.kind = kind
        self.mode = mode
        self.cls = cls
        self.source = source

    def python_type(self) -> type:
        return self.cls

    def clone(self) -> "CtxValue":
        return CtxValue(self.kind, self.mode, self.cls)

    def describe(self) -> str:
        return f"{self.cls.__name__}({self.mode!r})"


class ExitValue(Value):
    """The bound `__exit__` pushed by BEFORE_WITH; calling it restores the saved state."""

    def __init__(self, ctx: CtxValue, saved: Any) -> None:
        self.ctx = ctx
        self.saved = saved


class CloneValue(Value):
    """`ctx.clone` of a decorator context manager (what torch's decorate_context calls)."""

    def __init__(self, ctx: CtxValue) -> None:
        self.ctx = ctx


class GradModeExit:
    """The `__exit__` a resume function receives for a grad-mode with-block left open by a graph break:
    it restores the grad mode in force before the block (NOTE [Breaks inside with-blocks])."""

    def __init__(self, prev: bool) -> None:
        self.prev = prev

    def __call__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.prev)

    def __repr__(self) -> str:
        return f"GradModeExit(prev={self.prev})"


def call_with_exits(exits: tuple, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a call left in plain Python inside open with-blocks: on an exception, exit the blocks
    (innermost first) as CPython's exception table would, then re-raise."""
    try:
        return fn(*args, **kwargs)
    except BaseException as e:
        for exit_fn in reversed(exits):
            exit_fn(type(e), e, e.__traceback__)
        raise


def exit_value_from_object(out, obj: GradModeExit, source: Source) -> "ExitValue":
    out.guard_type(source, GradModeExit)
    out.guard_constant(AttrSource(source, "prev"), obj.prev)
    return ExitValue(CtxValue("grad", not obj.prev, grad_mode.set_grad_enabled), obj.prev)


def is_ctx_class(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, GRAD_CLASSES + AUTOCAST_CLASSES)


def make_ctx(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> CtxValue:
    """`no_grad()`, `set_grad_enabled(b)`, `inference_mode(b)`, `autocast(...)` called inside the region."""
    consts = [a.as_constant() for a in args]
    kw = {k: v.as_constant() for k, v in kwargs.items()}
    if issubclass(cls, grad_mode.no_grad):
        return CtxValue("grad", False, cls)
    if issubclass(cls, grad_mode.enable_grad):
        return CtxValue("grad", True, cls)
    if issubclass(cls, grad_mode.set_grad_enabled):
        mode = bool(consts[0] if consts else kw["mode"])
        ctx = CtxValue("grad", mode, cls)
        ctx.mode_before_init = tx.output.grad_enabled  # set_grad_enabled acts at construction
        tx.output.set_grad_enabled(mode)
        return ctx
    if issubclass(cls, grad_mode.inference_mode):
        return CtxValue("inference", bool(consts[0] if consts else kw.get("mode", True)), cls)
    if issubclass(cls, AUTOCAST_CLASSES):
        return CtxValue("autocast", _autocast_args(consts, kw), cls)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"context manager {cls.__name__}")


def _autocast_args(consts: list, kw: dict) -> tuple:
    names = ("device_type", "dtype", "enabled", "cache_enabled")
    values = dict(zip(names, consts))
    values.update(kw)
    device_type = values["device_type"]
    dtype = values.get("dtype") or torch.get_autocast_dtype(device_type)
    return (device_type, dtype, bool(values.get("enabled", True)), values.get("cache_enabled"))


def ctx_from_object(out, obj: Any, source: Source) -> CtxValue:
    """A real context-manager object read from outside (e.g. the `self` of a decorator's clone)."""
    out.guard_type(source, type(obj))
    if isinstance(obj, grad_mode.no_grad):
        return CtxValue("grad", False, type(obj), source)
    if isinstance(obj, grad_mode.enable_grad):
        return CtxValue("grad", True, type(obj), source)
    if isinstance(obj, (grad_mode.set_grad_enabled, grad_mode.inference_mode)):
        out.guard_constant(AttrSource(source, "mode"), obj.mode)
        kind = "grad" if isinstance(obj, grad_mode.set_grad_enabled) else "inference"
        return CtxValue(kind, obj.mode, type(obj), source)
    raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"context manager object {type(obj).__name__}")


def enter(tx, ctx: Value) -> tuple[Value, Value]:
    """BEFORE_WITH: returns (the bound exit to push, the value `as` binds)."""
    if isinstance(ctx, CtxValue):
        out = tx.output
        if ctx.kind == "grad":
            saved = getattr(ctx, "mode_before_init", out.grad_enabled)
            out.set_grad_enabled(ctx.mode)
        elif ctx.kind == "inference":
            saved = (out.grad_enabled, out.record_effect(grad_mode._enter_inference_mode, (ctx.mode,)))
            out.grad_enabled = out.grad_enabled and not ctx.mode
        else:
            device_type, dtype, enabled, cache = ctx.mode
            node = out.record_effect(autocast_mode._enter_autocast, (device_type, dtype, enabled, cache))
            out.autocast_stack.append((device_type, dtype, enabled))
            saved = node
        return ExitValue(ctx, saved), ConstantValue(None)
    if isinstance(ctx, (ObjectValue, NewObjectValue)):
        exit_fn = tx.getattr(ctx, "__exit__")
        return exit_fn, tx.call_method_of(ctx, "__enter__", [], {})
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"with-block over {ctx.describe()}")


def exit_(tx, exit_value: ExitValue) -> Value:
    ctx, saved, out = exit_value.ctx, exit_value.saved, tx.output
    if ctx.kind == "grad":
        out.set_grad_enabled(saved)
    elif ctx.kind == "inference":
        grad_before, node = saved
        out.record_effect(grad_mode._exit_inference_mode, (node,))
        out.grad_enabled = grad_before
    else:
        out.record_effect(autocast_mode._exit_autocast, (saved,))
        out.autocast_stack.pop()
    return ConstantValue(None)
