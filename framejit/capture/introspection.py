"""`inspect` on functions, methods and classes, answered at trace time.

NOTE [Introspection at trace time]: library code asks `inspect.signature(fn).parameters` (e.g.
transformers' `apply_chunking_to_forward`), `inspect.unwrap`, `inspect.isfunction`, ... about callables
it was given. Inlining `inspect` itself would walk through `id()`, memo dicts and descriptor machinery;
instead the question is answered on the real object and the facts it rests on are guarded: the
callable's identity (already guarded when it was read) or, for a function, its `__code__`,
`__defaults__`, `__kwdefaults__` and `__wrapped__` chain (NOTE [Function attributes are guarded through
the function's source]). A Signature or Parameter is an immutable constant; `signature.parameters` is a
read-only mapping of them. Functions made while tracing with defaults, and objects created while tracing,
are not real objects yet: asking about them is a graph break.
"""
from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable

from .breaks import BreakKind, Unsupported, UserException
from .function_attrs import function_attr, made_in_trace
from .sources import AttrSource
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, DictValue, NNModuleValue,
                     ObjectValue, TupleValue, UserFunctionValue, Value)


class _AnySelf:
    """Stands for the `self` of a bound method whose object was created while tracing: a signature does
    not depend on it."""


def real_callable(value: Value) -> Any:
    """The real object an introspection question is asked about."""
    if isinstance(value, UserFunctionValue):
        if value.source is None and value.closure is not None and (value.defaults or value.kwdefaults):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "introspecting a function made inside the compiled region")
        if made_in_trace(value):
            return _made_function(value)
        return value.fn
    if isinstance(value, BoundMethodValue):
        func = real_callable(value.func)
        owner = value.self_value.obj if isinstance(value.self_value, ObjectValue) else _AnySelf()
        return types.MethodType(func, owner)
    if isinstance(value, (ClassValue, NNModuleValue, ObjectValue, BuiltinValue)):
        return value.obj
    if isinstance(value, ConstantValue):
        return value.value
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"introspecting {value.describe()}")


# NOTE [Introspecting functions made while tracing]: the function object the trace holds for a function
# made while tracing has its code, name and globals but none of what the traced code stored on it
# (NOTE [Attributes of functions made while tracing]): `inspect.signature` of a `functools.wraps` wrapper
# follows its `__wrapped__`, its annotations make the parameters' annotations, `__signature__` replaces
# it. So the question is asked of a copy carrying those attributes as real objects (constants, functions
# from outside, or other made functions, copied the same way); an attribute that is not such a value
# (a tensor, a list made here) is a graph break. What it wraps is guarded as a callable from outside.
def _made_function(value: UserFunctionValue) -> types.FunctionType:
    from .codegen import _stored_function_attrs
    attrs = _stored_function_attrs(value)
    if not attrs:
        return value.fn
    real = value.fn
    copy = types.FunctionType(real.__code__, real.__globals__, real.__name__, None, real.__closure__)
    copy.__qualname__ = real.__qualname__
    for name, attr in attrs.items():
        setattr(copy, name, _real_object(attr))
    return copy


def _real_object(value: Value) -> Any:
    if isinstance(value, ConstantValue):
        return value.value
    if isinstance(value, DictValue) and value.cls is dict:
        return {k: _real_object(v) for k, v in value.items.items()}
    if isinstance(value, TupleValue) and value.cls is tuple:
        return tuple(_real_object(v) for v in value.items)
    if isinstance(value, (UserFunctionValue, BoundMethodValue, ClassValue, NNModuleValue, ObjectValue, BuiltinValue)):
        return real_callable(value)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"introspecting a function holding {value.describe()}")


# NOTE [A function's own __signature__]: a decorator may state the signature its wrapper shows
# (`wrapper.__signature__ = sig.replace(...)`; transformers >= 5.25's `deprecate_kwarg(...,
# expose_in_signature=True)` on `create_causal_mask` and decoder layers' forwards), and `inspect.signature`
# returns that object as it is, without unwrapping further (`unwrap` stops at any function that has the
# attribute, even None; None then describes the function's own code). A Signature and its Parameters
# are immutable, so guarding the attribute's identity is enough, and nothing past it is guarded. Any other
# object there (which inspect would reject or call) stays a graph break.
def guard_callable(tx, value: Value, follow_wrapped: bool) -> None:
    """Guard what a signature of `value` is computed from (see the NOTE)."""
    if isinstance(value, BoundMethodValue):
        guard_callable(tx, value.func, follow_wrapped)
        return
    if isinstance(value, UserFunctionValue) and made_in_trace(value):  # NOTE [Introspecting functions made
        instance_dict = value.attrs.get("__dict__")  # while tracing]
        for item in (instance_dict.items.values() if instance_dict is not None else ()):
            if isinstance(item, (UserFunctionValue, BoundMethodValue)):
                guard_callable(tx, item, follow_wrapped)
        return
    if not isinstance(value, UserFunctionValue) or value.source is None:
        return
    for name in ("__code__", "__defaults__", "__kwdefaults__"):
        function_attr(tx, value, name)
    if "__signature__" in value.fn.__dict__:  # NOTE [A function's own __signature__]
        declared = value.fn.__dict__["__signature__"]
        if declared is not None and type(declared) is not inspect.Signature:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{value.describe()} has a __signature__ of type "
                                                          f"{type(declared).__name__}")
        tx.output.guard_id(AttrSource(value.source, "__signature__"), declared)
        return  # inspect stops unwrapping at it (even at None): what it wraps does not matter
    function_attr_absent(tx, value, "__signature__")
    if follow_wrapped:
        try:
            wrapped = function_attr(tx, value, "__wrapped__")
        except UserException:
            return
        guard_callable(tx, wrapped, follow_wrapped)


def function_attr_absent(tx, value: UserFunctionValue, name: str) -> None:
    try:
        function_attr(tx, value, name)
    except UserException:
        return


def _signature(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    options = {k: v.as_constant() for k, v in kwargs.items()}
    if len(args) != 1 or set(options) - {"follow_wrapped", "eval_str"} or options.get("eval_str"):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "inspect.signature with these arguments")
    follow = options.get("follow_wrapped", True)
    guard_callable(tx, args[0], follow)
    try:
        return ConstantValue(inspect.signature(real_callable(args[0]), follow_wrapped=follow))
    except (TypeError, ValueError) as e:
        raise UserException(e) from None


def _unwrap(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "inspect.unwrap with a stop callback")
    value = args[0]
    while isinstance(value, UserFunctionValue):
        try:
            value = function_attr(tx, value, "__wrapped__")
        except UserException:
            break
    return value


def _predicate(fn: Callable) -> Callable:
    def handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if len(args) != 1 or kwargs:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"inspect.{fn.__name__} with these arguments")
        guard_callable(tx, args[0], follow_wrapped=True)
        return ConstantValue(bool(fn(real_callable(args[0]))))
    return handler


def _fields(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """dataclasses.fields of a dataclass instance or class whose class is known (guarded or made here)."""
    if len(args) != 1 or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "dataclasses.fields with these arguments")
    value = args[0]
    cls = value.obj if isinstance(value, ClassValue) else value.python_type()
    try:
        return TupleValue([ConstantValue(f) for f in dataclasses.fields(cls)])
    except TypeError as e:
        raise UserException(e) from None


HANDLERS: dict[Any, Callable] = {inspect.signature: _signature, inspect.unwrap: _unwrap, dataclasses.fields: _fields}
# (isfunction, isclass, ... are isinstance checks: they are inlined like any code)
for _name in ("iscoroutinefunction", "isgeneratorfunction", "isasyncgenfunction", "isabstract"):
    HANDLERS[getattr(inspect, _name)] = _predicate(getattr(inspect, _name))


# NOTE [Binding a signature at trace time]: `inspect.signature(f)` is a constant here, and reading a method
# of a constant gives the real bound method, which the trace cannot call with tensors.
# `sig.bind(*args, **kwargs)` and `sig.bind_partial(...)` instead inline CPython's own `Signature._bind`
# with the Signature as a constant `self`: it only sorts the arguments into a dict by the parameters'
# kinds and names and builds a BoundArguments (an object made while tracing), whose `arguments`, `args`,
# `kwargs` and `apply_defaults()` are inlined too. A bad call raises the TypeError CPython's code raises,
# with its message. Only the exact Signature class qualifies: a subclass may override the methods.
_BIND_METHODS = (inspect.Signature.bind, inspect.Signature.bind_partial, inspect.Signature._bind)


def signature_bind_method(obj: Any) -> Value | None:
    """The inlinable method for a real bound `Signature.bind`/`bind_partial` (see the NOTE), or None."""
    if isinstance(obj, types.MethodType) and type(obj.__self__) is inspect.Signature and \
            obj.__func__ in _BIND_METHODS:
        return BoundMethodValue(UserFunctionValue(obj.__func__), ConstantValue(obj.__self__))
    return None


def introspection_handler(fn: Any) -> Callable | None:
    from .copies import HANDLERS as COPY_HANDLERS  # NOTE [Copies of plain objects]
    return HANDLERS.get(fn) or COPY_HANDLERS.get(fn)
