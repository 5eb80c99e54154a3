"""`collections.abc` mixin methods that catch exceptions, traced without exception handling.

NOTE [Mapping mixins]: `Mapping.get(key, default)` is `try: return self[key] except KeyError: return
default`, and `Mapping.__contains__` the same returning a bool. Tracing does not run exception handlers
inside inlined code, so these are modelled at the call: `self[key]` is traced (the class's own
`__getitem__`), and a KeyError it raises while tracing (a UserException) becomes the default / False.
Catching at the call boundary is what the handler does: the callee's frame is gone, effects it recorded
before raising happened in eager too, and the caller's stack and locals are untouched. Any other
exception propagates unchanged.
"""
from __future__ import annotations

import collections.abc
from typing import Callable

from .breaks import BreakKind, Unsupported, UserException
from .values import BoundMethodValue, ConstantValue, NewObjectValue, ObjectValue, UserFunctionValue, Value


def _lookup(tx, obj: Value, key: Value) -> Value | None:
    from .protocol import getitem
    try:
        return getitem(tx, obj, key)
    except UserException as e:
        if isinstance(e.exc, KeyError):
            return None
        raise


def _get(tx, obj: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs or not 1 <= len(args) <= 2:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Mapping.get with these arguments")
    found = _lookup(tx, obj, args[0])
    if found is not None:
        return found
    return args[1] if len(args) == 2 else ConstantValue(None)


def _contains(tx, obj: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs or len(args) != 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Mapping.__contains__ with these arguments")
    return ConstantValue(_lookup(tx, obj, args[0]) is not None)


_HANDLERS: dict[object, Callable] = {collections.abc.Mapping.get: _get,
                                     collections.abc.Mapping.__contains__: _contains}


def abc_method_handler(fn: Value) -> Callable | None:
    if (isinstance(fn, BoundMethodValue) and isinstance(fn.func, UserFunctionValue)
            and isinstance(fn.self_value, (ObjectValue, NewObjectValue))):
        handler = _HANDLERS.get(fn.func.fn)
        if handler is not None:
            return lambda tx, args, kwargs: handler(tx, fn.self_value, args, kwargs)
    return None
