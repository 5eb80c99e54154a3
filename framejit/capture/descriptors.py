"""Class attributes that are descriptors, read as CPython reads them.

Data descriptors (properties, slots, getsets, pybind11 fields, descriptors written in Python) come before
the instance dict; non-data class attributes (functions become bound methods, staticmethod/classmethod,
cached methods, non-data descriptors written in Python, library class data) after it. attributes.py
decides which applies (Python's lookup order); this module reads the attribute and guards the entry.
"""
from __future__ import annotations

import functools
import types
from typing import Any

import torch

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .sources import AttrSource, ObjectSource, Ref
from .values import (BoundMethodValue, BuiltinValue, ClassValue, NewObjectValue, NNModuleValue, ObjectValue,
                     UserFunctionValue, Value)
from .values.builder import wrap, wrap_unguarded

_LRU_WRAPPER = functools._lru_cache_wrapper


def is_data_descriptor(attr: Any) -> bool:
    return hasattr(type(attr), "__get__") and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__"))


def _pybind_field(obj: Value, attr: Any) -> bool:
    return (isinstance(obj, ObjectValue) and obj.source is not None and isinstance(attr, property)
            and type(type(obj.obj)).__name__ == "pybind11_type" and (type(attr.fget).__name__ == "instancemethod" or isinstance(attr.fget, types.BuiltinFunctionType)))


# NOTE [Property subclasses]: a `property` subclass may override `__get__`/`__set__` (the `classproperty`
# idiom, scaling or logging properties); CPython then calls the override, not fget/fset. Every read and store
# through a property called fget/fset directly (`o.w` gave fget's 1 where eager's `__get__` doubles it to 2).
# Only a property whose method is property's own is modelled through fget/fset (for a subclass, that lookup
# is guarded); the others are Python data descriptors (NOTE [Data descriptors written in Python]).
def plain_property_fn(tx, attr: Any, method: str) -> types.FunctionType | None:
    """The Python fget (`method` "__get__") or fset ("__set__") CPython calls for the property `attr`, or None
    when attr is no property with that function, or its class overrides `method`."""
    if not isinstance(attr, property):
        return None
    fn = vars(property)["fget" if method == "__get__" else "fset"].__get__(attr)
    if not isinstance(fn, types.FunctionType):
        return None
    if type(attr) is not property:
        if lookup.mro_lookup(type(attr), method)[1] is not vars(property)[method]:
            return None
        lookup.guard_lookup(tx.output, type(attr), method)
    return fn


def method_kind(tx, attr: Any, refuse: bool = False) -> type | None:
    """staticmethod or classmethod when `attr` is one whose `__get__` is that type's own (for a subclass, that
    lookup guarded; NOTE [Property subclasses]), else None; `refuse`: a subclass overriding it is a break."""
    for kind in (staticmethod, classmethod):
        if type(attr) is kind:
            return kind
        if isinstance(attr, kind):
            if lookup.mro_lookup(type(attr), "__get__")[1] is not vars(kind)["__get__"]:
                if refuse:
                    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"a {type(attr).__name__} read from its class")
                return None
            lookup.guard_lookup(tx.output, type(attr), "__get__")
            return kind
    return None


def descriptor_attr(tx, obj: Value, name: str, attr: Any) -> Value:
    if getattr(type(attr), "framejit_compiled_forward", False):
        return _compiled_forward(tx, obj, attr)
    fget = plain_property_fn(tx, attr, "__get__")
    if fget is not None:
        return getter_call(tx, UserFunctionValue(fget), [obj])
    if isinstance(attr, (types.MemberDescriptorType, types.GetSetDescriptorType)) and isinstance(obj, ObjectValue):
        try:
            value = attr.__get__(obj.obj, type(obj.obj))
        except AttributeError as e:
            return _unset_member(tx, obj, name, attr, e)
        if obj.source is None:
            return wrap_unguarded(value)
        return wrap(tx.output, value, lookup.attr_source(obj.source, obj.obj, name))
    if _pybind_field(obj, attr):
        # NOTE [pybind11 fields]: a property of a pybind11 class whose getter is C++ (def_readonly /
        # def_readwrite and the like) runs no Python code: read now and guarded by reading it again
        value = getattr(obj.obj, name)
        if type(value) in (bool, int, float, str, type(None)) or isinstance(value, torch.Tensor):
            return wrap(tx.output, value, AttrSource(obj.source, name))
    if isinstance(attr, types.MemberDescriptorType) and isinstance(obj, NewObjectValue):
        if name in obj.attrs:  # a __slots__ entry of an object made while tracing: stored in `attrs`
            return obj.attrs[name]
        raise UserException(AttributeError(f"'{obj.cls.__name__}' object has no attribute '{name}'"))
    got = python_data_descriptor(tx, obj, attr, "__get__", [ClassValue(obj.python_type())])
    if got is not None:
        return got
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"descriptor {type(attr).__name__} for {name!r}")


def _compiled_forward(tx, obj: Value, attr: Any) -> Value:
    """`compiled_module.forward` read in traced code: the compiled class's data descriptor (NOTE [The forward of a
    compiled module] in api.py) stands for a function class attribute, which the instance dict shadows; either is
    inlined when called, as the hook it reaches would trace it."""
    from .values.builder import instance_dict
    real = getattr(obj, "obj", None)
    if real is None or any(tx.output.side_effects.attr(o, "forward") is not None for o in (real, type(real)._orig_mod)):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "the forward of a compiled module stored while tracing")
    own = instance_dict(real) or {}
    if "forward" not in own:
        lookup.guard_not_in_instance(tx.output, obj.source, real, "forward")
        return BoundMethodValue(UserFunctionValue(attr.function), obj)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "the instance forward of a compiled module, read through "
                      "it: the call runs as Python (through its own hook)")  # revAP H2: `is`/`==` as eager's read


# NOTE [Unset slots]: a `__slots__` entry never assigned (or deleted) raises AttributeError when read, and
# `hasattr(o, "extra")` on it is False: a common optional field (`__slots__ = ("base", "extra")`). The read
# raised inside framejit (an internal error: the whole frame ran eagerly). Now it is the user's
# AttributeError, with the slot guarded unset (`slot_unset(o, name)`: a later assignment recompiles) and, as
# a missing slot then goes to the class's `__getattr__`, that guarded absent; a class with a `__getattr__`,
# a getset descriptor that raises (C code's own reasons) and an object without a source are graph breaks.
def slot_unset(obj: Any, name: str) -> bool:
    """The member descriptor `name` of `type(obj)` holds no value for `obj` (reading it raises)."""
    try:
        lookup.mro_lookup(type(obj), name)[1].__get__(obj, type(obj))
    except AttributeError:
        return True
    return False


def _unset_member(tx, obj: ObjectValue, name: str, attr: Any, error: AttributeError) -> Value:
    cls = type(obj.obj)
    if not isinstance(attr, types.MemberDescriptorType) or obj.source is None or \
            lookup.mro_lookup(cls, "__getattr__")[0] is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"reading the unset attribute {name!r} of a {cls.__name__}")
    lookup.guard_class_absent(tx.output, cls.__mro__, "__getattr__")
    e = obj.source.expr(tx.output.names)
    tx.output.add_guard("SLOT_UNSET", f"{tx.output.name_of(slot_unset, 'slot_unset')}({e}, {name!r})", obj.source,
                        expected=f"slot {name!r} unset", actual=f"{e}.{name}")
    raise UserException(AttributeError(*error.args))


# NOTE [Data descriptors written in Python]: a class attribute whose type defines `__get__`/`__set__` in Python
# (a validating field: `scale = Positive()`, with `__set_name__`; attrs/pydantic-like fields) takes every read
# and store of that name on an instance, before the instance dict. Such a read or store was a break
# ("descriptor Positive for 'scale'", "a store through the descriptor Positive"). Now the method is inlined as
# CPython calls it, `type(attr).__get__(attr, obj, cls)` / `__set__(attr, obj, value)`, for objects from
# outside and made while tracing; the class entry is guarded by the caller, the method's lookup here, and the
# descriptor's own state is read through its source like any object's.
def python_data_descriptor(tx, obj: Value, attr: Any, method: str, args: list[Value]) -> Value | None:
    """The inlined `type(attr).<method>(attr, obj, *args)`, or None when that method is not Python code."""
    fn = lookup.mro_lookup(type(attr), method)[1]
    if not isinstance(fn, types.FunctionType) or not isinstance(obj, (ObjectValue, NewObjectValue)) or \
            isinstance(obj, NNModuleValue):
        return None
    lookup.guard_lookup(tx.output, type(attr), method)
    _guard_descriptor_kind(tx, attr)
    descriptor = wrap(tx.output, attr, ObjectSource(Ref(attr, type(attr).__name__)))
    return getter_call(tx, UserFunctionValue(fn), [descriptor, obj, *args])


def getter_call(tx, fn: Value, args: list[Value]) -> Value:
    """`fn(*args)`, a getter (a property's, a descriptor's `__get__`) called by an attribute lookup: an
    AttributeError of its own is marked (NOTE [Members of caught exceptions] in caught_exceptions.py)."""
    try:
        return tx.call(fn, args, {})
    except UserException as e:
        if isinstance(e.exc, AttributeError) and e.exc.name is None and e.exc.obj is None:
            e.getter_raised = True
        raise


# NOTE [A descriptor's kind is guarded]: whether a class attribute is a data descriptor (its type has `__set__`
# or `__delete__`) decides whether it wins over the instance dict. Only the method called was guarded, so
# after `del Field.__set__` and `a.__dict__["v"] = 9` the entry kept calling Field.__get__ (3 where eager reads
# 9; red team h12red3). The descriptor type's `__set__` and `__delete__` lookups are guarded too. Likewise a
# class attribute that is an object of a user class with no `__get__` (a `__set__`-only descriptor, a plain
# config object) is read as itself: its type's `__get__` is guarded absent, so one added later is called
# (hhuntG5 MED-1: eager 3 from the new `__get__`, framejit kept returning the object).
def _guard_descriptor_kind(tx, attr: Any) -> None:
    for method in ("__set__", "__delete__"):
        lookup.guard_lookup(tx.output, type(attr), method)


# NOTE [Non-data descriptors written in Python]: a class attribute whose type defines `__get__` in Python
# and no `__set__`/`__delete__` (torch.distributions.utils.lazy_property: compute, setattr on the instance,
# return) is read as CPython reads it: `type(attr).__get__(attr, obj, cls)`, inlined. The entry and the
# descriptor type's `__get__` are guarded by identity. It was a graph break ("descriptor lazy_property for
# 'probs'") inside Categorical.entropy and friends.
def _python_descriptor_get(tx, obj: Value, cls: type, name: str, attr: Any, entry) -> Value:
    get = lookup.mro_lookup(type(attr), "__get__")[1]
    if not isinstance(get, types.FunctionType) or is_data_descriptor(attr) \
            or not isinstance(obj, (ObjectValue, NewObjectValue)):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"descriptor {type(attr).__name__} for {name!r}")
    if entry is not None:  # None: a library class, fixed (NOTE [Lookup facts])
        lookup.guard_entry_identity(tx.output, entry, attr)
        lookup.guard_lookup(tx.output, type(attr), "__get__")
        _guard_descriptor_kind(tx, attr)  # NOTE [A descriptor's kind is guarded]
    descriptor = wrap(tx.output, attr, entry if entry is not None else ObjectSource(Ref(attr, type(attr).__name__)))
    if type(attr) is functools.cached_property and attr.attrname == name:  # not in the instance dict: its
        from .library_substitutes import cached_property_first_read  # NOTE [cached_property's first read]
        get = cached_property_first_read
    return getter_call(tx, UserFunctionValue(get), [descriptor, obj, ClassValue(cls)])


def class_level_attr(tx, obj: Value, cls: type, name: str, attr: Any, entry=None) -> Value:
    """A non-data class attribute; `entry` is the source of the owner's raw dict entry (None for fixed
    classes), guarded here by identity, or by value for plain data (NOTE [Lookup facts])."""
    kind = method_kind(tx, attr)  # a subclass overriding __get__: a Python descriptor (below)
    if kind is not None or isinstance(attr, (types.FunctionType, types.BuiltinFunctionType,
                                             types.MethodDescriptorType, types.WrapperDescriptorType)):
        lookup.guard_entry_identity(tx.output, entry, attr)
    if isinstance(attr, types.FunctionType):
        return BoundMethodValue(UserFunctionValue(attr), obj)
    if kind is staticmethod:
        return wrap_unguarded(attr.__func__)
    if kind is classmethod:
        return BoundMethodValue(wrap_unguarded(attr.__func__), ClassValue(cls))
    if isinstance(attr, types.BuiltinFunctionType):  # `abs`, `torch.relu`, `print` have no __get__, so
        return wrap_unguarded(attr)  # CPython never binds them: `obj.m` is the function itself
    if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return BoundMethodValue(BuiltinValue(attr), obj)
    if type(attr) is _LRU_WRAPPER and entry is not None:  # a cached method, e.g. transformers'
        lookup.guard_entry_identity(tx.output, entry, attr)  # `Logger.warning_once` (NOTE [Cached functions])
        return BoundMethodValue(wrap(tx.output, attr, entry), obj)
    if type(attr) is property and isinstance(attr.fget, types.FunctionType):  # `@property` on a NamedTuple
        lookup.guard_entry_identity(tx.output, entry, attr)  # subclass (its instances have no __dict__)
        return tx.call(UserFunctionValue(attr.fget), [obj], {})
    if hasattr(type(attr), "__get__") and not isinstance(attr, (type, int, float, str, bool, tuple)):
        return _python_descriptor_get(tx, obj, cls, name, attr, entry)
    if entry is not None:
        return class_data(tx, attr, entry)
    index, _ = lookup.mro_lookup(cls, name)
    if index is not None and (type(attr) in (dict, list) or _plain_object(attr)):
        # NOTE [Library class data]: a library class's dict or plain object (torch.distributions'
        # `Normal.arg_constraints`, `support = constraints.real`): its entry is pinned by identity
        # (NOTE [Library class attributes]); its contents are read through that entry like any
        # object from outside, so a later change to them is guarded too
        owner = cls.__mro__[index]
        if not lookup.is_immutable_class(owner):
            return wrap(tx.output, attr, lookup.entry_source(owner, name))
    return wrap_unguarded(attr)


def class_data(tx, attr: Any, entry) -> Value:
    """A class attribute that is no descriptor, read through its entry; an object of a user class stays no
    descriptor (its type's `__get__` guarded absent: NOTE [A descriptor's kind is guarded])."""
    if not lookup.is_fixed_class(type(attr)):
        lookup.guard_lookup(tx.output, type(attr), "__get__")
    return wrap(tx.output, attr, entry)


def _plain_object(attr: Any) -> bool:
    """An instance of a plain Python class (not a type, function, module, tensor or callable)."""
    return (type(attr).__module__ not in ("builtins",) and not callable(attr) and hasattr(attr, "__dict__")
            and not isinstance(attr, (type, types.ModuleType, torch.Tensor, torch.nn.Module)))
