"""Classes with their own `__getattribute__` (transformers' PretrainedConfig maps attribute aliases).

NOTE [Custom __getattribute__]: `obj.name` on an instance whose class defines `__getattribute__` in
Python is exactly `type(obj).__getattribute__(obj, "name")`: that function is inlined (the class entry
holding it is guarded by identity, and a class without one is guarded to stay without one). Inside it,
`super().__getattribute__(key)` or `object.__getattribute__(self, key)` is the default lookup, which
attributes.object_attr performs without looking for the custom hook again. A class that also defines
`__getattr__` (the fallback after an AttributeError) is not modelled: a graph break.

NOTE [Custom __setattr__]: `obj.name = v` on an object from outside whose class defines `__setattr__`
in Python (PretrainedConfig maps aliases: `config.problem_type = "regression"` in every
...ForSequenceClassification head with labels) is `type(obj).__setattr__(obj, "name", v)`: that function
is inlined, its class entry guarded by identity (a class without one keeps the plain store's guards).
Inside it, `super().__setattr__(key, v)` or `object.__setattr__(self, key, v)` is the default store: it is
recorded as a side effect replayed as `object.__setattr__(obj, key, v)` after the graph (not `obj.key = v`,
which would run the custom hook a second time), guarded like a plain store (the class attribute `key`
stays absent or the same object; a data descriptor there breaks). Reads later in the trace see the stored
value. Modules keep nn.Module.__setattr__'s own path.
"""
from __future__ import annotations

import _thread
import types
from typing import Any

import torch

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, DictValue, NewObjectValue, ObjectValue, UserFunctionValue, Value


# NOTE [Thread-local objects]: `threading.local()` (and subclasses) keep one `__dict__` per thread, behind
# a native `__getattribute__`: `object.__getattribute__(tl, "__dict__")` raises (or, for a subclass,
# answers the dict of whichever thread touched it last), so the default lookup found no instance
# attribute, and `getattr(tl, "s", 1)` was traced as the default, guarded only by the type (compiled
# returned 1 where eager returned tl.s, in every thread). Attribute reads of a thread-local are graph
# breaks: they run in Python, in the calling thread.

_THREAD_LOCAL_GETATTRIBUTE = _thread._local.__dict__["__getattribute__"]


# NOTE [Patched library __getattribute__]: only a C slot is the default lookup: object's (or a thread-local's,
# a module's) `__getattribute__` found on a class the object derives from, guarded to stay so. Any Python
# `__getattribute__` runs: a user function assigned to a library class (`torch.utils.data.Dataset.__getattribute__
# = ga`: taken for the default, `isinstance(ds, Other)` was answered from the type where eager asks `ga` for
# `__class__`), a `functools.wraps(<torch function>)` wrapper, a functools.partialmethod or any callable
# descriptor (review revI H1: eager 7.0 from the patch, framejit 4.0), and a library class's own function too
# (review revK H1: torch._export.serde.union._Union's raises AttributeError for an unset field: taken for the
# default, `a.as_float` answered None and `hasattr(a, "as_float")` True, eager raises and answers False). A
# function is inlined (a library one like any library method), any other object is a graph break. The owner's
# entry is pinned when the owner is a mutable library class (NOTE [Library class attributes]); classes
# before it stay without one.
def library_getattribute(cls: type, index: int, impl: Any) -> bool:
    """`impl`, the `__getattribute__` found on `cls.__mro__[index]`, is the default lookup (a C slot)."""
    if not lookup.is_fixed_class(cls.__mro__[index]) or not isinstance(impl, types.WrapperDescriptorType):
        return False
    return isinstance(impl.__objclass__, type) and issubclass(cls, impl.__objclass__)


def custom_getattribute(tx, cls: type) -> types.FunctionType | None:
    """The Python `__getattribute__` of `cls` to inline, or None for the default lookup (guarded)."""
    index, impl = lookup.mro_lookup(cls, "__getattribute__")
    mro = cls.__mro__
    if library_getattribute(cls, index, impl):  # NOTE [Patched library __getattribute__]
        if impl is _THREAD_LOCAL_GETATTRIBUTE:  # NOTE [Thread-local objects]
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE,
                              f"attribute of a {cls.__name__} (a threading.local: its __dict__ is per thread)")
        lookup.guard_found_on_class(tx.output, cls, "__getattribute__", index)  # NOTE [MRO guarded] in lookup.py
        return None
    if not isinstance(impl, types.FunctionType):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.__getattribute__ is not a function")
    getattr_index, _ = lookup.mro_lookup(cls, "__getattr__")
    if getattr_index is not None and not lookup.is_fixed_class(mro[getattr_index]):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__} defines __getattribute__ and __getattr__")
    entry = lookup.guard_found_on_class(tx.output, cls, "__getattribute__", index)
    lookup.guard_entry_identity(tx.output, entry, impl)
    if getattr_index is None:
        lookup.guard_class_absent(tx.output, mro, "__getattr__")
    else:  # NOTE [Library __getattr__ after a custom __getattribute__]
        lookup.guard_found_on_class(tx.output, cls, "__getattr__", getattr_index)
    return impl


# NOTE [Metaclass __getattribute__ guarded]: `K.name` on a class is `type(K).__getattribute__(K, "name")`. A
# class whose metaclass has a Python one is wrapped as a plain object and that function inlined (builder.
# _lookup_runs_user_code); every other class attribute read is traced as `type.__getattribute__`, so the
# metaclass's lookup of `__getattribute__` is guarded to stay so where a class attribute is read (review revK
# H3: `abc.ABCMeta.__getattribute__ = ga` or `Meta.__getattribute__ = ga` after the first call kept 5 where
# eager gives 8). One line per mutable metaclass (ABCMeta, a user one); none for `type`. A class reached while
# its metaclass already has a Python one (`type(o).k`) is a graph break.
def guard_metaclass_getattribute(tx, meta: type) -> None:
    """Class attribute reads on a class of metaclass `meta` stay `type.__getattribute__`'s."""
    if lookup.is_immutable_class(meta):
        return
    if lookup.has_custom_getattribute(meta):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"class attribute read through the metaclass "
                                                           f"{meta.__name__}'s own __getattribute__")
    lookup.guard_lookup(tx.output, meta, "__getattribute__")


# NOTE [Python attributes of tensors past a patched __getattribute__]: a tensor's own Python attribute (`x.k`,
# from its `__dict__`) was read raw while tracing and guarded as `x.k`, which runs a `torch.Tensor.__getattribute__
# = ga` patch (review revK M1: the patch ran 11 times on the retrace call and once more per call in a guard, and
# the trace used the raw value where eager uses the patch's answer). Where the tensor's class has a Python
# `__getattribute__`, such a read is a graph break (it runs in Python, once); otherwise its lookup is guarded to
# stay the default (one line, `'__getattribute__' not in Tensor.__dict__`, before the value guards).
def guard_tensor_getattribute(tx, cls: type) -> None:
    if lookup.has_custom_getattribute(cls):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Python attribute of a {cls.__name__} read through "
                                                           "a Python __getattribute__")
    lookup.guard_lookup(tx.output, cls, "__getattribute__")


def custom_setattr(tx, obj: Value) -> types.FunctionType | None:
    """The Python `__setattr__` to inline for a store into `obj`, an object from outside that is not a
    module (NOTE [Custom __setattr__]); None where the plain store's own checks decide."""
    if not isinstance(obj, ObjectValue) or obj.source is None or isinstance(obj.obj, (type, torch.nn.Module)):
        return None
    cls = type(obj.obj)
    index, impl = lookup.mro_lookup(cls, "__setattr__")
    if index is None or lookup.is_fixed_class(cls.__mro__[index]) or not isinstance(impl, types.FunctionType):
        return None
    entry = lookup.guard_found_on_class(tx.output, cls, "__setattr__", index)
    lookup.guard_entry_identity(tx.output, entry, impl)
    return impl


def object_setattr(tx, obj: Value, name: str, value: Value) -> bool:
    """`object.__setattr__(obj, name, value)` for an object from outside whose class has its own
    `__setattr__`: a raw store (NOTE [Custom __setattr__]). False where the plain store path applies."""
    if isinstance(obj, ObjectValue) and isinstance(obj.obj, torch.nn.Module):
        _check_raw_module_store(obj.obj, name, value)
        return False
    if not isinstance(obj, ObjectValue) or obj.source is None or isinstance(obj.obj, type):
        return False
    cls = type(obj.obj)
    if getattr(cls, "__setattr__", object.__setattr__) is object.__setattr__:
        return False
    # the class attribute `name` stays absent or the same object (a data descriptor added would take it)
    lookup.guard_plain_store(tx.output, cls, name)
    tx.output.side_effects.store_attr(obj, name, value, raw=True)
    return True


# NOTE [Raw stores into modules]: `object.__setattr__(m, name, v)` on an nn.Module puts `v` in `m.__dict__`
# whatever it is; the plain store it is recorded as is replayed as `m.name = v`, Module.__setattr__, which
# files a Parameter, a module, or any value under the name of a parameter, buffer or submodule in those
# dicts instead (red team 16: `object.__setattr__(self, 'b', t)` for a buffer `b` left `self.__dict__`
# without 'b' and replaced the buffer). Only a store that Module.__setattr__ also makes into `__dict__` is
# recorded; any other breaks and runs in Python.
def _check_raw_module_store(module: torch.nn.Module, name: str, value: Value) -> None:
    filed = any(name in (module.__dict__.get(slot) or {}) for slot in ("_parameters", "_buffers", "_modules"))
    if filed or issubclass(value.python_type(), (torch.nn.Parameter, torch.nn.Module)):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"object.__setattr__ of {name!r} on a module, past "
                                                 "Module.__setattr__")


def instance_dict(obj: NewObjectValue) -> Value:
    """`obj.__dict__` of an object made while tracing: a dict value sharing its attributes, so writes
    through it are attribute writes (NOTE [Dict-subclass objects made while tracing] keeps items apart)."""
    from .dict_objects import STORAGE
    from .list_objects import STORAGE as LIST_STORAGE
    if STORAGE in obj.attrs or LIST_STORAGE in obj.attrs or _overrides_dict(obj.cls) or _has_slots(obj.cls):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"__dict__ of a {obj.cls.__name__} made while tracing")
    view = DictValue({})
    view.items = obj.attrs
    return view


def _has_slots(cls: type) -> bool:
    """`__slots__` entries live in `attrs` beside the instance dict's items, and a class without `__dict__`
    has none: its `o.__dict__` raises, `vars(o)` raises TypeError. Such a dict was answered with the slots'
    values (red team 15); it is left to Python."""
    return getattr(cls, "__dictoffset__", 1) == 0 or any(
        isinstance(v, types.MemberDescriptorType) for k in cls.__mro__ if "__slots__" in vars(k) for v in vars(k).values())


def _overrides_dict(cls: type) -> bool:
    return any("__dict__" in k.__dict__ and not isinstance(k.__dict__["__dict__"], types.GetSetDescriptorType)
               for k in cls.__mro__)


def _delattr(tx, args: list[Value], kwargs: dict) -> Value:
    """`delattr(obj, name)` for an object made while tracing whose class keeps object.__delattr__."""
    if not kwargs and len(args) == 2 and isinstance(args[0], ObjectValue) and args[1].is_constant():
        from .attribute_deletes import delete_outside_attr  # NOTE [Attribute deletes on objects from outside]
        return delete_outside_attr(tx, args[0], args[1].as_constant())
    if kwargs or len(args) != 2 or not isinstance(args[0], NewObjectValue) or not args[1].is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "delattr of an object from outside")
    obj, name = args[0], args[1].as_constant()
    if getattr(obj.cls, "__delattr__", object.__delattr__) is not object.__delattr__ or name == STORAGE_NAME():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"delattr on a {obj.cls.__name__}")
    _, attr = lookup.mro_lookup(obj.cls, name)
    slot = isinstance(attr, types.MemberDescriptorType)
    if not slot and attr is not None and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"delattr through the descriptor {name!r} of a {obj.cls.__name__}")
    if name not in obj.attrs:  # CPython's messages: a slot's descriptor, the generic delattr (3.11, 3.12)
        raise UserException(AttributeError(name if slot else f"'{obj.cls.__name__}' object has no attribute '{name}'"))
    del obj.attrs[name]
    return ConstantValue(None)


def STORAGE_NAME() -> str:
    from .dict_objects import STORAGE
    return STORAGE


# NOTE [Library __getattr__ after a custom __getattribute__]: a user subclass of a library class that defines
# `__getattr__` (nn.Module's, which serves parameters, buffers and submodules) with its own Python
# `__getattribute__`: guarding `__getattr__` absent from the whole MRO failed on every call (a new trace per
# call, review revA A4). The library entry is pinned instead (found on its owner, absent before it), and where
# the inlined `__getattribute__` raises AttributeError, CPython calls that `__getattr__` (slot_tp_getattr_hook):
# it is inlined too (a `__getattr__` that is no function is a graph break). That is how a parameter is read
# through a user `__getattribute__` on a module: `object.__getattribute__(m, "w")` raises (NOTE
# [object.__getattribute__ calls no __getattr__]) and Module.__getattr__ answers from `_parameters`.
def inline_getattribute(tx, impl: types.FunctionType, obj: Value, name: str) -> Value:
    try:
        return tx.inline(UserFunctionValue(impl), [obj, ConstantValue(name)], {})
    except UserException as e:
        cls = obj.python_type()
        _, getattr_impl = lookup.mro_lookup(cls, "__getattr__")
        if not isinstance(e.exc, AttributeError) or getattr_impl is None:
            raise
        if not isinstance(getattr_impl, types.FunctionType):
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.__getattribute__ raised "
                                                               "AttributeError: __getattr__ answers") from None
    return tx.inline(UserFunctionValue(getattr_impl), [obj, ConstantValue(name)], {})


# NOTE [object.__getattribute__ calls no __getattr__]: `object.__getattribute__(o, name)` looks at the
# type's MRO and the instance dict only; a name found in neither raises AttributeError, whatever `__getattr__`
# the class has. nn.Module keeps parameters, buffers and submodules in `_parameters`, `_buffers`, `_modules`,
# served by Module.__getattr__: the default lookup answered them (review revK H2: `object.__getattribute__(lin,
# "bias")` gave the parameter where eager raises; a user `__getattribute__` on nn.Linear adding 10 to
# `object.__getattribute__(self, "bias")` gave 12 where eager, whose read raised and fell back to
# Module.__getattr__, gives 2). Where the inlined `__getattribute__` raises, `__getattr__` is inlined after it
# (NOTE [Library __getattr__ after a custom __getattribute__]).
def _object_getattribute(tx, args: list[Value], kwargs: dict) -> Value:
    from .attributes import getattr_value, object_attr

    if kwargs or len(args) != 2 or not args[1].is_constant() or not isinstance(args[1].as_constant(), str):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "object.__getattribute__ with these arguments")
    obj, name = args[0], args[1].as_constant()
    if name == "__dict__" and isinstance(obj, NewObjectValue):
        return instance_dict(obj)
    if isinstance(obj, NewObjectValue) or isinstance(obj, ObjectValue) and not issubclass(type(obj.obj), type):
        return object_attr(tx, obj, name, default_lookup=True)
    return getattr_value(tx, obj, name)


HANDLERS: dict[Any, Any] = {object.__getattribute__: _object_getattribute, delattr: _delattr}


# NOTE [__getattr__ after a getter's AttributeError]: CPython's slot_tp_getattr_hook calls `type(o).__getattr__`
# after *any* AttributeError of the default `__getattribute__`, a property getter's or a descriptor's `__get__`'s
# included (`@property def val(self): try: return self._d["val"] except KeyError: raise AttributeError`). The
# trace let the getter's AttributeError leave the lookup, so hasattr / getattr with a default answered False /
# the default where eager's `__getattr__` answered (review revW HIGH-2: True vs False, 'fallback-val' vs 'dflt').
# Now that `__getattr__` is inlined after it (its entry guarded by identity, or its absence guarded); one that is
# no function is a graph break. nn.Module's own `__getattr__` is left out (it raises AttributeError for any name
# a property has: registering a parameter or submodule of that name fails), and so is object.__getattribute__
# itself (NOTE [object.__getattribute__ calls no __getattr__]). Left out, the getter's own AttributeError left the
# lookup (`'M' object has no attribute 'missing'` where eager's says 'scale', the property's name: hhuntG8 MED-1):
# nn.Module's `__getattr__` is now followed too, as its slots are read (attributes._module_slot).
def getattr_after_error(tx, obj: Value, name: str, cls: type, default_lookup: bool, read) -> Value:
    """`read()`, a class-level attribute's value; an AttributeError it raises goes on to `cls.__getattr__`."""
    if default_lookup:
        return read()
    try:
        return read()
    except UserException as e:
        if not isinstance(e.exc, AttributeError):
            raise
        index, impl = lookup.mro_lookup(cls, "__getattr__")
        if index is None:
            lookup.guard_class_absent(tx.output, cls.__mro__, "__getattr__")
            raise
        if issubclass(cls, torch.nn.Module) and lookup.is_module_default(impl, "__getattr__"):
            lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, "__getattr__", index),
                                        impl)
            from .values import NNModuleValue
            if not isinstance(obj, (NNModuleValue, ObjectValue)):
                raise
            from .attributes import _module_slot  # its own AttributeError names `name`, not the getter's
            return _module_slot(tx, obj, name)
        if not isinstance(impl, types.FunctionType):
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.{name} raised AttributeError: "
                                                               "__getattr__ answers") from None
        lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, "__getattr__", index), impl)
    return tx.call(UserFunctionValue(impl), [obj, ConstantValue(name)], {})
