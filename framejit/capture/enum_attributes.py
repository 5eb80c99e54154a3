"""Attributes of members of user Enums (NOTE [Attributes of enum members]); split from attributes.py."""
from __future__ import annotations

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .descriptors import class_level_attr, descriptor_attr, is_data_descriptor
from .sources import AttrSource, ObjectSource, Ref
from .values import ConstantValue, Value
from .values.builder import wrap


# NOTE [Attributes of enum members]: a member of a user Enum is a constant (pinned by identity), but it is
# an ordinary object of a mutable class: a `@property` of the enum (`Mode.A.scale` reading a dict), a
# method, an attribute `__init__` set on the member (`Planet.EARTH.mass`) or one replaced on the class
# later. Reading them all with getattr while tracing folded the answer unguarded (a property reading a
# dict kept returning the first call's value). Only what Enum itself defines (`name`, `value`, read from
# the member's `_name_`/`_value_`) is folded; the rest follows NOTE [Lookup facts]: a property is inlined,
# a method bound, class data and instance attributes read through guarded sources.
def enum_member_attr(tx, obj: ConstantValue, name: str) -> Value:
    member = obj.value
    cls = type(member)
    source = obj.source if obj.source is not None else ObjectSource(Ref(member, f"{cls.__name__}_{member.name}"))
    index, attr = lookup.mro_lookup(cls, name)
    own = vars(member)
    if index is not None and lookup.is_fixed_class(cls.__mro__[index]) and (
            name not in own or is_data_descriptor(attr)):
        lookup.guard_found_on_class(tx.output, cls, name, index)
        from .attributes import _constant_attr
        return _constant_attr(obj, name)  # Enum's own name/value, object's methods
    if index is not None and is_data_descriptor(attr):
        entry = lookup.guard_found_on_class(tx.output, cls, name, index)
        lookup.guard_entry_identity(tx.output, entry, attr)
        return descriptor_attr(tx, obj, name, attr)
    if name in own:
        lookup.guard_lookup(tx.output, cls, name)
        return wrap(tx.output, own[name], AttrSource(source, name))
    if index is None:
        if lookup.mro_lookup(cls, "__getattr__")[0] is not None:
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.__getattr__ for {name!r}")
        lookup.guard_absent(tx.output, source, member, cls, name)
        raise UserException(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'"))
    lookup.guard_not_in_instance(tx.output, source, member, name)
    entry = lookup.guard_found_on_class(tx.output, cls, name, index)
    if entry is None:
        from .attributes import _constant_attr
        return _constant_attr(obj, name)
    return class_level_attr(tx, obj, cls, name, attr, entry)
