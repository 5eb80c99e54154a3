"""Mapping values beyond the plain dict: `collections.defaultdict` and live dict views.

- DefaultDictValue: a DictValue that also holds its `default_factory` (a Value, or None); reading a
  missing key calls the factory and stores the result (mappings.missing_item).
- MappingProxyValue: `types.MappingProxyType(d)` read from outside: a live read-only view of the dict value of
  `d` (NOTE [Mappingproxies] in capture/mappings.py).
- DictViewValue: `d.keys()`, `d.values()`, `d.items()`. NOTE [Live dict views]: a view holds its dict
  value, not a copy, so a view taken before `d[k] = v` sees the new key, as in CPython. It behaves as a
  read-only tuple of its current items for iteration, `len`, `in` and truth; `==` folds on the real
  view types (keys and items views compare as sets). Rebuilt after a graph as `d.keys()` etc. of the
  rebuilt dict, so it stays live in the code that runs on.
"""
from __future__ import annotations

import collections
import types
from typing import Any

from .base import MADE_ORDER, ConstantValue, Value
from .containers import DictValue, TupleValue


class DefaultDictValue(DictValue):
    def __init__(self, items: dict, factory: Value | None, source=None) -> None:
        super().__init__(items, source, collections.defaultdict)
        self.factory = factory

    def is_constant(self) -> bool:
        return False

    def describe(self) -> str:
        return f"defaultdict({', '.join(f'{k!r}: {v.describe()}' for k, v in self.items.items())})"


class MappingProxyValue(DictValue):
    """A mappingproxy over the dict value `mapping` (NOTE [Mappingproxies] in capture/mappings.py): its items
    are the mapping's own, so a write through the dict shows through the proxy, as in CPython."""

    def __init__(self, mapping: DictValue, source=None) -> None:  # no super().__init__: items are the mapping's
        self.mapping = mapping
        self.source = source
        self.cls = types.MappingProxyType
        self.serial = next(MADE_ORDER)  # NOTE [Values made in order]

    @property
    def items(self) -> dict:
        return self.mapping.items

    def describe(self) -> str:
        return f"mappingproxy of {self.mapping.describe()}"


class DictViewValue(TupleValue):
    """A live view (`kind` is "keys", "values" or "items") of the dict value `mapping`."""

    def __init__(self, mapping: DictValue, kind: str) -> None:  # no super().__init__: items are computed
        self.mapping = mapping
        self.kind = kind
        self.source = None

    @property
    def items(self) -> list[Value]:
        d = self.mapping.items
        if self.kind == "keys":
            return [key_value(k) for k in d]
        if self.kind == "values":
            return list(d.values())
        return [TupleValue([key_value(k), v]) for k, v in d.items()]

    @property
    def cls(self) -> type:
        viewed = viewed_object(self)
        return view_type(self.mapping.cls if viewed is None else viewed[1], self.kind)

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        keys = not any(isinstance(k, IdentityKey) for k in self.mapping.items)
        return keys and (self.kind == "keys" or all(v.is_constant() for v in self.mapping.items.values()))

    def as_constant(self) -> Any:
        for k in self.mapping.items:
            note_key_read(k)  # NOTE [Hook ids that never leave the trace]
        values = {k: (None if self.kind == "keys" else v.as_constant()) for k, v in self.mapping.items.items()}
        if issubclass(self.mapping.cls, collections.OrderedDict):  # str() of it says odict_keys(...)
            values = collections.OrderedDict(values)
        return getattr(values, self.kind)()

    def describe(self) -> str:
        return f"{self.kind}-view of {self.mapping.describe()}"


def viewed_object(view: DictViewValue) -> tuple[Value, type] | None:
    """(the object, dict or OrderedDict) when `view` is a view of a dict-subclass object from outside, whose
    contents the trace read (NOTE [Views of dict objects from outside] in dict_objects.py), else None."""
    return getattr(view.mapping, "dict_object", None)


def view_type(cls: type, kind: str) -> type:
    """The type of `cls().kind()` (odict_keys for an OrderedDict, dict_keys for dict and defaultdict)."""
    base = collections.OrderedDict if issubclass(cls, collections.OrderedDict) else dict
    return type(getattr(base(), kind)())




class IdentityKey:
    """A set element (or dict key) that is a tensor: hashed and compared by the identity of the object it
    stands for, as CPython hashes tensors by `id`. Two tensor values are one object exactly when they share
    a fake tensor (in-place ops and ops that return their input give back the same fake), so the token
    is the fake's identity (NOTE [Sets of tensors] in capture/identity_keys.py)."""

    __slots__ = ("value", "token")

    def __init__(self, value: Value, token: Any) -> None:
        self.value = value
        self.token = token

    def __hash__(self) -> int:
        return hash(self.token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdentityKey) and other.token == self.token

    def __repr__(self) -> str:
        return f"<{self.value.describe()}>"


class ValueKey:
    """A frozen dataclass instance as a set element or dict key (NOTE [Frozen dataclasses as dict keys] in
    builder.py): hashes and compares as `real`, the instance built from its field values, and stands for
    `value` (the object made in the trace, or the one from outside), which is what a key read back is."""

    __slots__ = ("value", "real")

    def __init__(self, value: Value, real: Any) -> None:
        self.value = value
        self.real = real

    def __hash__(self) -> int:
        return hash(self.real)

    def __eq__(self, other: object) -> bool:
        return self.real == (other.real if isinstance(other, ValueKey) else other)

    def __repr__(self) -> str:
        return repr(self.real)


# NOTE [Hook ids that never leave the trace] (capture/hook_handles.py): the output of the trace now handing
# out hook ids and the range of ids taken, while it traces; a key among them read as a value escapes.
HOOK_IDS_LIVE: dict = {}
# NOTE [Ids as keys inside the trace] (capture/process_ids.py): the output of the trace that answered id() and
# the numbers it answered; such a key read as a value makes the entry process-local.
PROCESS_IDS_LIVE: dict = {}


def note_key_read(key: Any) -> None:
    if HOOK_IDS_LIVE and type(key) is int and key in HOOK_IDS_LIVE["ids"]:
        HOOK_IDS_LIVE["out"].hook_ids_escape = True
    if PROCESS_IDS_LIVE and type(key) is int and key in PROCESS_IDS_LIVE["ids"]:
        PROCESS_IDS_LIVE["out"].__dict__.setdefault("process_local", "the trace read an id() answer kept as a key")


def key_value(key: Any, read: bool = True) -> Value:
    """The value a set element or dict key stands for (`read`: by the program, not only to be replayed)."""
    if read:
        note_key_read(key)
    if isinstance(key, (IdentityKey, ValueKey)):
        return key.value
    if type(key) in (types.FunctionType, types.BuiltinFunctionType):  # NOTE [Functions as dict keys]
        from .builder import wrap_unguarded
        return wrap_unguarded(key)  # callable, and rebuilt as the object itself
    return ConstantValue(key)


__all__ = ["HOOK_IDS_LIVE", "PROCESS_IDS_LIVE", "DefaultDictValue", "DictViewValue", "IdentityKey", "MappingProxyValue", "ValueKey", "key_value", "note_key_read",
           "view_type"]
