"""Attributes of functions, bound methods and code objects, answered at trace time.

Library decorators introspect the functions they wrap (`func.__code__.co_varnames`, `__wrapped__`,
`__name__`, `__defaults__`, `method.__func__`), so these reads must be values, not graph breaks.

NOTE [Function attributes are guarded through the function's source]: a function read from outside is
already guarded by identity or, for closures, by code (NOTE [Closures guarded by code]). Its writable
attributes (`__code__`, `__defaults__`, `__kwdefaults__`, `__name__`, `__dict__` entries such as
`__wrapped__`) can still be reassigned between calls, so each one read is guarded through
`AttrSource(function, name)`, as TorchDynamo guards a function's code by `___check_obj_id`. A function
without a source (a method found on a guarded class, a function made while tracing) answers from the
object the trace inlines, which is exactly what the inlined call will run. An attribute that is absent
from the function's `__dict__` raises AttributeError, guarded by that absence.
"""
from __future__ import annotations

import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .sources import AttrSource
from .values import BoundMethodValue, BuiltinValue, ConstantValue, DictValue, TupleValue, UserFunctionValue, Value
from .values.builder import wrap, wrap_unguarded

# Read-only or immutable-enough attributes of every function: their value is a constant of the object.
_PLAIN = ("__name__", "__qualname__", "__module__", "__doc__")
# Attributes whose real value is a Python object we can model (wrapped and guarded through the source).
_WRAPPED = ("__defaults__", "__kwdefaults__", "__dict__", "__annotations__")
_UNSUPPORTED = ("__globals__", "__closure__", "__builtins__", "__call__", "__type_params__")


def function_attr(tx, fn: UserFunctionValue, name: str) -> Value:
    """`fn.name` for a Python function value."""
    real = fn.fn
    if name in _UNSUPPORTED:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {fn.describe()}")
    if name == "__get__":  # the descriptor protocol by hand (`func.__get__(obj, cls)`, lr_scheduler's wrapper)
        return BoundMethodValue(BuiltinValue(_function_get), fn)
    if fn.source is None and fn.closure is not None:
        return _traced_function_attr(fn, name)
    if name == "__code__":
        if fn.source is not None and not fn.by_code:
            tx.output.guard_id(AttrSource(fn.source, "__code__"), real.__code__)
        return ConstantValue(real.__code__)
    if name in _PLAIN or name in _WRAPPED:
        return _read(tx, fn, name, getattr(real, name))
    if name in real.__dict__:
        return _read(tx, fn, name, real.__dict__[name])
    if hasattr(types.FunctionType, name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {fn.describe()}")
    _guard_absent(tx, fn, name)
    raise UserException(AttributeError(f"'function' object has no attribute '{name}'"))


def _function_get(func, obj, cls=None):
    """Stands for `func.__get__` (a method-wrapper) in the graph builder's tables; never called."""
    raise AssertionError("handled while tracing")


def _bind(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`func.__get__(obj[, cls])`: a method bound to obj, or func itself when obj is None (CPython 3)."""
    if kwargs or not 2 <= len(args) <= 3:
        raise UserException(TypeError(f"expected 1 or 2 arguments, got {len(args) - 1}"))
    func, obj = args[0], args[1]
    if obj.is_constant() and obj.as_constant() is None:
        if len(args) == 2 or args[2].is_constant() and args[2].as_constant() is None:
            raise UserException(TypeError("__get__(None, None) is invalid"))
        return func
    return BoundMethodValue(func, obj)


def _register_bind() -> None:
    from .builtins import BUILTIN_HANDLERS
    BUILTIN_HANDLERS[_function_get] = _bind


_register_bind()


def _read(tx, fn: UserFunctionValue, name: str, value: Any) -> Value:
    if fn.source is None:
        return wrap_unguarded(value)
    return wrap(tx.output, value, AttrSource(fn.source, name))


def _guard_absent(tx, fn: UserFunctionValue, name: str) -> None:
    if fn.source is None:
        return
    e = AttrSource(fn.source, "__dict__").expr(tx.output.names)
    tx.output.add_guard("ABSENT", f"{name!r} not in {e}", fn.source, expected=f"no attribute {name}")


def _traced_function_attr(fn: UserFunctionValue, name: str) -> Value:
    """A function made by MAKE_FUNCTION while tracing: its defaults and closure are abstract."""
    real = fn.fn
    if name == "__code__":
        return ConstantValue(real.__code__)
    if name in _PLAIN:
        return ConstantValue(getattr(real, name))
    if name == "__defaults__":
        return TupleValue(list(fn.defaults)) if fn.defaults else ConstantValue(None)
    if name == "__kwdefaults__":
        return DictValue(dict(fn.kwdefaults)) if fn.kwdefaults else ConstantValue(None)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of a function made inside the compiled region")


def method_attr(tx, method: BoundMethodValue, name: str) -> Value:
    """`obj.method.name`: `__func__` and `__self__` are the parts; other reads go to the function, as
    a bound method forwards attribute reads to `__func__`."""
    if name == "__func__":
        return method.func
    if name == "__self__":
        return method.self_value
    func = method.func
    if isinstance(func, UserFunctionValue):
        return function_attr(tx, func, name)
    if isinstance(func, BuiltinValue) and name in _PLAIN:
        return ConstantValue(getattr(func.obj, name))
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {method.describe()}")


def is_function_like(value: Value) -> bool:
    return isinstance(value, (UserFunctionValue, BoundMethodValue))


def function_attr_value(tx, value: Value, name: str) -> Value:
    if isinstance(value, UserFunctionValue):
        return function_attr(tx, value, name)
    return method_attr(tx, value, name)


__all__ = ["function_attr", "method_attr", "is_function_like", "function_attr_value", "same_function"]


def same_function(tx, a: UserFunctionValue, b: UserFunctionValue) -> bool:
    """`a is b` for two function values. A function made while tracing is only itself; functions read
    from outside compare by identity, and one guarded by code only (NOTE [Closures guarded by code]) has
    its identity guarded too, since the answer now depends on it."""
    if a is b:
        return True
    if _made_in_trace(a) or _made_in_trace(b):
        return False
    for side in (a, b):
        if side.by_code and side.source is not None:
            tx.output.guard_id(side.source, side.fn)
    return a.fn is b.fn


def _made_in_trace(fn: UserFunctionValue) -> bool:
    return fn.source is None and fn.closure is not None
