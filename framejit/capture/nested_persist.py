"""Entries of nested graph breaks persisted in the frame cache (NOTE [Nested breaks persisted]).

NOTE [Nested breaks persisted]: a nested break (NOTE [Nested graph breaks] in nested_breaks.py) makes
functions no locator finds: the root's transformed code loads the hooked R0 and F1 (the functions standing
for the frames around the step, NOTE [Frames around a nested break's step]), and R0's trace inlines
R1..Rn, whose code objects its guards name (NOTE [Code replaced]) and whose hashes are its callees'. All of
them are deterministic functions of plain data, so each is described by that data and made again on load:
- Rk (`raw_resume`) by its frame's original code (a locator and the code hash, checked on load: a frame
  whose source changed makes the entry a miss, traced again), the resume point, stack layout, live names,
  its globals' module and R(k+1)'s description: ("nested_raw", ...), also a locator kind (locator_kinds.py)
  for guards and callees of R0's entries;
- R0's hook by R0's description and the dynamic state the break handed it: ("nested", ...);
- F1 by each frame's code, globals' module and line, and the step's body (a call with its keyword names,
  a call with *args, or the instruction itself): ("nested_step", ...).
Made again in a new process, Rk's code is byte for byte the code of the cold process (its constant R(k+1)
is hashed by its own code: NOTE [Function constants hashed by their code] in locators.py), so R0's entries are
found under the same key. A frame with a closure, or globals that are no module's, is not described
(NotPersistable): that entry is kept in memory only and traced again by a new process, as before.
"""
from __future__ import annotations

import sys
import types
from typing import Any

import bytecode
from bytecode import Instr

from .locators import NotPersistable, _imported, code_hash, code_locator, resolve


def _module_of(f_globals: dict) -> str:
    name = f_globals.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or module.__dict__ is not f_globals:
        raise NotPersistable("a frame of the nested break has the globals of no module")
    return name


def _code_of(code: types.CodeType, module: str) -> tuple:
    locator = code_locator(code, [module])
    if locator is None:
        raise NotPersistable(f"the code of {code.co_qualname} (a frame of the nested break) cannot be found by name")
    return locator, code_hash(code)


def _code_from(found: tuple, fn: Any) -> types.CodeType:
    locator, digest = found
    code = resolve(locator, fn)
    code = code if isinstance(code, types.CodeType) else getattr(code, "__code__", None)
    if not isinstance(code, types.CodeType) or code_hash(code) != digest:
        raise NotPersistable(f"{getattr(code, 'co_qualname', locator)} changed since it was cached")
    return code


def describe_raw(f: Any, fn: Any) -> tuple | None:
    """The locator of a plain resume function Rk, or None for any other object (`fn`: the frame whose entry
    names it: a closure is described only as that frame's own)."""
    made = getattr(f, "__framejit_nested__", None) if isinstance(f, types.FunctionType) else None
    if made is None:
        return None
    code, target, layout, names, inner, inner_args = made
    module = _module_of(f.__globals__)
    return ("nested_raw", _code_of(code, module), module, target, tuple(layout), tuple(names),
            None if inner is None else describe_raw(inner, fn), inner_args, _own_closure(f.__closure__, fn),
            f.__framejit_module_called__)


def _own_closure(closure: tuple | None, fn: Any) -> bool:
    """A resume function made with the closure of the frame that broke (the root's: its cells are those of the
    function whose entry is loaded, as a plain break's resume function's are) is described as such; any other
    closure is not described."""
    if not closure:
        return False
    own = getattr(fn, "__closure__", None) or ()
    if len(own) != len(closure) or any(a is not b for a, b in zip(own, closure)):
        raise NotPersistable("a frame of the nested break below the root has a closure")
    return True


def check(frames: list, fn: Any) -> None:
    """Raises NotPersistable where the functions a nested break over `frames` (nested_breaks.Frame) makes would
    not be described: checked before its graph is compiled (the plain break is taken instead)."""
    for frame in frames:
        _code_of(frame.code, _module_of(frame.tx.f_globals))
        _own_closure(frame.closure, fn)


def resolve_raw(d: tuple, fn: Any) -> types.FunctionType:
    from .nested_breaks import raw_resume
    _, found, module, target, layout, names, inner, inner_args, closure, module_called = d
    inner_fn = None if inner is None else resolve_raw(inner, fn)
    code = _code_from(found, fn)
    cells = fn.__closure__ if closure else None
    if len(cells or ()) != len(code.co_freevars):
        raise NotPersistable(f"{code.co_qualname} has other free variables than the function loading the entry")
    return raw_resume(code, target, layout, names, _imported(module).__dict__, cells, inner_fn, inner_args,
                      module_called)


def describe(value: Any, fn: Any, dynamic_state) -> tuple | None:
    """The description of R0's hook or of F1 (a LOAD_CONST operand of the code of `fn`'s entry), or None for
    any other object; `dynamic_state(hook)` is what the break handed the hook (persisted_code)."""
    step = getattr(value, "__framejit_step__", None) if isinstance(value, types.FunctionType) else None
    if step is not None:
        frames, n, spec, raises = step
        described = []
        for code, f_globals, lineno in frames:
            module = _module_of(f_globals)
            described.append((_code_of(code, module), module, lineno if type(lineno) is int else None))
        if spec[0] == "simple":
            spec = ("simple", tuple(_plain(i) for i in spec[1]), spec[2])
        return ("nested_step", tuple(described), n, spec, raises)
    if not getattr(value, "nested_root", False):
        return None
    return ("nested", describe_raw(value.fn, fn), dynamic_state(value))


def _plain(inst: Instr) -> tuple:
    arg = inst.arg
    if not (arg is bytecode.UNSET or isinstance(arg, (int, str)) or type(arg).__module__.startswith("bytecode")):
        raise NotPersistable(f"the step {inst.name} has an operand of type {type(arg).__name__}")
    return (inst.name, None if arg is bytecode.UNSET else arg, arg is not bytecode.UNSET,
            inst.lineno if type(inst.lineno) is int else None)


def load(d: tuple, fn: Any, hooks, restore_state) -> Any:
    """The object `describe` described, made again in this process (`hooks`: the request's Hooks)."""
    from .nested_breaks import frame_functions, hooked_root
    if d[0] == "nested":
        return restore_state(hooked_root(hooks, resolve_raw(d[1], fn)), d[2])
    _, described, n, spec, raises = d
    frames = [(_code_from(found, fn), _imported(module).__dict__, lineno) for found, module, lineno in described]
    if spec[0] == "simple":
        spec = ("simple", tuple(Instr(name, arg, lineno=line) if has_arg else Instr(name, lineno=line)
                                for name, arg, has_arg, line in spec[1]), spec[2])
    return frame_functions(frames, n, spec, raises)


__all__ = ["check", "describe", "describe_raw", "load", "resolve_raw"]
