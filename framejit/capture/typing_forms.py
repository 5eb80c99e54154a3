"""Subscripts of typing's forms (`List[torch.Tensor]`, `Optional[int]`, `Dict[str, Tuple[int, ...]]`).

NOTE [Typing subscripts are folded]: library code builds type expressions at run time inside forward
(timm's `torch.jit.annotate(List[torch.Tensor], [])`, casts, `isinstance` checks against aliases).
Inlined, typing's `__getitem__` reaches code the trace cannot follow (`sys._getframe` in the
`_check_generic` typing_extensions installs, `repr` of a `_SpecialForm` in an error message), so every
subscript was a graph break: crossvit_tiny_240 captured 10 graphs over 3 calls instead of 2. Such a
subscript is a pure function of the form and its arguments whose result typing caches (`List[int] is
List[int]` in eager too), so it is evaluated at trace time: the form is an object of the `typing` or
`typing_extensions` module, or a class whose `__class_getitem__` is `typing.Generic`'s (a user generic
class, whose own override would be user code) or `types.GenericAlias` (a subclass of a collections.abc
class, `class S(MutableSet[T])`: `S[T]` in a cast), and the arguments are constants, classes, other typing
objects or tuples of those. The form and every typing object among the arguments read from outside are
guarded by identity (a rebound global is another form); an error typing raises is the user's, as eager.
"""
from __future__ import annotations

import operator
import types
import typing
from typing import Any

from .values import ClassValue, ObjectValue, TupleValue, Value

_MODULES = ("typing", "typing_extensions")
_GENERIC_GETITEM = getattr(typing.Generic.__class_getitem__, "__func__", None)
_NOT = object()


def typing_subscript(tx, obj: Value, key: Value) -> Value | None:
    """`obj[key]` folded (NOTE [Typing subscripts are folded]), or None when it is no such subscript."""
    if not _is_form(obj):
        return None
    guarded: list[Value] = [obj]
    args = _argument(key, guarded)
    if args is _NOT:
        return None
    for v in guarded:
        if getattr(v, "source", None) is not None:
            tx.output.guard_id(v.source, v.obj)
    from .protocol import constant_fold
    return constant_fold(operator.getitem, obj.obj, args)


def _typing_object(v: Value) -> bool:
    return isinstance(v, ObjectValue) and not isinstance(v, ClassValue) and \
        type(v.obj).__module__ in _MODULES


def _is_form(v: Value) -> bool:
    if _typing_object(v):
        return True
    if isinstance(v, ClassValue) and isinstance(v.obj, type):
        func = getattr(getattr(v.obj, "__class_getitem__", None), "__func__", None)
        return func is types.GenericAlias or _GENERIC_GETITEM is not None and func is _GENERIC_GETITEM
    return False


def _argument(v: Value, guarded: list[Value]) -> Any:
    if _typing_object(v):
        guarded.append(v)
        return v.obj
    if isinstance(v, TupleValue) and v.cls is tuple:
        items = [_argument(i, guarded) for i in v.items]
        return _NOT if any(i is _NOT for i in items) else tuple(items)
    if v.is_constant():
        return v.as_constant()
    return _NOT
