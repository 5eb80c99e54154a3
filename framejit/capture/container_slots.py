"""Slots of lists, tuples and dicts called as methods, and CPython's errors for container methods.

NOTE [Container slots called as methods]: `p.__contains__(x)`, `p.__getitem__(i)`, `t.__add__(u)`,
`d.__setitem__(k, v)`, `p.__iadd__(q)` on a list, tuple or dict value: the bound slot is read like the named
methods (attributes.CONTAINER_METHODS) and called as the operation it implements (the operator function,
which the trace models: `in`, `[]`, `+`, `==`, `+=`, ...). Only for an object whose type is exactly list,
tuple or dict: a subclass may override the operation, while `list.__getitem__(p, i)` runs list's own. A slot
is not the operator either where the other operand is of another type: the rich comparisons answer
NotImplemented for an operand that is not of the container's type (`[1].__eq__(1)`), concatenation raises
TypeError (`[1].__add__({})`), repetition wants an integer (the slot's own message, not the operator's),
`d.__or__(e)` answers NotImplemented for a non-dict `e` (`d.__ror__(e)` is `e | d`); an operand of a subclass
(whose reflected method the operator would try first) is a graph break.

NOTE [Argument errors of container methods]: `p.append()`, `p.insert(1)`, `p.pop(2, 3)`, `p.clear(1)` raise
CPython's TypeError before anything happens; the models of these methods indexed their arguments and failed
inside framejit (an internal error, a graph break; under fullgraph an error eager does not raise). Where the
arguments do not bind to the method's text signature, the real method is called on an empty container with
placeholders (the count is checked before any value) and its TypeError is the user's exception. So is the
IndexError of `p.pop(i)` out of range, raised by the same operation on the trace's items.
dict and OrderedDict methods are checked the same way against the counts below (`dict.pop` and
`dict.update` have no text signature on any version, `dict.keys` none on 3.11): `d.get()`, `d.pop()`,
`d.setdefault()`, `d.update({}, {})`, `d.copy(1)` raise eager's TypeError; keywords the model ignores
(`OrderedDict.pop(key=k)`, which CPython accepts) are a break.
"""
from __future__ import annotations

import collections
import inspect
import operator
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import BuiltinValue, ConstantValue, Value

_SLOT_OPS = {
    "__contains__": (operator.contains, 1), "__getitem__": (operator.getitem, 1), "__len__": (len, 0),
    "__iter__": (iter, 0), "__setitem__": (operator.setitem, 2), "__delitem__": (operator.delitem, 1),
    "__add__": (operator.add, 1), "__mul__": (operator.mul, 1), "__rmul__": (operator.mul, 1),
    "__iadd__": (operator.iadd, 1), "__imul__": (operator.imul, 1),
    "__eq__": (operator.eq, 1), "__ne__": (operator.ne, 1), "__lt__": (operator.lt, 1), "__le__": (operator.le, 1),
    "__gt__": (operator.gt, 1), "__ge__": (operator.ge, 1),
    "__or__": (operator.or_, 1), "__ror__": (operator.or_, 1), "__ior__": (operator.ior, 1),  # dict's (PEP 584)
}
_DICT_ONLY = ("__or__", "__ror__", "__ior__")
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
_MUTATING = {"__setitem__", "__delitem__", "__iadd__", "__imul__"}
_READING = ("__contains__", "__getitem__", "__len__", "__iter__", "__eq__", "__ne__")
SLOTS = {
    list: tuple(name for name in _SLOT_OPS if name not in _DICT_ONLY),
    tuple: tuple(name for name in _SLOT_OPS if name not in _MUTATING and name not in _DICT_ONLY),
    dict: _READING + ("__setitem__", "__delitem__") + _DICT_ONLY,
}


def is_container_slot(owner: type, name: str, self_value: Value) -> bool:
    """`owner.<name>` is a slot modelled here for this value (its type exactly `owner`)."""
    if name not in SLOTS.get(owner, ()):
        return False
    try:
        return self_value.python_type() is owner
    except Unsupported:
        return False


def call_container_slot(tx, owner: type, name: str, self_value: Value, args: list[Value],
                        kwargs: dict[str, Value]) -> Value:
    """NOTE [Container slots called as methods]."""
    fn, arity = _SLOT_OPS[name]
    if kwargs or len(args) != arity:
        _raise_arity_error(owner, name, args, kwargs)
    if name in _COMPARISONS or name in ("__add__", "__mul__", "__rmul__", "__imul__", "__or__", "__ror__"):
        early = _other_operand(owner, name, args[0])
        if early is not None:
            return early
    if name == "__ror__":  # `d.__ror__(e)` is `e | d` for a dict `e` of d's type
        return tx.call(BuiltinValue(fn), [args[0], self_value], {})
    result = tx.call(BuiltinValue(fn), [self_value, *args], {})
    if name in ("__setitem__", "__delitem__"):
        return ConstantValue(None)
    return result


def _other_operand(owner: type, name: str, other: Value) -> Value | None:
    """What the slot does with an operand the operator would treat otherwise; None: the operator's answer."""
    try:
        other_type = other.python_type()
    except Unsupported:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} of {other.describe()}") from None
    if name in ("__mul__", "__rmul__", "__imul__"):
        if issubclass(other_type, (int,)) or hasattr(other_type, "__index__"):
            return None
        raise UserException(TypeError(f"'{other_type.__name__}' object cannot be interpreted as an integer"))
    if other_type is owner:
        return None
    if issubclass(other_type, owner):  # its reflected method could answer first through the operator
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} of a {other_type.__name__}")
    if name == "__add__":
        raise UserException(TypeError(f'can only concatenate {owner.__name__} (not "{other_type.__name__}") '
                                      f'to {owner.__name__}'))
    return ConstantValue(NotImplemented)


def check_method_arguments(owner: type, name: str, args: list[Value], kwargs: dict[str, Value]) -> None:
    """NOTE [Argument errors of container methods]: CPython's TypeError where the arguments do not bind."""
    method = getattr(owner, name, None)
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return  # no text signature: the method's model checks what it needs
    try:
        signature.bind(None, *args, **kwargs)
    except TypeError:
        _raise_arity_error(owner, name, args, kwargs)


def _raise_arity_error(owner: type, name: str, args: list, kwargs: dict) -> None:
    placeholders: list[Any] = [0] * len(args)
    try:
        getattr(owner, name)(owner(), *placeholders, **{k: 0 for k in kwargs})
    except TypeError as e:
        raise UserException(e) from None
    except Exception:  # noqa: BLE001  (any other error: the count was accepted)
        pass
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} with {len(args)} arguments")


# positional counts (least, most) of the dict methods container_methods._dict_method models; True where
# keywords are taken (update's are the items)
_DICT_ARITY = {"get": (1, 2, False), "pop": (1, 2, False), "setdefault": (1, 2, False), "update": (0, 1, True),
               "keys": (0, 0, False), "values": (0, 0, False), "items": (0, 0, False), "copy": (0, 0, False),
               "clear": (0, 0, False), "__getitem__": (1, 1, False), "__contains__": (1, 1, False),
               "__len__": (0, 0, False), "__iter__": (0, 0, False), "popitem": (0, 0, False)}


# NOTE [Receivers of unbound container methods]: `dict.popitem(proxy)`, `dict.pop(proxy, k)` on a
# mappingproxy, `OrderedDict.move_to_end(plain_dict, k)`, `set.union(frozen)`: CPython's method descriptor
# checks its first argument's type and raises TypeError. The trace modelled the call on the value as if it
# were the owner's instance: a mappingproxy's DictValue was mutated, and the replay after the graph raised
# AttributeError outside the user's `try` (review revAJ MED-2). The check runs before any other.
def check_receiver(fn: Any, self_value: Value, explicit: bool = True) -> None:
    """For the program's own call of the method descriptor `fn` (not `explicit`: the translator's call, which
    may pass a dict object's contents, dict_objects.dict_contents)."""
    if not explicit:
        return
    owner, name = fn.__objclass__, fn.__name__
    try:
        cls = self_value.python_type()
    except Unsupported:
        return
    if issubclass(cls, owner) or (cls is types.MappingProxyType and hasattr(cls, name)):
        return  # (a mappingproxy's own readers, `proxy.get(k)`, are modelled by dict's: attributes._dict_attr)
    if isinstance(fn, types.WrapperDescriptorType):  # a slot wrapper (`dict.__setitem__`): its own message
        raise UserException(TypeError(f"descriptor '{name}' requires a '{_tp_name(owner)}' object but received a "
                                      f"'{_tp_name(cls)}'"))
    raise UserException(TypeError(f"descriptor '{name}' for '{_tp_name(owner)}' objects doesn't apply to a "
                                  f"'{_tp_name(cls)}' object"))


def _tp_name(cls: type) -> str:
    """CPython's `tp_name` of a class, as its messages name it: a static type's includes its module."""
    if cls.__flags__ & (1 << 9) or cls.__module__ == "builtins":  # Py_TPFLAGS_HEAPTYPE: a class statement's
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def check_dict_arguments(owner: type, name: str, args: list[Value], kwargs: dict[str, Value]) -> None:
    """NOTE [Argument errors of container methods] for dict and OrderedDict methods."""
    if owner is collections.OrderedDict and name == "popitem":  # popitem(last=True): one, by name or position
        if len(args) + len(kwargs) > 1 or set(kwargs) - {"last"}:
            _raise_arity_error(owner, name, args, kwargs)
        return
    least, most, keywords = _DICT_ARITY.get(name, (0, len(args), True))
    if least <= len(args) <= most and (keywords or not kwargs):
        return
    if least <= len(args) <= most:  # keywords: eager's TypeError where the method takes none, else a break
        try:
            getattr(owner, name)(owner(), *[0] * len(args), **{k: 0 for k in kwargs})
        except TypeError as e:
            raise UserException(e) from None
        except Exception:  # noqa: BLE001  (accepted)
            pass
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} with keyword arguments")
    _raise_arity_error(owner, name, args, kwargs)
