"""Immutable values of the standard library that a dict or set from outside may be keyed by.

NOTE [Immutable values as dict keys]: a dict keyed by namedtuples (`scales[Key(0, 1)]`), frozensets,
complex numbers, ranges or dates was "non-constant keys": where it was an argument no break could be taken at
its load and the whole frame ran eagerly (hhuntG6 M1; even `len(d)`), and as a global read mid-frame the
resume function after the break did. These keys are values: their classes hash and compare them by what they
hold, which no code can change (C types without writable state; a namedtuple is a tuple without an instance
dict whose classes define none of tuple's methods, guarded absent by `guard_key_classes`). Holding constant keys
only, they are constant keys, guarded as others are (values/builder._keys_check): exact type, and `==` where
`==` tells them apart, else by their parts (guards/same_values._by_parts: a frozenset's items with their
types, in iteration order, which equal frozensets need not share; a range's start, stop and step), float zeros
told apart by sign. So `Key(0, 1)` misses an entry made for `(0, 1)`, `range(0)` one made for `range(5, 5)`.
NaN in one (`complex(nan, 0)`) equals no copy of itself: not a constant. A frozenset holds only ints, bools,
strs, bytes and None here (no float zeros to tell apart). A date or timedelta argument (the key looked up) is
a constant too (`wrap_immutable`). Not constants (a break where they are used): datetimes and times (`==`
ignores `fold`, which `str` shows), Decimals (arithmetic on one folded in the trace would use the decimal
context of that moment, which no guard pins), Fractions (a Python class with writable slots, whose copy is
itself) and instances of classes with their own `__hash__` or `__eq__`. The guard compares values and
iteration orders, never hashes, so an entry persisted under one hash seed serves another only where the order
it read is the same.
"""
from __future__ import annotations

import datetime
import math
from typing import Any, Callable

def _namedtuple_key(key: Any) -> bool:
    """An instance (without an instance dict) of a namedtuple class none of whose classes before tuple defines
    one of tuple's methods (values/plain_bases; `guard_key_classes` guards that they still do not)."""
    cls = type(key)
    if not (isinstance(key, tuple) and isinstance(getattr(cls, "_fields", None), tuple)) or hasattr(key, "__dict__"):
        return False
    from .plain_bases import _TUPLE_METHODS
    own = cls.__mro__[:cls.__mro__.index(tuple)]
    return not any(name in vars(klass) for klass in own for name in _TUPLE_METHODS)


def guard_key_classes(out, key: Any) -> None:
    """Guard that the namedtuple classes of `key` (nested in tuples too) still define none of tuple's methods, so
    that a `__hash__` or `__eq__` set on one later recompiles."""
    if isinstance(key, tuple):
        if type(key) is not tuple:
            from .plain_bases import plain_namedtuple_class
            plain_namedtuple_class(out, type(key))
        for item in key:
            guard_key_classes(out, item)


def immutable_key(key: Any, constant: Callable[[Any], bool]) -> bool | None:
    """Whether `key` (of a type named here) is a constant key; None for a key of another type. `constant`:
    the test for items (values/builder._constant_key)."""
    cls = type(key)
    if cls is complex:
        return not (math.isnan(key.real) or math.isnan(key.imag))
    if cls is range:
        return True
    if cls in (datetime.date, datetime.timedelta):
        return True
    if cls is frozenset:
        return all(type(k) in (int, bool, str, bytes, type(None)) for k in key)
    if _namedtuple_key(key):
        return all(constant(k) for k in key)
    return None


def wrap_immutable(out, obj: Any, source) -> Any:
    """A range, date or timedelta from outside, as a constant guarded by its type and value (None: another object).
    A date or timedelta compares equal only to the same date (NOTE [Immutable values as dict keys])."""
    from ..sources import AttrSource
    from .base import ConstantValue
    if type(obj) is range:
        # NOTE [Ranges from outside]: a range is immutable; one live at a graph break (`r = range(n)` before a
        # print(), random.sample's `population`) is a constant of the resume function, guarded by its type and
        # its start, stop and step (== on ranges compares their items: range(0) == range(5, 5)). It was
        # "L['r'] is a range", and the resume function ran wholly eagerly.
        out.guard_type(source, range)
        for part in ("start", "stop", "step"):
            out.guard_constant(AttrSource(source, part), getattr(obj, part))
        return ConstantValue(obj, source)
    if type(obj) in (datetime.date, datetime.timedelta):
        out.guard_constant(source, obj)  # its type, and `==`
        return ConstantValue(obj, source)
    return None
