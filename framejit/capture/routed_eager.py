"""Frames that run eagerly keep their callees captured.

NOTE [Callees of frames run eagerly]: framejit runs a frame wholly as Python when it cannot capture it
soundly (its code reads its own locals: `locals()`, `eval`; a reader of the frame stack; no break point it
could resume from; an internal error; the recompile limit). That frame's calls went straight to their
callees, so nothing below it was captured either: `framejit.compile(model.generate)` (HF's generate has a
`locals()` in a branch) made 0 graphs where stock torch.compile, which skips only the frame itself and
still compiles the frames its calls enter, captures each decoding step's forward. Such a frame now runs a
copy of its code whose calls are routed as in a loop run as Python (NOTE [Callees routed in loops run as
Python] in python_loops.py): each callable that can be traced back in the bytecode is replaced, right after
it is loaded, by `route(callable)`'s answer, which calls a user or library function through its frame hook,
a module with a forward of its own (or a torch.nn layer's: NOTE [torch.nn layers routed]) and no hooks
through its forward's hook, and leaves everything else
(torch and the standard library, builtins, callees that name their caller, generator functions,
framejit.disable'd functions) to be called as it is. The copy has the same locals, line numbers, exception
table and closure, so what the frame itself computes and observes is eager's; only its callees' frames are
captured (each guarded, counted and logged as any frame).
A callee that reads frames two or more levels up (`sys._getframe(2)`, `inspect.stack()`, a helper it calls
that reads its caller's frame) would see framejit's hook frames where eager shows the eager frame (review
revK E1): a callee is called directly when its code, or the code of a module-level function it names (two
levels down, outside torch and the standard library), reads frames (`reads_frames_below`). That is a static
look at names, so a reader reached another way (a method of an argument) still sees the hook's frames, as
below any compiled function.
Not routed: generator and coroutine code (a copy would be a new function object per call), framejit's own
code, a function whose module's `__builtins__` were swapped after it was made (a function made now would
take the new ones: NOTE [Builtins of a function]), frames that run eagerly under a torch function or dispatch mode (their callees would meet the same
mode), and the eager reruns of a failing graph (NOTE [Graph failures rerun eagerly]), which run the
original code for that one call.
"""
from __future__ import annotations

import functools
import inspect
import os
import types

import bytecode
from bytecode import Instr

from . import emit, python_loops
from .resume import _copy_handler_depths

_NOT_ROUTED = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE
_FRAMEJIT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def routed_eager(fn: types.FunctionType, hooks) -> types.FunctionType:
    """`fn`, or a function running a copy of its code whose calls go through `hooks`' frame hooks (NOTE
    [Callees of frames run eagerly]); `hooks` is the request's hook.Hooks."""
    code = fn.__code__
    if hooks is None or code.co_flags & _NOT_ROUTED or code.co_filename.startswith(_FRAMEJIT_DIR):
        return fn
    key = ("routed eager", code)
    routed = hooks.by_key.get(key)
    if routed is None:
        try:
            routed = hooks.by_key[key] = _routed_code(code, hooks.call_hooked())
        except Exception:  # noqa: BLE001 - code the bytecode library cannot round-trip: run as it is
            routed = hooks.by_key[key] = code
    if routed is code:
        return fn
    new = types.FunctionType(routed, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    if new.__builtins__ is not fn.__builtins__:  # NOTE [Builtins of a function]: its module's were swapped since
        return fn
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new


def _routed_code(code: types.CodeType, route) -> types.CodeType:
    """`code` with its traceable calls routed through `route`, or `code` itself when none is."""
    bc = bytecode.Bytecode.from_code(code)
    items = list(bc)
    calls = sum(1 for item in items if isinstance(item, Instr) and item.name in ("CALL", "CALL_KW", "CALL_FUNCTION_EX"))
    if not calls:
        return code
    _copy_handler_depths(code, items)
    before = len(items)
    python_loops.route_calls(items, route, unpacking=True)
    if len(items) == before:
        return code
    bc.clear()
    bc.extend(emit.unpaired_locals(items))  # NOTE [Paired locals in copied code]
    return bc.to_code(stacksize=code.co_stacksize + 4, compute_exception_stack_depths=False)


_READS_BELOW: dict = {}


def reads_frames_below(fn: types.FunctionType, depth: int = 2) -> bool:
    """Whether `fn`'s code, or (down to `depth` levels) a function its code can reach by name, reads frames
    (NOTE [Callees of frames run eagerly]; frame_locals.reads_frames): module-level functions, the methods
    and static methods named on module-level objects and classes, functions in module-level dicts and
    partials, and the function's own function-valued defaults."""
    code = fn.__code__
    key = (code, id(fn.__globals__), depth)
    known = _READS_BELOW.get(key)
    if known is not None:  # before any import: routed calls ask on every call (python_loops._runtime)
        return known
    from .frame_locals import reads_frames
    if len(_READS_BELOW) > 4096:
        _READS_BELOW.clear()
    _READS_BELOW[key] = False  # recursion guard
    codes = [code, *(c for c in code.co_consts if isinstance(c, types.CodeType))]
    found = any(reads_frames(c) for c in codes)
    if not found and depth > 0:
        found = any(reads_frames_below(callee, depth - 1) for callee in _reachable(fn, codes))
    _READS_BELOW[key] = found
    return found


def _reachable(fn: types.FunctionType, codes: list) -> list:
    """User functions `fn`'s code can call by name (reads_frames_below), at most 64."""
    from .python_loops import _skipped
    names = {n for c in codes for n in c.co_names}
    found: list = []

    def add(obj) -> None:
        if isinstance(obj, functools.partial):
            obj = obj.func
        if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            obj = obj.__func__
        if isinstance(obj, types.FunctionType) and not _skipped(obj.__code__) and len(found) < 64:
            found.append(obj)

    for value in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
        add(value)
    for name in names:
        obj = fn.__globals__.get(name)
        if obj is None or isinstance(obj, types.ModuleType) and _skipped_module(obj):
            continue
        add(obj)
        if isinstance(obj, dict) and len(obj) <= 64:
            for value in list(obj.values()):
                add(value)
        elif not isinstance(obj, (types.FunctionType, int, float, str, bytes, tuple, list)):
            for attr in names:  # `U.g()`, `Util.sg()`, `ns.grand()`: an attribute the code names
                holder = obj if isinstance(obj, (type, types.ModuleType)) else type(obj)
                add(inspect.getattr_static(holder, attr, None))
                if not isinstance(obj, (type, types.ModuleType)):
                    add(vars(obj).get(attr) if hasattr(obj, "__dict__") else None)
    return found


def _skipped_module(module: types.ModuleType) -> bool:
    from .python_loops import _skipped
    path = getattr(module, "__file__", None)
    return path is None or _skipped(types.SimpleNamespace(co_filename=path))
