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

import contextlib
import inspect
import types
from typing import Any

import torch
import torch.amp.autocast_mode as autocast_mode
import torch.autograd.grad_mode as grad_mode

from . import getitem_mode
from .breaks import BreakKind, Unsupported, UserException
from .sources import AttrSource, LocalSource, ObjectSource, Ref, Source
from .values import ConstantValue, NewObjectValue, ObjectValue, Value

GRAD_CLASSES = (grad_mode.no_grad, grad_mode.enable_grad, grad_mode.set_grad_enabled, grad_mode.inference_mode)
AUTOCAST_CLASSES = (torch.autocast, torch.amp.autocast)


# NOTE [Subclasses of torch context classes]: a subclass of no_grad/enable_grad/set_grad_enabled/
# inference_mode/autocast is modelled as its torch base only when it keeps the base's `__init__`,
# `__enter__` and `__exit__`. One that writes its own (`class NG(torch.no_grad): def __exit__(...)`) was
# read as the base block: its methods never ran, and what they changed (the grad mode, a global) was
# lost after the compiled call. Such a class is a break when made inside; an object of it passed in is
# an ordinary object (its methods are traced, or the with-block is a break).
def plain_ctx_class(cls: type) -> bool:
    base = next((b for b in cls.__mro__ if b in GRAD_CLASSES + AUTOCAST_CLASSES), None)
    if base is None:
        return True
    return all(getattr(cls, name) is getattr(base, name) for name in ("__init__", "__enter__", "__exit__"))


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


# NOTE [Exits of outside managers]: `ac.__exit__(None, None, None)` of a torch state manager from outside that
# the trace did not enter (the caller entered it) is an exit out of block order (generator_ctx.
# call_torch_ctx_method): a grad-mode one is a graph break at the call, an autocast or inference-mode one too
# unless an autocast or inference-mode block is open there: then the frame runs eagerly. Before, reading
# `ac.__exit__` was the break; inside an autocast block the exit then ran as the step at that break, between
# the block's re-entry and its exit (run_in_blocks), and the block's exit restored the autocast state the
# step had just changed: later ops in the block kept computing in the block's dtype where eager computed in
# float32 (NOTE [Autocast changed by a step in blocks] now keeps such changes too).
def ctx_method(ctx: CtxValue, name: str) -> Value | None:
    """`ctx.clone` (what torch's decorate_context calls), or `ng.__enter__`/`ng.__exit__` of a torch state
    manager made here (and `__exit__` of one from outside), which calls.py enters and exits as a with-block
    does (NOTE [Torch managers entered by call] in generator_ctx.py); None for any other attribute."""
    if name == "clone":
        return CloneValue(ctx)
    method = getattr(ctx.cls, name, None) if name in ("__enter__", "__exit__") else None
    if ctx.kind in ("grad", "autocast", "inference") and (ctx.source is None or name == "__exit__") and \
            isinstance(method, types.FunctionType):  # an outside manager's exit: NOTE [Exits of outside managers]
        from .values import BoundMethodValue, UserFunctionValue
        return BoundMethodValue(UserFunctionValue(method), ctx)
    return None


def rebuildable_manager(value: Value) -> bool:
    """A no_grad/enable_grad/set_grad_enabled/inference_mode/torch.autocast made in the trace, which
    mappings_runtime.grad_mode_manager builds anew where a graph break needs it."""
    return isinstance(value, CtxValue) and value.source is None and (
        value.kind in ("grad", "inference") and issubclass(value.cls, GRAD_CLASSES)
        or value.kind == "autocast" and value.cls is torch.autocast)


class ExitValue(Value):
    """The bound `__exit__` pushed by BEFORE_WITH; calling it restores the saved state."""

    def __init__(self, ctx: CtxValue, saved: Any) -> None:
        self.ctx = ctx
        self.saved = saved


class CloneValue(Value):
    """`ctx.clone` of a decorator context manager (what torch's decorate_context calls)."""

    def __init__(self, ctx: CtxValue) -> None:
        self.ctx = ctx


class GradBlock:
    """An open grad-mode with-block carried across a graph break (NOTE [Breaks inside with-blocks]):
    entering sets `mode`, exiting restores `prev`, the mode in force before the original block."""

    def __init__(self, prev: bool, mode: bool) -> None:
        self.prev = prev
        self.mode = mode

    def __enter__(self) -> None:
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.prev)

    def __repr__(self) -> str:
        return f"GradBlock(prev={self.prev}, mode={self.mode})"


class InferenceBlock:
    """An open `inference_mode(mode)` block carried across a graph break: entering first sets the grad
    mode the original block was entered with (inference mode saves it and restores it on exit)."""

    def __init__(self, mode: bool, grad_before: bool) -> None:
        self.mode = mode
        self.grad_before = grad_before
        self._context = None

    def __enter__(self) -> None:
        torch._C._set_grad_enabled(self.grad_before)
        self._context = grad_mode._enter_inference_mode(self.mode)

    def __exit__(self, *exc_info: Any) -> None:
        context, self._context = self._context, None
        context.__exit__(*exc_info)

    def __repr__(self) -> str:
        return f"InferenceBlock(mode={self.mode}, grad_before={self.grad_before})"


class DeviceBlock:
    """An open `with torch.device(d):` block carried across a graph break (NOTE [Device blocks]): entering
    puts a DeviceContext for `device` on the torch function mode stack, as `torch.device.__enter__` does."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._mode = None

    def __enter__(self) -> None:
        from torch.utils._device import DeviceContext
        self._mode = DeviceContext(self.device)
        self._mode.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(*exc_info)

    def __repr__(self) -> str:
        return f"DeviceBlock({str(self.device)!r})"


# NOTE [Device blocks]: `with torch.device(d):` (a device made here or read from outside, or a DeviceBlock
# re-entered by a resume function) is traced as the DeviceContext it pushes behaves: inside the block the
# translator's `default_device` is `d`, so every torch factory of `_device_constructors()` gets `device=d`
# where its `device` is missing or None and `torch.get_default_device()` answers `d` (NOTE [Default device
# mode] in default_device.py); leaving the block restores the device in force before it. The graph carries
# the devices on its nodes and pushes no mode: nothing else in the block changes (the mode passes every
# other call through unchanged). A break inside the block re-enters a DeviceBlock around the step run as
# Python and in the resume function. The frame's entry guards are about the mode stack the frame was
# called with, not the one inside the block (`entry_default_device`, convert._mode_guards).

from .state_blocks import SavedHooksBlock, is_profiler_class  # noqa: E402  (NOTE [Profiler blocks])

BLOCK_CLASSES = (GradBlock, InferenceBlock, SavedHooksBlock, DeviceBlock)


class ExitOnError:
    """A user context manager's `__exit__` around a step at a graph break: the manager stays entered (its
    exit runs later, in the resumed code), unless the step raises; then it exits as CPython would. Used
    only for exits that never suppress an exception (graph_break._never_suppresses)."""

    def __init__(self, exit_fn: Any) -> None:
        self.exit_fn = exit_fn

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.exit_fn(exc_type, exc, tb)


def run_in_blocks(blocks: tuple, grad: bool, fn: Any, /, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Run a step left in plain Python inside re-entered with-blocks: enter them (outermost first), set
    the grad mode the traced code had reached, run `fn`, then exit them (innermost first, also on an
    exception, as CPython's exception table would). Returns (the grad mode `fn` left, its result): the
    resume function re-enters the blocks and sets that grad mode (NOTE [Breaks inside with-blocks])."""
    with contextlib.ExitStack() as stack:
        for block in blocks:
            stack.enter_context(block)
        torch._C._set_grad_enabled(grad)
        args, kwargs = _past_this_frame(fn, args, kwargs)
        result = fn(*args, **kwargs)
        _keep_autocast_changes(blocks)
        return torch._C.is_grad_enabled(), result


# NOTE [Autocast changed by a step in blocks]: a step run in re-entered blocks that changes the autocast state
# (a callee calling torch.set_autocast_enabled, an outside autocast's exit) had that change undone: the
# autocast block's exit restored the state before it and the resume function re-entered the block with its
# own settings, so later ops in the block kept the block's dtype where eager's had the step's. The innermost
# autocast block of each device takes the state the step left (`__enter__` sets exactly these attributes),
# so the resume function re-enters it in that state (its trace reads and guards them: ctx_from_object); its
# exit restores the state from before the block, as the original block's exit would.
def _keep_autocast_changes(blocks: tuple) -> None:
    seen = set()
    for block in reversed(blocks):
        if type(block) in AUTOCAST_CLASSES and block.device not in seen:
            seen.add(block.device)
            block._enabled = torch.is_autocast_enabled(block.device)
            block.fast_dtype = torch.get_autocast_dtype(block.device)
            block._cache_enabled = torch.is_autocast_cache_enabled()


# NOTE [Caller frames at breaks in blocks]: a step run through run_in_blocks has one more frame between it
# and the user's code (this module's) than in eager. Functions that name their caller's file and line take
# a stacklevel: warnings.warn and logging's calls get one more level, so the warning or record names the
# user's line (the frame of the transformed function), as in eager.
_LOGGER_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})


def _past_this_frame(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    import logging
    import warnings
    if fn is warnings.warn:
        if len(args) >= 3:  # warn(message, category, stacklevel, ...)
            return args[:2] + (args[2] + 1,) + args[3:], kwargs
        return args, {**kwargs, "stacklevel": kwargs.get("stacklevel", 1) + 1}
    owner = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", None) in _LOGGER_METHODS and (
            isinstance(owner, (logging.Logger, logging.LoggerAdapter))
            or (owner is None and getattr(logging, fn.__name__, None) is fn)):
        return args, {**kwargs, "stacklevel": kwargs.get("stacklevel", 1) + 1}
    return args, kwargs


def block_for(exit_value: "ExitValue") -> tuple[Any, tuple]:
    """(constructor, constant args) of the block object that re-enters `exit_value`'s with-block."""
    ctx, saved = exit_value.ctx, exit_value.saved
    if ctx.kind == "grad":
        return GradBlock, (saved, ctx.mode)
    if ctx.kind == "inference":
        return InferenceBlock, (ctx.mode, saved[0])
    if ctx.kind == "null":  # NOTE [Profiler blocks]
        return contextlib.nullcontext, ()
    if ctx.kind == "saved_hooks":  # NOTE [Saved-tensors-hooks blocks]
        return SavedHooksBlock, (ctx.mode,)
    if ctx.kind == "device":  # NOTE [Device blocks]
        return DeviceBlock, (ctx.mode,)
    if ctx.kind == "getitem_to_index":  # NOTE [Getitem-to-index blocks]: the mode object itself
        return ctx.cls, ()
    device_type, dtype, enabled, cache = ctx.mode
    return torch.autocast, (device_type, dtype, enabled, cache)


def is_ctx_class(cls: Any) -> bool:
    return isinstance(cls, type) and (issubclass(cls, GRAD_CLASSES + AUTOCAST_CLASSES) or is_profiler_class(cls)
                                      or getitem_mode.is_mode_class(cls)
                                      or cls is torch._C.DisableTorchFunctionSubclass)


def make_ctx(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> CtxValue:
    """`no_grad()`, `set_grad_enabled(b)`, `inference_mode(b)`, `autocast(...)` called inside the region."""
    consts = [a.as_constant() for a in args]
    if is_profiler_class(cls):  # NOTE [Profiler blocks]
        from .state_blocks import make_profiler_ctx
        return make_profiler_ctx(cls, args, kwargs, tx)
    if getitem_mode.is_mode_class(cls) and not args and not kwargs:  # NOTE [Getitem-to-index blocks]
        return CtxValue("getitem_to_index", None, cls)
    if cls is torch._C.DisableTorchFunctionSubclass:  # NOTE [Inlined __torch_function__]: only inside one
        from .torch_function_inline import disabled_ctx
        return disabled_ctx(args, kwargs, CtxValue)
    kw = {k: v.as_constant() for k, v in kwargs.items()}
    if not plain_ctx_class(cls) and cls not in DEVICE_AUTOCAST:  # NOTE [Subclasses of torch context classes]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"context manager {cls.__name__} with its own methods")
    if issubclass(cls, (grad_mode.no_grad, grad_mode.enable_grad, grad_mode.set_grad_enabled)):
        guard_grad_functions(tx.output, cls)  # NOTE [Grad blocks rely on torch's grad-mode functions]
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
    if cls in DEVICE_AUTOCAST:  # NOTE [Device autocast classes]
        return CtxValue("autocast", _device_autocast_args(cls, consts, kw), cls)
    if issubclass(cls, AUTOCAST_CLASSES) and cls.__init__ is torch.amp.autocast.__init__:
        return CtxValue("autocast", _autocast_args(tx, consts, kw), cls)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"context manager {cls.__name__}")


# NOTE [Grad blocks rely on torch's grad-mode functions]: no_grad, enable_grad and set_grad_enabled are modelled as
# switching the real grad mode and restoring the one before; torch's code reads that mode back through
# `torch.is_grad_enabled()` and switches through `torch.set_grad_enabled`, module attributes a program may replace
# (NOTE [Grad mode read from torch._C] in framejit/grad_mode.py). Replaced, eager restores whatever the
# replacement answers (a patch answering True turned grad on after `with torch.no_grad():` under a caller's
# no_grad; the model kept it off): the block is a graph break then, and otherwise both names are pinned.
def guard_grad_functions(out, cls: type) -> None:
    for name, own in (("is_grad_enabled", torch._C.is_grad_enabled), ("set_grad_enabled", grad_mode.set_grad_enabled)):
        if getattr(torch, name, None) is not own:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__} while torch.{name} is replaced")
        out.guard_id(AttrSource(ObjectSource(Ref(torch, "torch")), name), own)


# NOTE [Device autocast classes]: torch.cpu.amp.autocast(enabled, dtype, cache_enabled) and
# torch.cuda.amp.autocast(...) (deprecated, still common in model code) subclass torch.autocast with an
# __init__ of their own: no device_type argument (the class names the device), that positional order, and
# a dtype default of their own (bfloat16, float16), not the autocast setting. They were read with
# torch.autocast's arguments (KeyError: the frame ran eagerly); their arguments are bound with their own
# signature now. Any other subclass with an __init__ of its own is a break. Not replayed: the
# FutureWarning their __init__ gives (once per call site under the default filters).
DEVICE_AUTOCAST = {torch.cpu.amp.autocast: "cpu", torch.cuda.amp.autocast: "cuda"}


def _device_autocast_args(cls: type, consts: list, kw: dict) -> tuple:
    try:
        bound = inspect.signature(cls.__init__).bind(None, *consts, **kw)
    except TypeError as e:
        raise UserException(e) from None
    bound.apply_defaults()
    values = bound.arguments
    return (DEVICE_AUTOCAST[cls], values["dtype"], bool(values["enabled"]), values["cache_enabled"])


def _autocast_args(tx, consts: list, kw: dict) -> tuple:
    names = ("device_type", "dtype", "enabled", "cache_enabled")
    values = dict(zip(names, consts))
    values.update(kw)
    device_type = values["device_type"]
    dtype = values.get("dtype") or _default_autocast_dtype(tx, device_type)
    return (device_type, dtype, bool(values.get("enabled", True)), values.get("cache_enabled"))


# NOTE [Default autocast dtype]: `torch.autocast("cpu")` without a dtype takes torch.get_autocast_dtype("cpu")
# when it is made: the dtype the innermost autocast block entered for that device set (every __enter__ sets
# it), else the caller's setting, which `torch.set_autocast_dtype("cpu", torch.float16)` changes between
# calls. That setting was read at trace time and not guarded while autocast was off at entry: the entry
# traced with bfloat16 kept computing in bfloat16 after the caller chose float16 (eager: float16).
def _default_autocast_dtype(tx, device_type: str) -> torch.dtype:
    for entered in reversed(tx.output.autocast_stack):
        if entered[0] == device_type:
            return entered[1]
    from .compile_state import _guard_answer
    dtype = torch.get_autocast_dtype(device_type)
    _guard_answer(tx, torch.get_autocast_dtype, repr(device_type), dtype)
    return dtype


def ctx_from_object(out, obj: Any, source: Source) -> CtxValue:
    """A real context-manager object read from outside (e.g. the `self` of a decorator's clone)."""
    out.guard_type(source, type(obj))
    if isinstance(obj, (grad_mode.no_grad, grad_mode.enable_grad, grad_mode.set_grad_enabled)):
        guard_grad_functions(out, type(obj))  # NOTE [Grad blocks rely on torch's grad-mode functions]
    if isinstance(obj, grad_mode.no_grad):
        return CtxValue("grad", False, type(obj), source)
    if isinstance(obj, grad_mode.enable_grad):
        return CtxValue("grad", True, type(obj), source)
    if isinstance(obj, (grad_mode.set_grad_enabled, grad_mode.inference_mode)):
        out.guard_constant(AttrSource(source, "mode"), obj.mode)
        if isinstance(obj, grad_mode.inference_mode):
            return CtxValue("inference", obj.mode, type(obj), source)
        # NOTE [set_grad_enabled objects from outside]: its `__exit__` restores `prev`, the mode read by
        # its `__init__` (which already switched to `mode`), not the mode in force at `__enter__`
        ctx = CtxValue("grad", obj.mode, type(obj), source)
        ctx.mode_before_init = obj.prev
        out.guard_constant(AttrSource(source, "prev"), obj.prev)
        return ctx
    if isinstance(obj, GradBlock):
        ctx = CtxValue("grad", obj.mode, GradBlock, source)
        ctx.mode_before_init = obj.prev
        out.guard_constant(AttrSource(source, "mode"), obj.mode)
        out.guard_constant(AttrSource(source, "prev"), obj.prev)
        return ctx
    if isinstance(obj, InferenceBlock):
        ctx = CtxValue("inference", obj.mode, InferenceBlock, source)
        ctx.grad_before = obj.grad_before
        out.guard_constant(AttrSource(source, "mode"), obj.mode)
        out.guard_constant(AttrSource(source, "grad_before"), obj.grad_before)
        return ctx
    if isinstance(obj, SavedHooksBlock):
        from .state_blocks import ctx_from_block
        return ctx_from_block(out, obj, source)
    if isinstance(obj, DeviceBlock):  # NOTE [Device blocks]
        out.guard_constant(AttrSource(source, "device"), obj.device)
        return CtxValue("device", obj.device, DeviceBlock, source)
    if getitem_mode.is_mode_object(obj):  # NOTE [Getitem-to-index blocks]: a block carried across a break
        return CtxValue("getitem_to_index", None, type(obj), source)
    if type(obj) in AUTOCAST_CLASSES or type(obj) in DEVICE_AUTOCAST:
        names = ("device", "fast_dtype", "_enabled", "_cache_enabled")
        for name in names:
            out.guard_constant(AttrSource(source, name), getattr(obj, name))
        return CtxValue("autocast", tuple(getattr(obj, name) for name in names), type(obj), source)
    raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"context manager object {type(obj).__name__}")


def enter(tx, ctx: Value) -> tuple[Value, Value]:
    """BEFORE_WITH: returns (the bound exit to push, the value `as` binds)."""
    if isinstance(ctx, ConstantValue) and isinstance(ctx.as_constant(), torch.device):  # NOTE [Device blocks]
        ctx = CtxValue("device", ctx.as_constant(), torch.device)
    if isinstance(ctx, CtxValue) and ctx.kind == "device":
        saved, tx.output.default_device = tx.output.default_device, ctx.mode
        return ExitValue(ctx, saved), ConstantValue(ctx.mode) if ctx.cls is torch.device else ConstantValue(None)
    if isinstance(ctx, CtxValue):
        out = tx.output
        _note_entered(out, ctx, True)  # NOTE [One torch manager entered twice]
        if ctx.kind == "grad":
            saved = getattr(ctx, "mode_before_init", out.grad_enabled)
            _store_prev(out, ctx, saved)
            out.set_grad_enabled(ctx.mode)
        elif ctx.kind == "inference":
            if hasattr(ctx, "grad_before"):  # an InferenceBlock sets the grad mode first
                out.set_grad_enabled(ctx.grad_before)
            saved = (out.grad_enabled, out.record_effect(grad_mode._enter_inference_mode, (ctx.mode,)),
                     out.inference_mode)
            saved[1].meta["grad_before"] = saved[0]  # what exiting restores (graph.output)
            out.open_regions.append(saved[1])
            out.grad_enabled = not ctx.mode  # inference_mode(False) enables grad, as eager does
            out.inference_mode = ctx.mode
        elif ctx.kind == "null":  # NOTE [Profiler blocks]
            from .state_blocks import OpaqueProfilerValue
            return ExitValue(ctx, None), OpaqueProfilerValue(ctx.cls, getattr(ctx, "made_at", None))
        elif ctx.kind == "saved_hooks":  # NOTE [Saved-tensors-hooks blocks]
            from .state_blocks import enter_saved_hooks
            saved = enter_saved_hooks(out, ctx.mode)
        elif ctx.kind == "getitem_to_index":  # NOTE [Getitem-to-index blocks]
            saved = getitem_mode.enter(out)
        elif ctx.kind == "tf_subclass":  # NOTE [Inlined __torch_function__]
            from .torch_function_inline import enter_disabled
            saved = enter_disabled(out)
        else:
            device_type, dtype, enabled, cache = ctx.mode
            node = out.record_effect(autocast_mode._enter_autocast, (device_type, dtype, enabled, cache))
            out.autocast_stack.append((device_type, dtype, enabled, cache))
            out.open_regions.append(node)
            saved = node
        return ExitValue(ctx, saved), ctx if ctx.kind == "autocast" else ConstantValue(None)  # autocast's is self
    from .generator_ctx import adopt_outside_generator_cm
    ctx = adopt_outside_generator_cm(tx, ctx) or ctx  # NOTE [Generator context managers from outside]
    if isinstance(ctx, (ObjectValue, NewObjectValue)):
        return _exit_method(tx, ctx), tx.call_special_of(ctx, "__enter__", [], {})
    from .generator_ctx import GenCtxValue, GenMethodValue, gen_enter
    if isinstance(ctx, GenCtxValue):  # NOTE [Generator context managers]
        entered = gen_enter(tx, ctx)
        return GenMethodValue(ctx, "__exit__"), entered
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"with-block over {ctx.describe()}")


# NOTE [Managers' methods looked up on the class]: `with o:` looks `__enter__`/`__exit__` up on type(o) only
# (CPython's special method lookup), so instance attributes of those names (mock-style patching) are ignored.
# The trace called the instance's (hhuntG5 HIGH-6: eager 6 and the class's log, framejit 60 and the
# instance's). `__enter__` is now called as a special method (translator.call_special_of) and a Python
# `__exit__` is the class's function bound to the manager; other `__exit__`s are read as before.
def _exit_method(tx, ctx: Value) -> Value:
    from . import lookup
    from .values import BoundMethodValue, ClassValue
    cls = ctx.python_type()
    if isinstance(lookup.mro_lookup(cls, "__exit__")[1], types.FunctionType):
        return BoundMethodValue(tx.getattr(ClassValue(cls), "__exit__"), ctx)
    return tx.getattr(ctx, "__exit__")


# NOTE [Entering managers from outside]: `no_grad.__enter__` and `enable_grad.__enter__` store the grad mode in
# force on the object (`self.prev`), which their `__exit__` restores and which stays on it after the block. A
# manager from outside (an argument, a global) entered in the trace kept its old `prev` (no_grad's __init__
# sets False; enable_grad's sets none: reading it after the call raised AttributeError); the store is
# replayed after the graph (a finishing call on the object reloaded from its source).
def set_prev(manager: Any, prev: bool) -> None:
    manager.prev = prev


def _store_prev(out, ctx: CtxValue, prev: bool) -> None:
    if ctx.source is None:  # NOTE [Prev of managers made here]
        ctx.entered_prev = prev
        return
    if issubclass(ctx.cls, (grad_mode.no_grad, grad_mode.enable_grad)) and \
            ctx.cls.__enter__ in (grad_mode.no_grad.__enter__, grad_mode.enable_grad.__enter__):
        out.side_effects.record_finishing_call(set_prev, [ctx, ConstantValue(prev)])


# NOTE [Prev of managers made here]: `m = torch.no_grad(); m.__enter__(); ...; m.__exit__(...)` traced, then a
# break: codegen rebuilds `m` (mappings_runtime.grad_mode_manager) for the code after it, which read `m.prev`
# or exit `m` again as Python (review revC LOW-1). A fresh no_grad() has prev False and an enable_grad() none
# (AttributeError); eager's `m` holds the grad mode its last __enter__ saw, so the rebuilt one gets it too.
# NOTE [One torch manager entered twice]: one no_grad/autocast/inference_mode object entered again while its
# block is open (`with ac: ... with ac:`) overwrites what its first __enter__ saved (`prev`, autocast's dtype and
# cache state), so the outer exit restores the state inside the outer block: eager leaves autocast on after the
# function, or `ng.prev` True (review revC MED-2). The trace restores each block's own state, so such a frame runs
# eagerly as a whole, as eager runs it.
def _note_entered(out, ctx: CtxValue, entering: bool) -> None:
    if ctx.kind not in ("grad", "inference", "autocast"):
        return
    key = ("source", ctx.source) if ctx.source is not None else id(ctx)
    entered = out.__dict__.setdefault("entered_torch_managers", set())
    outside = out.__dict__.setdefault("outside_autocast_open", set())  # NOTE [Autocast objects open outside]
    openers = out.__dict__.setdefault("outside_autocast_openers", {})
    if not entering:
        entered.discard(key)
        outside.discard(key)
        openers.pop(key, None)
        return
    if ctx.kind == "autocast" and _from_outside(ctx):
        outside.add(key)
        openers[key] = out.tx_stack[-1] if out.tx_stack else None
    if key in entered or _maybe_open_outside(out, ctx):
        where = "inside its own block" if key in entered else "in its own state (its block may be open outside)"
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{ctx.describe()} entered again {where}: runs eagerly (its "
                        "first __enter__'s saved state is overwritten)")
        e.frame_eager = True
        raise e
    entered.add(key)


# NOTE [Autocast objects open outside]: the block of an autocast object read from outside (`ac` a global,
# `self.ac`) may already be open in a caller, or since a bare `ac.__enter__()` before a break (the resume function
# enters it again): eager's second __enter__ overwrites the saved state the caller's exit restores, which the
# compiled frame never writes (review revH HIGH-2: f's `with ac: inner()` with inner's `with ac:` left autocast
# off after f, the matmul after the block float32 where eager gives bfloat16). A trace cannot see a caller's open
# block; an open block of `ac` leaves its own state in force, so entering such an object while the device's
# autocast state (guarded at frame entry) already is the object's runs the frame eagerly: its __enter__ and
# __exit__ then run on the object, as eager's (the caller already runs eagerly: the re-entry it inlined). A break
# inside such a block runs the frame eagerly too (`break_in_outside_autocast`, translator.py): the resume function
# would exit a rebuilt manager, not the object, whose saved state a callee's or a later `with ac:` overwrites.
# Not covered: an `enabled=False` object, and a break inside the block of an object passed as an argument.
# A block an inlined callee opened is left out when that callee was still executing at the break and stood
# inside a try or with block there (`@torch.autocast(...)` on a function: its wrapper's `with autocast_instance:`
# around the call): such a break is no nested one (NOTE [Nested graph breaks]: it is the plain break at the root's
# call, whose callees then run through their hooks), so nothing of that call is in the root's graph or resume
# function and the block is not open where the root breaks; the callee's own frame, traced through its hook,
# runs eagerly by the rule above. Before, the root ran wholly eagerly too (the code around the call uncaptured).
def break_in_outside_autocast(out, e: Exception) -> bool:
    if not isinstance(e, Unsupported):
        return False
    openers = out.__dict__.get("outside_autocast_openers", {})
    return any(not _opened_in_broken_call(openers.get(key), e) for key in out.__dict__.get("outside_autocast_open", ()))


def _opened_in_broken_call(opener: Any, e: Exception) -> bool:
    """The block was opened by a callee executing when `e` was raised, standing inside a try or with block."""
    if opener is None or opener.parent is None or id(opener) not in e.__dict__.get("nest_tx_ids", ()) or \
            opener.current is None:
        return False
    from .normalize import normalize, with_depth
    insts = normalize(opener.code).insts
    inst = insts[opener.current.index]
    return inst.handler is not None or with_depth(insts, inst) != 0


def _from_outside(ctx: CtxValue) -> bool:
    """Read from the user's state (a global, an attribute), not an argument: a resume function's `___stack0` is
    the block a break rebuilt, and a manager passed in is left to the frame that made it (ExitStack.enter_context
    traced as a frame keeps its graph)."""
    return ctx.source is not None and not isinstance(ctx.source, LocalSource)


def _maybe_open_outside(out, ctx: CtxValue) -> bool:
    if ctx.kind != "autocast" or ctx.source is None or not ctx.mode[2]:  # enabled=False objects: not checked
        return False
    device_type, dtype = ctx.mode[:2]
    current = next(((e[1], e[2]) for e in reversed(out.autocast_stack) if e[0] == device_type), (None, False))
    return current[1] and current[0] == dtype


def exit_(tx, exit_value: ExitValue) -> Value:
    ctx, saved, out = exit_value.ctx, exit_value.saved, tx.output
    _note_entered(out, ctx, False)
    if ctx.kind == "grad":
        out.set_grad_enabled(saved)
    elif ctx.kind == "inference":
        grad_before, node, inference_before = saved
        out.record_effect(grad_mode._exit_inference_mode, (node,))
        out.open_regions.remove(node)
        out.grad_enabled = grad_before
        out.inference_mode = inference_before
    elif ctx.kind == "null":
        pass
    elif ctx.kind == "device":  # NOTE [Device blocks]
        out.default_device = saved
    elif ctx.kind == "saved_hooks":
        from .state_blocks import exit_saved_hooks
        exit_saved_hooks(out, saved)
    elif ctx.kind == "getitem_to_index":
        getitem_mode.exit_(out, saved)
    elif ctx.kind == "tf_subclass":
        from .torch_function_inline import exit_disabled
        exit_disabled(out, saved)
    else:
        out.record_effect(autocast_mode._exit_autocast, (saved,))
        out.open_regions.remove(saved)
        out.autocast_stack.pop()
    return ConstantValue(None)
