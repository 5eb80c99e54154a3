"""Instances of dict subclasses read from outside, seen through dict's own methods.

NOTE [Dict subclasses]: library code often subclasses dict and calls `super().get(key)` or
`dict.__getitem__(self, key)` (transformers' registries, `ModelOutput`). Such an object is an
ObjectValue (its type is guarded; its own methods are inlined). When one of dict's read-only methods
is called on it, the call is answered from its raw contents: `dict.copy(obj)` (which bypasses every
override) is wrapped like a plain dict through a CallSource, so its keys and the values read are
guarded. Mutating dict methods on such an object stay graph breaks.
"""
from __future__ import annotations

from .breaks import BreakKind, Unsupported
from .sources import CallSource, Ref
from .values import DictValue, ObjectValue, Value
from .values.builder import wrap

READ_ONLY_DICT_METHODS = frozenset({"get", "__getitem__", "__contains__", "keys", "values", "items", "__len__",
                                    "__iter__", "copy"})
_DICT_COPY = Ref(dict.copy, "dict_copy")


def is_dict_object(value: Value) -> bool:
    return isinstance(value, ObjectValue) and isinstance(value.obj, dict)


def dict_contents(tx, obj: ObjectValue, method: str) -> DictValue:
    """The raw contents of a dict-subclass instance, for a read-only dict method `method`."""
    if method not in READ_ONLY_DICT_METHODS:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"dict.{method} on a {type(obj.obj).__name__} from outside")
    if obj.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"contents of a {type(obj.obj).__name__} without a source")
    return wrap(tx.output, dict.copy(obj.obj), CallSource(_DICT_COPY, obj.source))
