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
"""
from __future__ import annotations

import weakref
from typing import Any

from .breaks import BreakKind, Unsupported

_MADE: weakref.WeakSet = weakref.WeakSet()


def note_made_class(cls: Any) -> None:
    """`cls` was made while tracing by a factory that makes a new class on every eager call."""
    if isinstance(cls, type):
        _MADE.add(cls)


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


def check_code(cg) -> None:
    """Refuse transformed code that loads a class made per call as a constant (see the NOTE)."""
    if not _MADE:
        return
    insts = [*getattr(cg, "prologue", ()), *cg.insts]
    for index, inst in enumerate(insts):
        if getattr(inst, "name", None) == "LOAD_CONST":
            found = _made_class_in(inst.arg)
            if found is not None and not _reads_immutable(found, insts[index + 1:index + 4]):
                raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"the class {found.__qualname__} made in the frame "
                                                               "(a new one on every call) leaves it")


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
