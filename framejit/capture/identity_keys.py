"""Set elements over abstract values, tensors included.

NOTE [Sets of tensors]: CPython hashes a tensor by its identity, so `{x, y}`, `s.add(y)` and `y in s`
depend only on which tensors are the same object. A tensor element is an IdentityKey whose token is the
identity of its fake tensor: values made by an in-place op (or an op returning its input) share their
input's fake, as the real results are the input object. Two different graph inputs were different
objects when traced; that is guarded (`a is not b`) as soon as both are used as elements, so a later
call that passes one tensor twice recompiles. A set holding tensors iterates in an order CPython
derives from addresses: iterating or popping one with more than one element is a graph break, and it
is never folded as a constant. Dict keys use the same elements (`state[param]`); a dict keeps insertion
order, so iterating one keyed by tensors is exact.
The trace's own set of IdentityKeys hashes otherwise than the real elements, so its layout is not eager's
even where the trace made it by the program's operations (`exact`): known_layout is false for it. Such a set
made in the frame, returned or live at a break, was rebuilt from its elements in the trace set's order and
iterated differently from eager's (`list(set(params))`; merged into a set from outside by `S.update(t)`, S's
order too): rebuilding one of two or more elements (identity_set_elements) or replaying a mutation by it is
a break, and where none can be taken the frame runs as Python.
"""
from __future__ import annotations

import types
from typing import Any

import torch

from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, DictValue, ListValue, SetValue, TensorValue, Value
from .values.mappings import HOOK_IDS_LIVE, IdentityKey, ValueKey, key_value


# NOTE [Sets of functions from outside]: besides constants, a set from outside (values/builder.py) may hold
# functions (Python and builtin ones: `{torch._C._set_grad_enabled, "hello"}`, checked with `f in s`). They
# hash and compare by identity, so membership is exact on the real objects, and the whole-set guard
# (builder.guard_set) compares them by identity too (list equality tries `is` first; a function's __eq__ is
# identity). A function from outside whose identity is guarded is its own element here. Such a set is
# never iterated or popped by the trace (its elements would be functions as constants), only queried,
# compared and changed. complex is a constant like float. Classes (of metaclass `type`) are such elements too:
# dataclasses' `type(obj) in _ATOMIC_TYPES` (a module-level frozenset of classes) is a membership query on them.
# A class of another metaclass (ABCMeta, a library's registry metaclass: `type(obj) in _HANDLED`) is one too
# when its metaclass keeps type's __eq__ and __hash__, so it still compares and hashes by identity.
SET_ELEMENT_TYPES = (int, str, bool, float, complex, type(None), types.FunctionType, types.BuiltinFunctionType, type)
FUNCTION_ELEMENT_TYPES = (types.FunctionType, types.BuiltinFunctionType, type)


def is_set_element(obj: Any) -> bool:
    """An element a set from outside may hold (NOTE [Sets of functions from outside])."""
    return type(obj) in SET_ELEMENT_TYPES or _identity_class(obj)


def is_function_element(obj: Any) -> bool:
    """A function or class element: queried by identity, never iterated (NOTE [Sets of functions from outside])."""
    return type(obj) in FUNCTION_ELEMENT_TYPES or _identity_class(obj)


def _identity_class(obj: Any) -> bool:
    meta = type(obj)
    return isinstance(obj, type) and meta.__eq__ is type.__eq__ and meta.__hash__ is type.__hash__


def set_element(tx, value: Value, into: Any = None) -> Any:
    """The hashable element `value` is in a set (a constant, or an IdentityKey for a tensor); `into`: the set
    or dict it goes in or is looked up in, or process_ids.BUILT for one being built (None: not known)."""
    from .process_ids import ProcessIdValue, key_of
    if isinstance(value, ProcessIdValue):
        return key_of(value, into)  # NOTE [Ids as keys inside the trace]
    if isinstance(value, TensorValue):
        from .tensor_operators import check_tensor_dunder
        check_tensor_dunder(tx, value, "__hash__")  # NOTE [Patched tensor operators]
        _guard_distinct_inputs(tx, value)
        return IdentityKey(value, ("tensor", id(value.fake)))
    key = _object_key(tx, value) or _c_method_key(tx, value) or _tuple_key(tx, value)
    if key is not None:
        return key
    real = _value_key(tx, value)
    if real is not None:  # NOTE [Frozen dataclasses as dict keys] in values/builder.py
        return real
    made = _made_here_key(tx, value)
    if made is not None:  # NOTE [Objects made in the trace as keys]
        return made
    from .values import UserFunctionValue
    if isinstance(value, UserFunctionValue) and _by_identity(tx, value) and \
            value.closure is None and value.attrs is None and value.defaults is None and value.kwdefaults is None:
        # NOTE [Sets of functions from outside]: a function from outside, its identity guarded, or a library
        # function or a key of a guarded dict (no source, not made in the trace: NOTE [Functions as dict keys])
        return value.fn
    if not value.is_constant() or (isinstance(value, SetValue) and issubclass(value.cls, set)):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{value.describe()} as a set element or dict key (only "
                                                       "constants and tensors are modelled)")
    try:
        constant = value.as_constant()
        hash(constant)
    except TypeError as e:
        raise UserException(e) from None
    return constant


# NOTE [Sets looked up as frozensets]: `set("ab") in {frozenset("ab")}`, `s.discard(set("ab"))` and
# `s.remove(...)` find the frozenset element: CPython's set_contains/set_discard/set_remove, when hashing the key
# fails with TypeError and the key is a set, look up `frozenset(key)` instead (only for lookups: `add` and dict
# keys keep the TypeError). A set value of constants (not tensors) is looked up so; its class must leave
# `__hash__` None (a subclass that defines one is hashed as itself). It was a break ("as a set element or dict
# key"). A `remove` that does not find it raises KeyError holding the set object itself: left to Python.
def set_lookup_element(tx, value: Value, into: Any) -> Any:
    """The element `value` is looked up as in a set (NOTE [Sets looked up as frozensets])."""
    if isinstance(value, SetValue) and issubclass(value.cls, set) and value.cls.__hash__ is None and \
            not any(isinstance(k, IdentityKey) for k in value.items):
        return frozenset(value.items)
    return set_element(tx, value, into)


def _by_identity(tx, value) -> bool:
    """A function guarded by identity, or a top-level lambda (guarded by code so that its entries persist:
    NOTE [Code found through the call's arguments]) whose identity is guarded now, as a key needs it."""
    if not value.by_code:
        return True
    if value.source is None or value.fn.__closure__ or "<locals>" in value.fn.__qualname__:
        return False
    tx.output.guard_id(value.source, value.fn)
    return True


def dict_key(tx, value: Value, into: Any = None) -> Any:
    """The key `value` is in a dict looked up (or written) by the program; a dict key hashes as a set element
    does, and dicts keep insertion order. A dict being built (BUILD_MAP, MAP_ADD, dict(pairs)) takes
    set_element."""
    key = set_element(tx, value, into)
    if HOOK_IDS_LIVE and type(key) is int:
        from .hook_handles import note_key_lookup  # NOTE [Hook ids that never leave the trace]
        note_key_lookup(tx, key)
    return key


# NOTE [Objects as dict keys]: CPython hashes and compares a module (of a class that keeps object's __eq__
# and __hash__) by identity, as it does a tensor: `scales = {block: 2.0 ...}`,
# `names = {m: n for n, m in model.named_modules()}`, a registry keyed by hook owners. Such a dict from outside
# was "non-constant keys" (a break, and the resume function holding it ran wholly eagerly), and `d[m]` broke.
# A module from outside (it has a source) is an IdentityKey of its identity, guarded (`is` the module the
# trace saw); the dict from outside wraps each such key through `list(d)[i]` as it does tensor keys
# (values/builder._dict_key), so iterating it gives the module itself, sourced. Other objects stay a break.
# An instance of any user class (a class statement's heap type, of metaclass `type`) keeping object's __eq__ and
# __hash__ is such a key too (`REF[self] = {}` registries keyed by plain objects); the class's lookups of both
# are guarded where the key is made (lookup.guard_lookup), as for objects made in the trace.
_HEAP_TYPE = 1 << 9


def identity_hashed(obj: Any) -> bool:
    cls = type(obj)
    if cls.__eq__ is not object.__eq__ or cls.__hash__ is not object.__hash__:
        return False
    return isinstance(obj, torch.nn.Module) or (type(cls) is type and bool(cls.__flags__ & _HEAP_TYPE)
                                                and not isinstance(obj, (BaseException, torch.Tensor)))


def _object_key(tx, value: Value) -> IdentityKey | None:
    from .values import NNModuleValue, ObjectValue
    if type(value) not in (NNModuleValue, ObjectValue) or value.source is None or not identity_hashed(value.obj):
        return None
    if not isinstance(value.obj, torch.nn.Module):
        from .lookup import guard_lookup
        guard_lookup(tx.output, type(value.obj), "__eq__")
        guard_lookup(tx.output, type(value.obj), "__hash__")
    tx.output.guard_id(value.source, value.obj)
    return IdentityKey(value, ("object", id(value.obj)))


# NOTE [Bound C methods as keys]: CPython hashes and compares a bound builtin method (`seen.add`, `out.append`)
# by the identity of its `__self__` and by its method: `{app: 1}`, `d.get(GL.append)`. Such a method modelled
# on its container (a BoundMethodValue over the method descriptor: read in the trace, or held in a local before
# a break, NOTE [Container methods from outside] in values/builder.py) is a MethodKey. Bound to an object from
# outside, that object's identity is guarded and the key hashes and compares as the real bound method, so it
# meets the same method read as a constant (a global's `GL.append`, a key of a dict from outside); bound to a
# container made in the trace, it is equal only to the same method of the same container value (nothing from
# before the call can hold it). It was "as a set element or dict key (only constants and tensors)", where no
# break could be taken (BUILD_MAP), and the frame ran eagerly (review revR R1). A tuple holding one (`{(app, 1):
# 2}`, R1b) is a TupleKey: it hashes and compares as the tuple of its elements' keys.
class MethodKey(IdentityKey):
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdentityKey):
            return other.token == self.token
        return not (type(self.token) is tuple and self.token[0] is _MADE_HERE) and self.token == other

    def __hash__(self) -> int:
        return hash(self.token)


class TupleKey(IdentityKey):
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return self.token == (other.token if isinstance(other, TupleKey) else other)

    def __hash__(self) -> int:
        return hash(self.token)


_MADE_HERE = object()  # a MethodKey's token for a method of a container made in the trace: equal to no real key


def _tuple_key(tx, value: Value) -> TupleKey | None:
    from .values import BoundMethodValue, NewObjectValue, PartialValue, TupleValue
    if not isinstance(value, TupleValue) or not _hashes_as_tuple(tx, value.python_type()) or \
            value.is_constant() or not any(isinstance(item, (BoundMethodValue, TupleValue, NewObjectValue,
                                                             PartialValue)) for item in value.items):
        return None
    keys = tuple(set_element(tx, item) for item in value.items)
    return TupleKey(value, keys) if any(isinstance(k, (MethodKey, TupleKey)) or _made_here(k) for k in keys) \
        else None


def _hashes_as_tuple(tx, cls: type) -> bool:
    """tuple, or a subclass (a namedtuple) keeping tuple's __eq__ and __hash__ (guarded)."""
    if cls is tuple:
        return True
    if not issubclass(cls, tuple) or cls.__eq__ is not tuple.__eq__ or cls.__hash__ is not tuple.__hash__:
        return False
    from .lookup import guard_lookup
    guard_lookup(tx.output, cls, "__eq__")
    guard_lookup(tx.output, cls, "__hash__")
    return True


# NOTE [Objects made in the trace as keys]: an instance of a user class made while tracing (`key =
# CustomKey(42, "x"); d[key] = x`) whose class keeps object's __eq__ and __hash__, and a functools.partial made
# while tracing, hash and compare by identity in CPython, and nothing from before the call can be that object.
# Such a value is an IdentityKey whose token is its own abstract value (one NewObjectValue or PartialValue
# stands for one object for the whole trace); the class's lookups of __eq__ and __hash__ are guarded. A tuple
# or namedtuple holding one is a TupleKey of its items' keys, hashing and comparing as the tuple does (item
# by item). A dict keyed so keeps insertion order (iterated exactly); a set of more than one such element
# iterates in address order (set_items: a break). Objects from outside stay a break here.
_MADE_KEY = "made in the trace"


def _made_here(key: Any) -> bool:
    return isinstance(key, IdentityKey) and type(key.token) is tuple and key.token[0] is _MADE_KEY


def _made_here_key(tx, value: Value) -> IdentityKey | None:
    from .values import NewObjectValue, PartialValue
    if getattr(value, "source", None) is not None:
        return None
    if type(value) is PartialValue:
        return IdentityKey(value, (_MADE_KEY, id(value)))  # the key holds value: the id stays its own
    if not isinstance(value, NewObjectValue):
        return None
    cls = value.python_type()
    if cls.__eq__ is not object.__eq__ or cls.__hash__ is not object.__hash__:
        return None
    from .lookup import guard_lookup
    guard_lookup(tx.output, cls, "__eq__")
    guard_lookup(tx.output, cls, "__hash__")
    return IdentityKey(value, (_MADE_KEY, id(value)))  # the key holds value: the id stays its own


def _c_method_key(tx, value: Value) -> MethodKey | None:
    from .function_attrs import _C_METHODS
    from .values import BoundMethodValue, BuiltinValue
    if not (isinstance(value, BoundMethodValue) and isinstance(value.func, BuiltinValue)
            and isinstance(value.func.obj, tuple(_C_METHODS))):
        return None
    descriptor, owner = value.func.obj, value.self_value
    if not isinstance(owner, (ListValue, DictValue, SetValue)) or owner.python_type() not in (list, dict, set):
        return None
    if owner.source is None:
        return MethodKey(value, (_MADE_HERE, id(owner), descriptor))
    real = next((obj for obj, _, v in tx.output._by_object.values() if v is owner), None)
    if real is None:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{value.describe()} as a set element or dict key")
    tx.output.guard_id(owner.source, real)
    return MethodKey(value, descriptor.__get__(real, type(real)))


def _value_key(tx, value: Value) -> ValueKey | None:
    """A key standing for `value` that hashes and compares as a real instance equal (and hashing equal) to the frozen dataclass instance `value` stands for, built
    from the attributes the trace reads (guarded for an object from outside), or None."""
    from .values import NewObjectValue, ObjectValue
    from .values.builder import value_key_class, value_key_fields
    if not isinstance(value, (NewObjectValue, ObjectValue)) or not value_key_class(value.python_type()):
        return None
    cls = value.python_type()
    names = list(value.attrs) if isinstance(value, NewObjectValue) else list(vars(value.obj))
    attrs = {name: tx.getattr(value, name) for name in names}
    if not all(a.is_constant() for a in attrs.values()):
        return None
    real = object.__new__(cls)
    for name, a in attrs.items():
        object.__setattr__(real, name, a.as_constant())
    return ValueKey(value, real) if value_key_fields(real) is not None else None


def set_items(s: SetValue) -> list[Value]:
    """The elements of a set, in iteration order (NOTE [Sets of tensors] for sets holding tensors)."""
    if len(s.items) > 1 and any(isinstance(k, IdentityKey) for k in s.items):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "iteration over a set of tensors (its order follows addresses)")
    if any(is_function_element(k) for k in s.items):  # NOTE [Sets of functions from outside]
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "iteration over a set of functions")
    if s.frozen is not None:  # NOTE [Set order]
        return [key_value(k) for k in s.frozen]
    if len(s.items) > 1 and not s.exact:
        if s.order is None:
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"iteration over {s.describe()}, whose order (CPython's "
                                                           "hash-table layout) the trace cannot reproduce")
        return [key_value(k) for k in s.order]
    return [key_value(k) for k in s.items]


def known_layout(s: SetValue) -> bool:
    """Whether the trace holds a real set laid out as the program's (NOTE [Set order])."""
    if s.frozen is not None or len(s.items) < 2:
        return True
    return s.exact and not any(isinstance(k, IdentityKey) for k in s.items)  # NOTE [Sets of tensors]: by address


def identity_set_elements(s: SetValue) -> list[Value]:
    """The elements a set made in the frame holding tensors or objects hashed by identity is rebuilt from
    (NOTE [Sets of tensors]): one of two or more elements cannot be rebuilt in eager's layout."""
    from .set_tables import fresh_small
    if len(s.items) > 1 or not fresh_small(s):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{s.describe()} made in the frame outlives it (its layout "
                                                       "follows addresses: NOTE [Sets of tensors])")
    return [key_value(k) for k in s.items]


def set_operand(tx, v: Value, *, strict: bool = True) -> Any:
    """What a set method or operator gets from `v` as CPython sees it, so that the real operation on it
    gives the program's layout (NOTE [Set order]): a set's real object, a dict's keys as a real dict, the
    elements of any other iterable as a list, in order. Not `strict`: a set whose layout is unknown gives
    its elements (for a mutation that only needs them; the caller then forgets its target's layout)."""
    if isinstance(v, SetValue):
        if not known_layout(v) and not strict:
            return v.items
        if not known_layout(v):
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a set operation on {v.describe()}, whose hash-table "
                                                           "layout the trace cannot reproduce")
        return v.frozen if v.frozen is not None else v.items
    if isinstance(v, ConstantValue) and type(v.value) in (set, frozenset):
        return v.value
    elements = [set_element(tx, e) for e in _iterate(tx, v)]
    from .values import DictValue
    return dict.fromkeys(elements) if isinstance(v, DictValue) else elements


def _iterate(tx, v: Value) -> list[Value]:
    from .protocol import iterate
    return iterate(tx, v)


def _guard_distinct_inputs(tx, value: TensorValue) -> None:
    out = tx.output
    mine = _input_of(out, value)
    if mine is None:
        return
    keyed = out.__dict__.setdefault("identity_keyed_inputs", [])
    if any(entry is mine for entry in keyed):
        return
    for other in keyed:
        if other.value.fake is not mine.value.fake:
            a, b = mine.source.expr(out.names), other.source.expr(out.names)
            out.add_guard("OBJECT_ALIASING", f"{a} is not {b}", mine.source,
                          expected=f"{mine.source.describe()} and {other.source.describe()} are different tensors",
                          actual=f"{a} is {b}")
    keyed.append(mine)


def _input_of(out, value: TensorValue):
    return next((i for i in out.inputs if isinstance(i.value, TensorValue) and i.value.fake is value.fake), None)


__all__ = ["dict_key", "set_element", "set_items"]
