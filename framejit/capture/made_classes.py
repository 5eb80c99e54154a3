"""Classes a library factory makes while tracing (NOTE [Classes made per call]).

NOTE [Classes made per call]: `collections.namedtuple(...)` (and `typing.NamedTuple(...)`, which calls it) with
constant arguments, and the Enum functional API (`enum.Enum("Mode", names)`), are evaluated at trace time
(NOTE [Pure library checks on constants] in library_substitutes.py; calls.py folds Enum calls): the class is
made once. Eager makes a new class on every call, so that one class is right only while it stays inside the
frame: used to build instances whose fields are read, its name and `_fields` read. A class that the
transformed code would load as a constant (returned, stored by a replayed effect, passed to a resume function,
or an instance of it rebuilt: the class or an instance of it among its LOAD_CONSTs) would be the same object
on every call, and attributes a caller set on it showed up in later calls (hhuntG4 MED-3): `check_code`
refuses such code (Unsupported), and the frame runs eagerly.

Except where the class can be made again per call: a `collections.namedtuple(...)` call whose arguments are
plain values (strings, numbers, None, and lists/tuples of them), in a frame that returns without a break. Its
transformed code then calls the factory again at entry, with the arguments (module included) the trace
passed, and loads that new class wherever it loaded the trace-time one, so the returned class, the instances
built of it and the effects that store it all see one new class per call, as eager makes (PyTorch's
test_namedtuple returns `mytuple(tmp.x, tmp[1], tmp.xy + b)` of a class made in the frame: one graph, no
eager frame). Only loads of the class itself are rewritten; a constant instance of it, or a constant tuple
holding it, still refuses. The class is made again only if the new one is like the trace-time one (name,
module, fields, defaults and `__dict__` keys: the trace wrote nothing into it). Frames that break keep the
refusal: the class would reach the resume function as a new object on every call.
"""
from __future__ import annotations

import weakref
from typing import Any

from bytecode import Instr

from .breaks import BreakKind, Unsupported

_MADE: weakref.WeakSet = weakref.WeakSet()
_CALLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class -> (factory, args, kwargs) to remake it


def note_made_class(cls: Any, factory: Any = None, args: tuple = (), kwargs: dict | None = None) -> None:
    """`cls` was made while tracing by a factory that makes a new class on every eager call; `factory(*args,
    **kwargs)` made it, when it is a call that can be made again per call (see the NOTE)."""
    if isinstance(cls, type):
        _MADE.add(cls)
        kwargs = kwargs or {}
        if factory is not None and all(_plain(v) for v in (*args, *kwargs.values())):
            _CALLS[cls] = (factory, tuple(args), dict(kwargs))


def _plain(value: Any, depth: int = 0) -> bool:
    if type(value) in (str, int, float, bool, type(None)):
        return True
    return type(value) in (list, tuple) and depth < 3 and all(_plain(v, depth + 1) for v in value)


def _fresh(value: Any) -> Any:
    """`value` with every list a new one, as the eager call's literal arguments are."""
    if type(value) in (list, tuple):
        return type(value)(_fresh(v) for v in value)
    return value


def remake_class(factory: Any, args: tuple, kwargs: dict) -> type:
    """The call the transformed code makes at entry: the class made again (see the NOTE)."""
    return factory(*_fresh(args), **_fresh_kwargs(kwargs))


def _fresh_kwargs(kwargs: dict) -> dict:
    return {k: _fresh(v) for k, v in kwargs.items()}


def _summary(cls: type) -> tuple:
    return (cls.__name__, cls.__qualname__, cls.__module__, cls.__bases__, tuple(cls.__dict__),
            getattr(cls, "_fields", None), getattr(cls, "_field_defaults", None))


def _remade_call(cls: type) -> tuple | None:
    """The recorded factory call of `cls`, if making it again gives a class like the trace-time one."""
    call = _CALLS.get(cls)
    if call is None:
        return None
    try:
        same = _summary(remake_class(*call)) == _summary(cls)
    except Exception:  # noqa: BLE001 - not a call this makes again
        return None
    return call if same else None


def _made_class_in(value: Any, depth: int = 0) -> type | None:
    if not _MADE or depth > 8:
        return None
    try:
        if isinstance(value, type) and value in _MADE:
            return value
        if type(value) in _MADE:
            return type(value)
    except TypeError:  # an unhashable or odd constant
        return None
    if type(value) in (tuple, frozenset) or isinstance(value, tuple):
        for item in value:
            found = _made_class_in(item, depth + 1)
            if found is not None:
                return found
    return None


def check_code(cg, remake: bool = False) -> None:
    """Refuse transformed code that loads a class made per call as a constant, or (`remake`: a frame that
    returns without a break) make such a class again at entry where its factory call allows (see the NOTE)."""
    if not _MADE:
        return
    loads = []  # (instruction list, index, class, factory call)
    for insts in (getattr(cg, "prologue", []), cg.insts):
        for index, inst in enumerate(insts):
            if getattr(inst, "name", None) != "LOAD_CONST":
                continue
            found = _made_class_in(inst.arg)
            if found is None or _reads_immutable(found, insts[index + 1:index + 4]):
                continue
            call = _remade_call(found) if remake and inst.arg is found else None
            if call is None:
                raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"the class {found.__qualname__} made in the frame "
                                                               "(a new one on every call) leaves it")
            loads.append((insts, index, found, call))
    remade: dict[type, str] = {}
    for insts, index, found, call in loads:
        name = remade.setdefault(found, f"___made_class{len(remade)}")
        insts[index] = Instr("LOAD_FAST", name, lineno=insts[index].lineno)
    for found, name in remade.items():
        _emit_remake(cg, _CALLS[found], name)


def _emit_remake(cg, call: tuple, name: str) -> None:
    """`name = remake_class(factory, args, kwargs)` at the front of the prologue, which runs at entry."""
    saved, cg.insts = cg.insts, []
    try:
        cg.push_null()
        cg.load_const(remake_class)
        for part in call:
            cg.load_const(part)
        cg.call(len(call))
        cg.store_fast(name)
        cg.prologue[:0] = cg.insts
    finally:
        cg.insts = saved


def _reads_immutable(cls: type, after: list) -> bool:
    """Whether the class is loaded only to reload an immutable value read from it while tracing (its
    `__name__`, `__module__`, `_fields`: `cls.name` or `cls.__dict__[key]`), which is the same on every call."""
    names = [getattr(i, "name", None) for i in after]
    if not names or names[0] != "LOAD_ATTR":
        return False
    attr = after[0].arg[-1] if type(after[0].arg) is tuple else after[0].arg
    try:
        value = getattr(cls, attr)
        if attr == "__dict__" and names[1:3] == ["LOAD_CONST", "BINARY_SUBSCR"]:
            value = value[after[1].arg]
    except Exception:  # noqa: BLE001 - not a read this recognises
        return False
    return _immutable(value)


def _immutable(value: Any) -> bool:
    if type(value) in (str, int, float, bool, bytes, type(None)):
        return True
    return type(value) is tuple and all(_immutable(v) for v in value)
