"""Binary operators of Python classes: `a + b` where a class defines `__add__`/`__radd__`/`__iadd__` in Python.

NOTE [Operators of Python classes]: `Counter(a) + Counter(b)`, a user vector's `v * 2`, `2 * v`, `acc += item`
run methods written in Python. CPython's protocol (the data model's rules, which `binary_op1` implements):
for `a op b`, when type(b) is a proper subclass of type(a) that defines the reflected `__rop__` itself, try
`b.__rop__(a)` first; then `a.__op__(b)`; then, when the types differ, `b.__rop__(a)`; a method that is
absent or returns NotImplemented passes to the next; none answering is a TypeError. `a op= b` tries
`a.__iop__(b)` first, then the same as `a op b`. Each method is looked up on the type (never the instance)
and inlined; each lookup, found or absent, is guarded (NOTE [Lookup facts]).

Handled when an operand is an object (made while tracing or from outside) whose class defines one of the
methods as a plain Python function, and the other operand is such an object or a number constant (an int,
float, bool or complex answers NotImplemented for any other operand, so only the object's methods run), or a
plain set, frozenset, list, tuple or dict (`ordered_set -= [x]`: their operator methods answer NotImplemented
to another class; where all answer so, the break leaves the sequence fallbacks and the TypeError to Python).
Anything else (a tensor, a string or list operand, a method that is a C slot or a descriptor) is left to
protocol.binary as before.
"""
from __future__ import annotations

import operator
import types
from typing import Any, Callable

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .parametrized_classes import rely_on_identity
from .values import (ClassValue, ConstantValue, DictValue, NewObjectValue, ObjectValue, PyModuleValue, SequenceValue,
                     SetValue, Value)

_NAMES = {operator.add: ("add", "+"), operator.sub: ("sub", "-"), operator.mul: ("mul", "*"),
          operator.truediv: ("truediv", "/"), operator.floordiv: ("floordiv", "//"), operator.mod: ("mod", "%"),
          operator.pow: ("pow", "** or pow()"), operator.matmul: ("matmul", "@"), operator.lshift: ("lshift", "<<"),
          operator.rshift: ("rshift", ">>"), operator.and_: ("and", "&"), operator.or_: ("or", "|"),
          operator.xor: ("xor", "^")}
_NUMBERS = (int, float, bool, complex)


def _object_type(v: Value) -> type | None:
    """The class of an instance of a user class (not a class, not a Python module)."""
    if isinstance(v, (ClassValue, PyModuleValue)):
        return None
    if isinstance(v, (ObjectValue, NewObjectValue)):
        return v.python_type()
    return None


def not_python_reason(cls: type, name: str) -> str:
    import torch
    from .tensor_subclasses import opaque_reason  # NOTE [Tensor subclasses traced as tensors]
    reason = opaque_reason(cls) if issubclass(cls, torch.Tensor) else None
    return f"{cls.__name__}.{name} of a {reason}" if reason else f"{cls.__name__}.{name} is not a Python function"


def _method(tx, cls: type, name: str) -> Any:
    """The Python function `name` resolves to on `cls` (guarded), None when absent; Unsupported when it is
    something else (a C slot of a builtin base, a descriptor)."""
    lookup.guard_lookup(tx.output, cls, name)
    index, found = lookup.mro_lookup(cls, name)
    if index is None:
        return None
    if isinstance(found, types.FunctionType):
        return found
    if found is None:  # `__add__ = None`: CPython raises TypeError at the call
        raise UserException(TypeError("'NoneType' object is not callable"))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, not_python_reason(cls, name))


def _applies(a: Value, b: Value) -> bool:
    ta, tb = _object_type(a), _object_type(b)
    if ta is None and tb is None:
        return False
    for side, t in ((a, ta), (b, tb)):
        if t is None and not (isinstance(side, ConstantValue) and type(side.value) in _NUMBERS) and \
                not _plain_container(side):
            return False
        if t is not None and issubclass(t, _NUMBERS + (str, bytes, list, tuple)):
            return False  # a builtin base's C methods take part
    return True


def user_binary(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """`fn(a, b)` by the protocol of the NOTE, or None when it does not apply."""
    from .protocol import INPLACE_TO_PLAIN
    plain = INPLACE_TO_PLAIN.get(fn, fn)
    if plain not in _NAMES or not _applies(a, b):
        return None
    stem, symbol = _NAMES[plain]
    ta, tb = _object_type(a), _object_type(b)
    _dispatch_on_identity(tx, ta, tb)
    if fn is not plain:
        symbol += "="
        if ta is not None and _method(tx, ta, f"__i{stem}__") is not None:
            result = tx.call_special_of(a, f"__i{stem}__", [b], {})
            if not _not_implemented(result):
                return result
    forward = _method(tx, ta, f"__{stem}__") if ta is not None else None
    reflected = _method(tx, tb, f"__r{stem}__") if tb is not None and tb is not ta else None
    if reflected is not None and ta is not None and issubclass(tb, ta) and \
            reflected is not lookup.mro_lookup(ta, f"__r{stem}__")[1]:  # the subclass's own reflected method first
        result = tx.call_special_of(b, f"__r{stem}__", [a], {})
        if not _not_implemented(result):
            return result
        reflected = None
    if forward is not None:
        result = tx.call_special_of(a, f"__{stem}__", [b], {})
        if not _not_implemented(result):
            return result
    if reflected is not None:
        result = tx.call_special_of(b, f"__r{stem}__", [a], {})
        if not _not_implemented(result):
            return result
    if _plain_container(a) or _plain_container(b):  # a list's concatenation, a tuple's repeat...: as Python
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{symbol} of {a.describe()} and {b.describe()} after "
                                                      "NotImplemented")
    raise UserException(TypeError(f"unsupported operand type(s) for {symbol}: '{_type_name(a)}' and '{_type_name(b)}'"))


def _plain_container(v: Value) -> bool:
    """A plain set, frozenset, list, tuple or dict: with an object of another class, its own operator methods
    answer NotImplemented (NOTE [Operators of Python classes]); the sequence fallbacks of `+`/`*` are not
    modelled (the caller breaks when every method answered NotImplemented)."""
    return isinstance(v, ConstantValue) and type(v.value) in (tuple, frozenset) or \
        isinstance(v, (SetValue, SequenceValue, DictValue)) and v.python_type() in _PLAIN_CONTAINERS


def _not_implemented(result: Value) -> bool:
    return isinstance(result, ConstantValue) and result.value is NotImplemented


def _type_name(v: Value) -> str:
    return v.python_type().__name__


# NOTE [Comparisons of Python classes]: `a < b`, `a == b` where a class defines `__lt__`/`__eq__`/... in Python
# (dataclass(order=True), functools.total_ordering, a key class) follow do_richcompare: when type(b) is a
# proper subclass of type(a), b's reflected method first (`b.__gt__(a)` for `<`); then `a.__lt__(b)`; then,
# if not tried yet, b's reflected one; NotImplemented passes on; none answering is identity for `==`/`!=`
# and a TypeError for orderings. object's own methods are modelled: `__eq__` answers identity or
# NotImplemented, `__ne__` inverts the class's `__eq__`, the orderings answer NotImplemented. Engaged only
# when one of the methods consulted is a Python function (else comparisons.compare's identity rules, which
# guard `__eq__`/`__ne__`, answer as before); the other operand may be an int, float, bool, complex, str,
# bytes or None constant (their methods answer NotImplemented to any other object), or a plain set, frozenset,
# list, tuple or dict (their comparisons answer NotImplemented to an object of another type: set_richcompare
# to anything but a set or frozenset, list_richcompare, tuplerichcompare, dict_richcompare to anything but
# their own type; a class deriving collections.abc.Set compares `MySet(...) == {"a", "b"}` so). A dict
# subclass takes part (Counter's ==, <, <= are Python); where the lookup finds dict's own C method instead,
# that is a break. A set or frozenset subclass whose comparisons are the base's (looked up, guarded) is such a
# plain set (`OrderedSet("abc") == SetSubclass("abc")`).
_COMPARISONS = {operator.lt: ("__lt__", "<", operator.gt), operator.le: ("__le__", "<=", operator.ge),
                operator.gt: ("__gt__", ">", operator.lt), operator.ge: ("__ge__", ">=", operator.le),
                operator.eq: ("__eq__", "==", operator.eq), operator.ne: ("__ne__", "!=", operator.ne)}
_COMPARED_CONSTANTS = _NUMBERS + (str, bytes, type(None))


def _compared_type(v: Value) -> type | None:
    t = _object_type(v)
    return None if t is None or issubclass(t, _NUMBERS + (str, bytes, list, tuple, set, frozenset)) else t


_PLAIN_CONTAINERS = (set, frozenset, list, tuple, dict)


def _compares(a: Value, b: Value) -> bool:
    for side in (a, b):
        if _compared_type(side) is None and not (isinstance(side, ConstantValue)
                                                 and type(side.value) in _COMPARED_CONSTANTS + _PLAIN_CONTAINERS) \
                and not (isinstance(side, (SetValue, SequenceValue, DictValue))
                         and side.python_type() in _PLAIN_CONTAINERS) and _set_subclass(side) is None:
            return False
    return _compared_type(a) is not None or _compared_type(b) is not None


_RICH = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


def _set_subclass(v: Value) -> type | None:
    """A set or frozenset subclass that keeps the base's comparisons (set_richcompare: NotImplemented to anything
    that is not a set or frozenset), so it compares with a user object as a plain set does (NOTE [Comparisons of
    Python classes]); the caller guards the lookups (`_guard_set_subclasses`)."""
    t = v.python_type() if isinstance(v, SetValue) else None
    if t is None or t in _PLAIN_CONTAINERS or not issubclass(t, (set, frozenset)):
        return None
    base = set if issubclass(t, set) else frozenset
    return t if all(lookup.mro_lookup(t, n)[1] is base.__dict__[n] for n in _RICH) else None


def _guard_set_subclasses(tx, a: Value, b: Value) -> None:
    for side in (a, b):
        t = _set_subclass(side)
        for name in _RICH if t is not None else ():
            lookup.guard_lookup(tx.output, t, name)


def _python_method(cls: type | None, name: str) -> bool:
    return cls is not None and isinstance(lookup.mro_lookup(cls, name)[1], types.FunctionType)


def _compare_with(tx, op: Callable, side: Value, other: Value, cls: type) -> Value:
    """`type(side).__op__(side, other)` (a Python method inlined, or object's own modelled)."""
    from .comparisons import is_same
    from .protocol import truth
    name = _COMPARISONS[op][0]
    lookup.guard_lookup(tx.output, cls, name)
    found = lookup.mro_lookup(cls, name)[1]
    if isinstance(found, types.FunctionType):
        return tx.call_special_of(side, name, [other], {})
    if found is not object.__dict__[name]:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, not_python_reason(cls, name))
    if op is operator.eq:
        return ConstantValue(True) if is_same(tx, side, other) else ConstantValue(NotImplemented)
    if op is operator.ne:
        equal = _compare_with(tx, operator.eq, side, other, cls)
        return equal if _not_implemented(equal) else ConstantValue(not truth(tx, equal))
    return ConstantValue(NotImplemented)


def user_compare(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """`fn(a, b)` for a rich comparison by the protocol of NOTE [Comparisons of Python classes], or None."""
    from .comparisons import is_same
    if fn not in _COMPARISONS or not _compares(a, b):
        return None
    name, symbol, reflected = _COMPARISONS[fn]
    _guard_set_subclasses(tx, a, b)
    ta, tb = _compared_type(a), _compared_type(b)
    _dispatch_on_identity(tx, ta, tb)
    consulted = [(ta, name), (tb, _COMPARISONS[reflected][0])]
    if fn is operator.ne:
        consulted += [(ta, "__eq__"), (tb, "__eq__")]
    if not any(_python_method(cls, n) for cls, n in consulted):
        return None
    reversed_first = ta is not None and tb is not None and ta is not tb and issubclass(tb, ta)
    if reversed_first:
        result = _compare_with(tx, reflected, b, a, tb)
        if not _not_implemented(result):
            return result
    if ta is not None:
        result = _compare_with(tx, fn, a, b, ta)
        if not _not_implemented(result):
            return result
    if tb is not None and not reversed_first:
        result = _compare_with(tx, reflected, b, a, tb)
        if not _not_implemented(result):
            return result
    if fn in (operator.eq, operator.ne):
        return ConstantValue(is_same(tx, a, b) == (fn is operator.eq))
    raise UserException(TypeError(f"'{symbol}' not supported between instances of '{_type_name(a)}' and "
                                  f"'{_type_name(b)}'"))


_UNARY = {operator.neg: ("__neg__", "unary -"), operator.pos: ("__pos__", "unary +"),
          operator.invert: ("__invert__", "unary ~"), operator.abs: ("__abs__", "abs()")}


def user_unary(tx, fn: Callable, a: Value) -> Value | None:
    """`-a`, `+a`, `~a`, `abs(a)` for an object whose class defines the method in Python (inlined); eager's TypeError
    when the class (a plain one) has none; None when it does not apply."""
    t = _compared_type(a)
    if fn not in _UNARY or t is None:
        return None
    name, symbol = _UNARY[fn]
    if _method(tx, t, name) is None:
        raise UserException(TypeError(f"bad operand type for {symbol}: '{t.__name__}'"))
    return tx.call_special_of(a, name, [], {})


# NOTE [object's comparison slots called directly]: `object.__eq__(a, b)`, `object.__ne__(a, b)` and
# `Cls.__ne__(a, b)` where Cls inherits object's (collections.abc.Set defines `__eq__` only) call object's own
# methods (CPython's object_richcompare): `__eq__` answers True for the same object, else NotImplemented;
# `__ne__` calls `type(a)`'s `__eq__` slot with (a, b) (the class's Python method, looked up and guarded,
# inlined; object's own modelled) and inverts its truth unless it answered NotImplemented; the orderings
# answer NotImplemented. Handled when `a` is an instance of a user class (its `__eq__` is what _compare_with
# models); anything else stays a break. A wrong argument count raises what the real slot raises.
_OBJECT_SLOTS = {object.__eq__: operator.eq, object.__ne__: operator.ne, object.__lt__: operator.lt,
                 object.__le__: operator.le, object.__gt__: operator.gt, object.__ge__: operator.ge}


def object_slot_call(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`object.__eq__(a, b)` and its siblings (NOTE [object's comparison slots called directly])."""
    if len(args) != 2 or kwargs:
        try:
            fn(*[object()] * len(args), **{k: None for k in kwargs})
        except TypeError as e:
            raise UserException(e) from None
    cls = _compared_type(args[0])
    if len(args) != 2 or kwargs or cls is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of object.{fn.__name__} on {args[0].describe()}")
    op = _OBJECT_SLOTS[fn]
    if op is operator.eq:
        from .comparisons import is_same
        return ConstantValue(True) if is_same(tx, args[0], args[1]) else ConstantValue(NotImplemented)
    if op is not operator.ne:
        return ConstantValue(NotImplemented)
    from .protocol import truth
    equal = _compare_with(tx, operator.eq, args[0], args[1], cls)
    return equal if _not_implemented(equal) else ConstantValue(not truth(tx, equal))


def _dispatch_on_identity(tx, ta: type | None, tb: type | None) -> None:
    """Operator dispatch asks `ta is tb` and `issubclass(tb, ta)`: classes matched as alike would change the
    answer (NOTE [Parametrized classes alike]), so the entry matches these types by identity."""
    if ta is not None and tb is not None:
        rely_on_identity(tx.output, ta)
        rely_on_identity(tx.output, tb)


__all__ = ["object_slot_call", "user_binary", "user_compare", "user_unary"]
