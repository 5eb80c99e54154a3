"""Attribute lookup facts: how an attribute was found while tracing, and the guards that pin exactly that.

NOTE [Lookup facts]: `o.name` in CPython is found, in order, as a data descriptor of `type(o)` (first
class of the MRO holding `name`), an entry of `o.__dict__`, another class attribute of the MRO, the
class's `__getattr__`, or not at all (AttributeError). A trace that read `o.name` relies on *which* of
these happened, so it guards the facts that decided it, each as one cheap line of the guard function:
- found on a class (method, class constant, descriptor): `name` is absent from the `__dict__` of every
  class of the MRO before the owner (CLASS_ATTR_ABSENT), the owner's raw entry `Owner.__dict__[name]` is
  the same object (ID_MATCH) or, for plain data, the same value (TYPE_MATCH and CONSTANT_MATCH), and,
  unless it is a data descriptor, the instance does not shadow it: `name not in o.__dict__`
  (INSTANCE_ATTR_ABSENT);
- found in the instance `__dict__`: the value guard of the read itself (`o.name`, read through the
  normal lookup, so a later shadowing data descriptor is seen by the guard as by the program);
- absent (a failed `hasattr`, a `getattr` default): absent from the instance dict and from every class
  of the MRO, and no class defines `__getattr__`;
- the same for classes (`K.name`: the MRO of K, then its metaclass) and for `super()` (the MRO after
  the current class);
- a store `o.name = v` recorded as a plain write: no class gains `__setattr__` or a descriptor `name`.
The type itself is pinned by the object's TYPE_MATCH guard, so the MRO is known. Classes whose dict
cannot change (built-in static types such as `object`, `tuple`) or that belong to library modules
(torch, ... : NOTE [Library modules] in values/builder.py) get no class-dict guards. `o.__dict__` and
`K.__dict__` repeated by several guards are computed once (NOTE [Guard subexpressions]).
nn.Module keeps parameters, buffers and children out of `__dict__` (NOTE [Module slots]) and its
`__setattr__` keeps the two disjoint, so slot reads guard the slot entry and the class-dict facts only;
a name found in no slot is guarded absent from all three slots and `__dict__` (MODULE_ATTR_ABSENT).
Python modules: an attribute found absent is guarded absent from the module's `__dict__`, with no module
`__getattr__`; attributes of library modules are pinned by identity (attributes.py, `F.gelu` patched).
"""
from __future__ import annotations

from typing import Any

from ..guards import COST_ID
from .sources import AttrSource, ItemSource, ObjectSource, Ref, Source
from .values.builder import LIBRARY_MODULE_PREFIXES

_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a built-in type whose dict cannot be changed


def is_fixed_class(cls: type) -> bool:
    """A class whose attributes are taken as fixed: immutable built-in types and library classes."""
    if cls.__flags__ & _IMMUTABLE_TYPE:
        return True
    module = getattr(cls, "__module__", "") or ""
    return module.split(".")[0] in LIBRARY_MODULE_PREFIXES


def mro_lookup(cls: type, name: str) -> tuple[int | None, Any]:
    """(index in cls.__mro__ of the class holding `name`, the raw dict entry), or (None, None)."""
    for index, klass in enumerate(cls.__mro__):
        if name in klass.__dict__:
            return index, klass.__dict__[name]
    return None, None


def class_dict_source(klass: type) -> Source:
    """`Klass.__dict__`, with the class named directly in the guard's namespace."""
    return AttrSource(ObjectSource(Ref(klass, klass.__name__)), "__dict__")


def entry_source(klass: type, name: str) -> Source:
    """`Klass.__dict__[name]`: the raw class attribute, no descriptor protocol."""
    return ItemSource(class_dict_source(klass), name)


def guard_class_absent(out, classes, name: str) -> None:
    """`name` is in none of these classes' own dicts (fixed classes skipped)."""
    for klass in classes:
        if is_fixed_class(klass):
            continue
        source = class_dict_source(klass)
        out.add_guard("CLASS_ATTR_ABSENT", f"{name!r} not in {source.expr(out.names)}", source,
                      expected=f"no attribute {name!r} on {klass.__qualname__}",
                      actual=f"{source.expr(out.names)}.get({name!r})", cost=COST_ID)


def guard_found_on_class(out, cls: type, name: str, index: int, start: int = 0) -> Source | None:
    """`name` is found on `cls.__mro__[index]` searching from `start`: absent before it. Returns the
    source of the owner's raw entry, or None when the owner is a fixed class (nothing to guard)."""
    mro = cls.__mro__
    guard_class_absent(out, mro[start:index], name)
    owner = mro[index]
    return None if is_fixed_class(owner) else entry_source(owner, name)


def guard_entry_identity(out, source: Source | None, attr: Any) -> None:
    """The owner's raw entry is still the same object (a method, a descriptor)."""
    if source is not None:
        out.guard_id(source, attr)


def guard_not_in_instance(out, obj_source: Source | None, real: Any, name: str) -> None:
    """The instance does not shadow a class attribute (or does not have it at all)."""
    if obj_source is None or not isinstance(_instance_dict(real), dict):
        return
    e = obj_source.expr(out.names)
    out.add_guard("INSTANCE_ATTR_ABSENT", f"{name!r} not in {e}.__dict__", obj_source,
                  expected=f"no instance attribute {name!r}", actual=f"{e}.__dict__.get({name!r})", cost=COST_ID)


def guard_absent(out, obj_source: Source | None, real: Any, cls: type, name: str) -> None:
    """`getattr(o, name)` raises AttributeError: absent from the instance, the MRO, no `__getattr__`."""
    guard_not_in_instance(out, obj_source, real, name)
    guard_class_absent(out, cls.__mro__, name)
    guard_class_absent(out, cls.__mro__, "__getattr__")


def guard_plain_store(out, cls: type, name: str) -> None:
    """A store `o.name = v` traced as a plain instance-dict write stays one: no class gains a
    `__setattr__` before the (fixed) one that does the write, and the class attribute `name`, if any,
    stays the same object (a data descriptor added later would take the store)."""
    index, _ = mro_lookup(cls, "__setattr__")
    guard_class_absent(out, cls.__mro__[:index], "__setattr__")
    index, attr = mro_lookup(cls, name)
    if index is None:
        guard_class_absent(out, cls.__mro__, name)
    else:
        guard_entry_identity(out, guard_found_on_class(out, cls, name, index), attr)


def _instance_dict(real: Any) -> Any:
    try:
        return object.__getattribute__(real, "__dict__")
    except (AttributeError, TypeError):
        return None
