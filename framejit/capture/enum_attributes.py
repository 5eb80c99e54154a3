"""Attributes of members of user Enums (NOTE [Attributes of enum members]); split from attributes.py."""
from __future__ import annotations

import enum
import operator
import types

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .descriptors import class_level_attr, descriptor_attr, is_data_descriptor
from .sources import AttrSource, ObjectSource, Ref
from .values import ConstantValue, UserFunctionValue, Value
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
        if name in ("name", "value"):  # NOTE [Enum values reassigned]
            _guard_slot(tx, source, member, f"_{name}_")
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


# NOTE [Enum values reassigned]: Enum's `value` and `name` read the member's `_value_` and `_name_`, which a
# program may reassign (`Mode.A._value_ = (4, 5)`): the folded answer was kept unguarded (hunt hhuntG2
# LOW-4: eager 7, framejit 3). The slot is now guarded, read raw (no lookup through the enum class): by value
# for an immutable constant (persistable, as any constant), by identity for any other object. One or two
# cheap lines per member read (the member itself is already pinned by identity).
_IMMUTABLE = (type(None), bool, int, float, str, bytes)


def _guard_slot(tx, source, member, slot: str) -> None:
    if slot not in vars(member):
        return  # no such slot of its own: Enum's property raises or reads elsewhere; nothing to pin here
    value = vars(member)[slot]
    where = AttrSource(source, slot, raw=True)
    if _immutable(value):
        tx.output.guard_constant(where, value)
    else:
        tx.output.guard_id(where, value)


def _immutable(value) -> bool:
    if type(value) is tuple:
        return all(_immutable(v) for v in value)
    return type(value) in _IMMUTABLE


# NOTE [Dunders of enum members]: a member of a user Enum is a constant, and str()/format/bool/len/== of a
# constant were folded by running the real dunder at trace time: a `__str__` or `__bool__` the enum defines
# reading a global dict (`"M-" + self.name + G["suffix"]`) kept its first answer (eager 'M-A!', framejit
# 'M-A'). Where the enum's class defines the dunder in Python (not Enum's own: the enum module copies its
# functions into the class), it is inlined like any user object's, or a break where that is not modelled;
# the lookup is guarded, so a dunder added to the class later recompiles.
_COMPARED = {operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"), operator.lt: ("__lt__", "__gt__"),
             operator.le: ("__le__", "__ge__"), operator.gt: ("__gt__", "__lt__"), operator.ge: ("__ge__", "__le__")}


def user_enum_member(v: Value) -> bool:
    return isinstance(v, ConstantValue) and isinstance(v.value, enum.Enum) and \
        not lookup.is_fixed_class(type(v.value))


def enum_dunder(tx, v: Value, name: str) -> types.FunctionType | None:
    """The Python `name` the user Enum of the member `v` defines (its lookup guarded), or None: a constant
    (folded as before) or a dunder that is Enum's own or a builtin mixin's."""
    if not user_enum_member(v):
        return None
    cls = type(v.value)
    index, impl = lookup.mro_lookup(cls, name)
    lookup.guard_lookup(tx.output, cls, name)
    if index is None or lookup.is_fixed_class(cls.__mro__[index]) or getattr(impl, "__module__", None) == "enum":
        return None
    if not isinstance(impl, types.FunctionType):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} of the enum {cls.__name__} ({type(impl).__name__})")
    return impl


def enum_compare(tx, fn, a: Value, b: Value) -> Value | None:
    """`a <op> b` where a user Enum member defines the comparison: the left one's inlined, a reflected or
    `__ne__`-through-`__eq__` one a break; None where no member defines one (folded as before)."""
    names = _COMPARED.get(fn)
    if names is None or not (user_enum_member(a) or user_enum_member(b)):
        return None
    impl = enum_dunder(tx, a, names[0])
    if impl is not None:
        result = tx.inline(UserFunctionValue(impl), [a, b], {})
        if result.is_constant() and result.as_constant() is NotImplemented:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{names[0]} of an enum returned NotImplemented")
        return result
    if enum_dunder(tx, b, names[1]) is not None or fn is operator.ne and (
            enum_dunder(tx, a, "__eq__") is not None or enum_dunder(tx, b, "__eq__") is not None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a reflected comparison of a user enum ({fn.__name__})")
    return None
