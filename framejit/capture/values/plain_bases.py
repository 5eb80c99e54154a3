"""Library types a value is modelled as only while its class keeps the library's behaviour."""
from __future__ import annotations

from typing import Any


# NOTE [Subclasses modelled as their base]: a value is modelled by its library base's behaviour only while
# its class keeps that behaviour. A functools.partial subclass with its own `__call__` was called as a plain
# partial, and a namedtuple subclass's own `__iter__`/`__getitem__`/`__len__`/... were ignored (`a, b = n`
# unpacked the fields where eager's `__iter__` gives (7, 8)). Only an exact partial is a PartialValue; a
# namedtuple is one while no class of it before tuple defines a sequence method (guarded absent, so one
# added later recompiles); others are objects, their methods inlined.
_TUPLE_METHODS = ("__iter__", "__getitem__", "__len__", "__contains__", "__add__", "__radd__", "__mul__",
                  "__rmul__", "__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
                  "__reversed__", "__getattribute__", "index", "count")


def plain_namedtuple(out, obj: Any) -> bool:
    """A namedtuple whose classes before tuple define none of tuple's methods (guarded absent)."""
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields") and plain_namedtuple_class(out, type(obj))


def plain_namedtuple_class(out, cls: type) -> bool:
    """No class of the namedtuple class `cls` before tuple defines one of tuple's methods (guarded absent); a
    class made while tracing (a call of it) is modelled as a namedtuple only then."""
    own = cls.__mro__[:cls.__mro__.index(tuple)]
    if any(name in vars(klass) for klass in own for name in _TUPLE_METHODS):
        return False
    from ..lookup import guard_class_absent, guard_mro
    guard_mro(out, cls)
    for name in _TUPLE_METHODS:
        guard_class_absent(out, own, name)
    return True
