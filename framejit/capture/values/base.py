"""The base of abstract values, and the simple ones: constants and NULL.

A Value stands for a Python object during tracing. It may carry a Source (where the object lives, for
guarding and reloading); values made while tracing have none. Values are immutable except mutable
containers created while tracing (lists, dicts, iterators, cells), whose mutation is local to the trace.
"""
from __future__ import annotations

import itertools
from typing import Any

from ..breaks import BreakKind, Unsupported
from ..sources import Source

# NOTE [Values made in order]: the mutable values made while tracing (lists, dicts, sets, objects of user
# classes) take a number from this count when they are made, so code can tell the values made after a point
# of the trace from those that existed before it (builtins._calls_made_early: map's function may initialise
# objects it makes itself). A copy of a value keeps its number (it then counts as old: the safe side).
MADE_ORDER = itertools.count()


class Value:
    source: Source | None = None

    def python_type(self) -> type:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"type of {self!r} is unknown")

    def is_constant(self) -> bool:
        return False

    def as_constant(self) -> Any:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{self.describe()} is not a Python constant here")

    def describe(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return self.describe()


class ConstantValue(Value):
    """A Python constant (int, float, bool, str, None, Ellipsis, slice, dtype, device, Size, code, ...)."""

    def __init__(self, value: Any, source: Source | None = None) -> None:
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.value

    def describe(self) -> str:
        return f"Constant({self.value!r})"


class LazyArg:
    """A root-frame argument not yet read: wrapped (and guarded) on first use only. Not a Value: code
    that rebuilds one after a graph loads the argument itself."""

    __slots__ = ("obj", "name")

    def __init__(self, obj: Any, name: str) -> None:
        self.obj = obj
        self.name = name


class NullValue(Value):
    """The NULL that CPython pushes below a callable (PUSH_NULL, LOAD_GLOBAL with the low bit)."""

    def describe(self) -> str:
        return "NULL"


NULL = NullValue()


def const(value: Any) -> ConstantValue:
    return ConstantValue(value)
