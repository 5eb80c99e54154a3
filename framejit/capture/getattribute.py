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
import sys
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


# NOTE [Patched library __getattribute__]: a library class's own lookup is the default one (guarded to
# stay so), but a user function assigned to it (`torch.utils.data.Dataset.__getattribute__ = ga`) is user code:
# taken for the default, `isinstance(ds, Other)` answered from the type where eager asks `ga` for `__class__`
# (eager True and one read, framejit False and none, after the recompile the guard caused). The library's own
# entry is a C slot of a class the object derives from (object's, a thread-local's), or a function defined
# in the owner's class body in the owner's module: told by its code (file and qualified name), as
# functools.wraps copies `__module__` and `__qualname__` but not `__code__` (review revI H1: a
# `functools.wraps(<torch function>)` wrapper, a functools.partialmethod or any callable descriptor given to
# torch.utils.data.Sampler was taken for the default: eager 7.0 from the patch, framejit 4.0). Anything else
# is user code: a function is inlined, any other object is a graph break. The owner's entry is pinned when
# the owner is a mutable library class (NOTE [Library class attributes]); classes before it stay without one.
def library_getattribute(cls: type, index: int, impl: Any) -> bool:
    """`impl`, the `__getattribute__` found on `cls.__mro__[index]`, is a library class's own lookup."""
    owner = cls.__mro__[index]
    if not lookup.is_fixed_class(owner):
        return False
    if isinstance(impl, types.WrapperDescriptorType):
        return isinstance(impl.__objclass__, type) and issubclass(cls, impl.__objclass__)
    code = getattr(impl, "__code__", None) if isinstance(impl, types.FunctionType) else None
    module = sys.modules.get(getattr(owner, "__module__", None) or "")
    return code is not None and code.co_filename == getattr(module, "__file__", None) and \
        getattr(code, "co_qualname", code.co_name) == f"{owner.__qualname__}.__getattribute__"


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
# the inlined `__getattribute__` raises AttributeError, which CPython answers by calling that `__getattr__`
# (not modelled here), the read is a graph break.
def inline_getattribute(tx, impl: types.FunctionType, obj: Value, name: str) -> Value:
    try:
        return tx.inline(UserFunctionValue(impl), [obj, ConstantValue(name)], {})
    except UserException as e:
        cls = obj.python_type()
        if isinstance(e.exc, AttributeError) and lookup.mro_lookup(cls, "__getattr__")[0] is not None:
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.__getattribute__ raised "
                                                               "AttributeError: __getattr__ answers") from None
        raise


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
