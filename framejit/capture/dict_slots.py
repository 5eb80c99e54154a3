"""dict's and OrderedDict's slots called as methods on dict subclasses: `od.__eq__(p)`, `sd.__iter__()`,
`dict.__or__(sd, e)`, `OrderedDict.__ne__(a, b)`, `dd.__ior__(pairs)` (NOTE [Dict slots of subclasses]).

container_slots.py models a container's slots only on values of exactly the slot's type, where the slot and
the operator agree. Here the receiver is a DictValue of a subclass (a plain dict or OrderedDict subclass, an
OrderedDict, a defaultdict), and each slot is modelled as CPython's C function does it.
"""
from __future__ import annotations

import collections
import operator

from .breaks import BreakKind, Unsupported
from .values import BuiltinValue, ConstantValue, DefaultDictValue, DictValue, Value

# NOTE [Dict slots of subclasses]: `od.__eq__(p)` is OrderedDict's slot: ordered when both are OrderedDicts,
# else dict's; `dict.__eq__(a, b)` compares contents in any order, whatever the operands' types (so it is not
# `a == b` for two OrderedDicts); both answer NotImplemented for an operand that is not a dict. `dict.__or__(s,
# e)` is a new exact dict of s's items updated by e; `od.__or__(e)` is `type(od)(od)` updated by e (`od | e`).
# `__ior__` updates in place and returns the receiver (dict's takes a mapping or pairs, as `|=`). `__iter__`
# iterates the keys. dict's own `__iter__` and `__ior__` on an OrderedDict read or grow the underlying dict,
# whose order move_to_end does not change and which `dict.__ior__` grows past OrderedDict's linked list: those
# stay breaks, and so do dict's `keys`, `values` and `items` of an OrderedDict from outside or one move_to_end
# reordered in the trace (`reordered`, set by mappings._move_to_end): `dict.keys(od)` iterated the linked order
# where eager iterates the underlying one, a silent wrong order. (An OrderedDict made and reordered in the
# trace is rebuilt at the break with both orders: NOTE [Reordered OrderedDicts made in the trace].)
# (`dict.__or__(od, e)` copies od through its keys(), in OrderedDict's order, as dict_merge does for a dict
# whose type overrides iteration.)
# A defaultdict's `__or__` is defaultdict's own (not modelled here); its eq, ne, iter and ior are dict's.
_OD = collections.OrderedDict
_NAMES = ("__eq__", "__ne__", "__iter__", "__or__", "__ior__")
_UNDERLYING = ("__iter__", "__ior__")


def is_subclass_dict_slot(owner: type, name: str, d: Value) -> bool:
    """`owner.<name>(d, ...)` is modelled here: d a DictValue of a proper subclass of dict, or an OrderedDict."""
    if owner not in (dict, _OD) or name not in _NAMES or type(d) not in (DictValue, DefaultDictValue):
        return False
    if not issubclass(d.cls, owner) or d.cls is dict:
        return False
    if owner is dict and issubclass(d.cls, _OD) and name in _UNDERLYING:
        return False
    return not (owner is dict and name == "__or__" and issubclass(d.cls, collections.defaultdict))


def check_underlying_order(owner: type, name: str, d: Value) -> None:
    """dict's own iteration of an OrderedDict reads the underlying dict's order, which the trace does not know."""
    if owner is not dict or name not in ("keys", "values", "items", "__iter__", "__reversed__"):
        return
    try:
        ordered = issubclass(d.python_type(), _OD)
    except Unsupported:
        return
    if ordered and isinstance(d, DictValue) and d.source is None and not getattr(d, "reordered", False):
        return  # made in the trace in the order it iterates
    if ordered:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"dict.{name} of an OrderedDict (the order of its "
                                                      "underlying dict, which move_to_end does not change)")


# NOTE [dict's own writes to OrderedDicts]: `dict.pop(od, k)` (popitem, setdefault, update, clear), called as
# dict's method on an OrderedDict, changes its underlying dict and not its linked list, as `dict.__setitem__`
# does (NOTE [OrderedDicts out of order] in values/builder.py): eager's `dict.popitem(od)` takes the last key
# of the underlying order, and every one of them leaves `list(od)` holding (or missing) keys its table does
# not. They were traced as OrderedDict's own methods (the linked order's last key, both orders kept): a break,
# where Python makes the call and the resume function reads the OrderedDict as it is left. OrderedDict's own
# methods (`od.pop(k)`) come here with OrderedDict as their owner and are traced.
_DICT_WRITES = ("pop", "popitem", "setdefault", "update", "clear")


def check_dict_write(owner: type, name: str, d: Value) -> None:
    """NOTE [dict's own writes to OrderedDicts]: the explicit call `dict.<name>(d, ...)`."""
    if owner is not dict or name not in _DICT_WRITES:
        return
    try:
        ordered = issubclass(d.python_type(), _OD)
    except Unsupported:
        return
    if ordered:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"dict.{name} of an OrderedDict (it changes the underlying "
                                                      "dict past the OrderedDict's own order)")


def call_subclass_dict_slot(tx, owner: type, name: str, d: DictValue, args: list[Value],
                            kwargs: dict[str, Value]) -> Value:
    from .container_slots import _raise_arity_error
    if kwargs or len(args) != (0 if name == "__iter__" else 1):
        _raise_arity_error(owner, name, args, kwargs)
    if name == "__iter__":
        return tx.call(BuiltinValue(iter), [d], {})
    other = args[0]
    try:
        other_type = other.python_type()
    except Unsupported:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} of {other.describe()}") from None
    if name == "__ior__":
        return tx.call(BuiltinValue(operator.ior), [d, other], {})
    if not issubclass(other_type, dict):
        return ConstantValue(NotImplemented)
    if name == "__or__":
        if owner is _OD:
            return tx.call(BuiltinValue(operator.or_), [d, other], {})
        from .container_methods import call_container_method
        new = DictValue(dict(d.items))
        call_container_method(tx, dict.update, [new, other], {})
        return new
    if type(other) not in (DictValue, DefaultDictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} of {other.describe()}")
    if owner is _OD and issubclass(other_type, _OD) and list(d.items) != list(other.items):
        return ConstantValue(name == "__ne__")  # OrderedDicts in different orders
    compare = operator.eq if name == "__eq__" else operator.ne
    return tx.call(BuiltinValue(compare), [DictValue(dict(d.items)), DictValue(dict(other.items))], {})
