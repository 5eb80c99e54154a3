"""The scaled-dot-product-attention backend flags as traced state: `torch.nn.attention.sdpa_kernel(...)`.

NOTE [SDPA backend flags]: `sdpa_kernel(backends)` is a `@contextlib.contextmanager` whose generator reads
the flags (`torch._C._get_<name>_sdp_enabled()`, through `_cur_sdpa_kernel_backends`), sets them
(`torch._C._set_sdp_use_<name>(b)`, through `_sdpa_kernel`) and sets the saved ones back in its
`finally`; it is traced like any generator context manager (NOTE [Generator context managers]), and
`SDPBackend` members are constants (values/builder.py). Here the flags are state of the trace, as the
default dtype is (NOTE [Default dtype changes]): a flag's value at frame entry is read when the trace
first needs it and guarded (one guard line per flag calls its getter); a getter answers the flag's value
at that point of the trace; a setter with a constant bool records its call as a node, so the ops after it
in the graph run under the new flags, and changes the trace's view. A graph ends with the flags of its
entry (last nodes set changed flags back), and the code after the graph sets the flags the traced code
reached. The priority order (`set_priority=True`) is not modelled: its getter and setter are breaks.
Entries that change flags are not persisted (state_blocks.default_dtype_changed).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.attention as attention

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, Value

NAMES = tuple(n for n in ("cudnn", "flash", "mem_efficient", "math", "overrideable", "fa3")
              if hasattr(torch._C, f"_get_{n}_sdp_enabled") and hasattr(torch._C, f"_set_sdp_use_{n}"))
GETTERS = {getattr(torch._C, f"_get_{n}_sdp_enabled"): n for n in NAMES}
SETTERS = {getattr(torch._C, f"_set_sdp_use_{n}"): n for n in NAMES}
_SETTER_OF = {n: f for f, n in SETTERS.items()}
_GETTER_OF = {n: f for f, n in GETTERS.items()}


def _flags(out) -> dict[str, bool]:
    """The trace's view of the flags read or set so far (name -> value)."""
    return out.__dict__.setdefault("sdp_flags", {})


def _entry(out) -> dict[str, bool]:
    return out.__dict__.setdefault("sdp_entry", {})


def _read(out, name: str) -> bool:
    """The flag at this point of the trace; its value at entry is guarded when first read."""
    flags, entry = _flags(out), _entry(out)
    if name not in entry:
        value = bool(_GETTER_OF[name]())
        call = f"{out.name_of(_GETTER_OF[name], f'get_{name}_sdp_enabled')}()"
        out.add_guard("GLOBAL_STATE", f"{call} is {value}", None, expected=repr(value), actual=call)
        entry[name] = value
        flags.setdefault(name, value)
    return flags[name]


def get_flag(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if args or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} with arguments")
    return ConstantValue(_read(tx.output, GETTERS[fn]))


def set_flag(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs or not args[0].is_constant() or type(args[0].as_constant()) is not bool:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} of anything but a constant bool")
    name, value, out = SETTERS[fn], args[0].as_constant(), tx.output
    _read(out, name)
    out.record_effect(fn, (value,))
    _flags(out)[name] = value
    return ConstantValue(None)


def changed(out) -> dict[str, bool]:
    """Flags whose value at this point of the trace differs from the entry's: name -> current value."""
    entry = _entry(out)
    return {n: v for n, v in _flags(out).items() if v != entry[n]}


def end_flags(out) -> None:
    """At the end of a graph: changed flags back to their entry values (the code after sets them)."""
    entry = _entry(out)
    for name in changed(out):
        out.record_effect(_SETTER_OF[name], (entry[name],))


def restore_flags(cg, out) -> None:
    """After the graph: set each changed flag to the value the traced code reached."""
    for name, value in changed(out).items():
        cg.push_null()
        cg.load_const(_SETTER_OF[name])
        cg.load_const(value)
        cg.call(1)
        cg.emit("POP_TOP")


def restores_for(targets: set) -> tuple:
    """(setter, (current value,)) for each flag a graph with call targets `targets` may set."""
    return tuple((setter, (bool(_GETTER_OF[name]()),)) for setter, name in SETTERS.items() if setter in targets)


@contextlib.contextmanager
def trace_flags(out):
    """The real flags set to the trace's view of them for a while (a function run at trace time on fake
    tensors, NOTE [Allowed in graph]), then set back."""
    saved = {n: bool(_GETTER_OF[n]()) for n in _flags(out)}
    try:
        for name, value in _flags(out).items():
            if saved[name] != value:
                _SETTER_OF[name](value)
        yield
    finally:
        for name, value in saved.items():
            if bool(_GETTER_OF[name]()) != value:
                _SETTER_OF[name](value)


def touched(out) -> bool:
    """The traced code leaves some flag changed (such an entry is not persisted)."""
    return bool(changed(out))


def _unsupported(tx, args, kwargs) -> Value:
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "the SDPA backend priority order (sdpa_kernel(set_priority=True))")


def _inline(fn: Any):
    """A handler that inlines `fn`'s Python code (a torch function would otherwise be a graph op)."""
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        from .values import UserFunctionValue
        return tx.inline(UserFunctionValue(fn), args, kwargs)
    return handler


def _sdpa_kernel_cm(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`sdpa_kernel(...)`: contextlib's helper around the generator function (NOTE [SDPA backend flags])."""
    from .generator_ctx import generator_cm
    from .values import UserFunctionValue
    return generator_cm(tx, UserFunctionValue(attention.sdpa_kernel.__wrapped__), list(args), dict(kwargs))


def register(handlers: dict) -> None:
    handlers[attention.sdpa_kernel] = _sdpa_kernel_cm
    from .module_hooks import TRACE_TIME  # also where contextlib's helper is inlined as code
    TRACE_TIME[attention.sdpa_kernel] = _sdpa_kernel_cm
    handlers[attention._cur_sdpa_kernel_backends] = _inline(attention._cur_sdpa_kernel_backends)
    handlers[attention._sdpa_kernel] = _inline(attention._sdpa_kernel)
    import torch.backends.cuda as cuda_backend  # enable_math_sdp(b), math_sdp_enabled(), ...: their Python
    for name in dir(cuda_backend):
        if name.endswith("_sdp_enabled") or (name.startswith("enable_") and name.endswith("_sdp")):
            handlers[getattr(cuda_backend, name)] = _inline(getattr(cuda_backend, name))
    for getter in GETTERS:
        handlers[getter] = lambda tx, args, kwargs, fn=getter: get_flag(tx, fn, args, kwargs)
    for setter in SETTERS:
        handlers[setter] = lambda tx, args, kwargs, fn=setter: set_flag(tx, fn, args, kwargs)
    for name in ("_get_sdp_priority_order", "_set_sdp_priority_order"):
        if hasattr(torch._C, name):
            handlers[getattr(torch._C, name)] = _unsupported


__all__ = ["GETTERS", "NAMES", "SETTERS", "changed", "end_flags", "get_flag", "register", "restore_flags",
           "restores_for", "set_flag", "touched"]
