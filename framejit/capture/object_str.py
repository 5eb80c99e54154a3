"""`str(obj)`, `repr(obj)` and `f"{obj}"` of user objects: their own `__str__`/`__repr__` inlined.

NOTE [Strings of user objects]: `str(o)` is `type(o).__str__(o)`; `object.__str__` is `type(o).__repr__(o)`,
and `f"{o}"` with no format spec is `type(o).__format__(o, "")`, which for `object.__format__` is `str(o)`.
For an object made while tracing or from outside whose class (not a library class, except one of the torch
packages inlined like user code: values/builder.py _INLINED_TORCH_PACKAGES) defines these in
Python, the function found is inlined and its class entry guarded by identity (classes before it guarded
to stay without one). Its result must be a plain str constant, as CPython requires ("__str__ returned
non-string" is the same TypeError). `object.__repr__` itself (`<mod.C object at 0x...>`) shows an address
that the compiled code cannot know while tracing: a graph break, as is any other class (a library
object's text, an exception's).
"""
from __future__ import annotations

import enum
import types

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, NewObjectValue, NNModuleValue, ObjectValue, UserFunctionValue, Value


def is_user_object(value: Value, tx=None, *dunders: str) -> bool:
    """An instance of a user class (made while tracing, or from outside with a source), not a module; or a
    member of a user Enum whose class defines one of `dunders` in Python (NOTE [Dunders of enum members])."""
    if isinstance(value, NewObjectValue):
        return True
    if tx is not None and isinstance(value, ConstantValue) and isinstance(value.value, enum.Enum):
        from .enum_attributes import enum_dunder
        return any(enum_dunder(tx, value, name) is not None for name in dunders)
    return isinstance(value, ObjectValue) and not isinstance(value, NNModuleValue) and value.source is not None \
        and not isinstance(value.obj, type)


def _cls(value: Value) -> type:
    if isinstance(value, ConstantValue):
        return type(value.value)  # an enum member (is_user_object)
    return value.cls if isinstance(value, NewObjectValue) else type(value.obj)


def _enum_format_is_str(tx, value: Value) -> bool:
    """Enum's own `__format__` of a member of a plain (not mixed-in) user Enum: `format(str(self), spec)`."""
    if not isinstance(value, ConstantValue):
        return False
    lookup.guard_lookup(tx.output, _cls(value), "__format__")
    return lookup.mro_lookup(_cls(value), "__format__")[1] is enum.Enum.__format__ and _cls(value)._member_type_ is object


def _method(tx, cls: type, name: str) -> types.FunctionType | None:
    """The user-defined Python `name` of `cls` (guarded), or None where `object`'s own is found (guarded)."""
    index, impl = lookup.mro_lookup(cls, name)
    owner = cls.__mro__[index]
    if owner is object:
        lookup.guard_lookup(tx.output, cls, name)  # no class before `object` gains one
        return None
    if lookup.is_fixed_class(owner) and not _inlined_library_class(owner) or not isinstance(impl, types.FunctionType):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} of a {cls.__name__}")
    lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, name, index), impl)
    return impl


def _inlined_library_class(cls: type) -> bool:
    """A class of the torch packages whose Python is inlined like user code (OrderedSet's `__repr__`)."""
    from .values.builder import _INLINED_TORCH_PACKAGES
    return (getattr(cls, "__module__", "") or "").startswith(_INLINED_TORCH_PACKAGES)


def _call(tx, impl: types.FunctionType, value: Value, name: str) -> Value:
    result = tx.inline(UserFunctionValue(impl), [value], {})
    if not result.is_constant() or type(result.as_constant()) is not str:
        if result.is_constant():
            raise UserException(TypeError(f"{name} returned non-string (type {type(result.as_constant()).__name__})"))
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} of a {_cls(value).__name__} returned {result.describe()}")
    return result


def user_repr(tx, value: Value) -> Value:
    impl = _method(tx, _cls(value), "__repr__")
    if impl is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"the default repr of a {_cls(value).__name__} (its address)")
    return _call(tx, impl, value, "__repr__")


def user_str(tx, value: Value) -> Value:
    impl = _method(tx, _cls(value), "__str__")
    return user_repr(tx, value) if impl is None else _call(tx, impl, value, "__str__")


def user_format(tx, value: Value, conversion: int, spec: str) -> Value:
    """`f"{value!conversion:spec}"` of a user object (FORMAT_VALUE)."""
    if conversion == 2:
        text = user_repr(tx, value)
    elif conversion == 3:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"ascii() of a {_cls(value).__name__}")
    elif conversion == 0 and _enum_format_is_str(tx, value):
        text = user_str(tx, value)
    elif conversion == 1 or _method(tx, _cls(value), "__format__") is None:
        if spec and conversion == 0:  # object.__format__ rejects a non-empty spec
            raise UserException(TypeError(f"unsupported format string passed to {_cls(value).__name__}.__format__"))
        text = user_str(tx, value)
    else:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"__format__ of a {_cls(value).__name__}")
    try:
        return ConstantValue(format(text.as_constant(), spec))
    except Exception as e:  # noqa: BLE001 - the exception eager raises
        raise UserException(e) from None
