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
- found in the instance `__dict__`: `name` still resolves on the classes as it did (absent, or the same
  non-data entry: `guard_lookup`), checked before the value guard of the read itself (`o.name`), so a data
  descriptor added later fails a class-dict guard instead of being run by the value guard (NOTE [Guards
  run no user code] in guards/codegen.py);
- absent (a failed `hasattr`, a `getattr` default): absent from the instance dict and from every class
  of the MRO, and no class defines `__getattr__`;
- the same for classes (`K.name`: the MRO of K, then its metaclass) and for `super()` (the MRO after
  the current class);
- a store `o.name = v` recorded as a plain write: no class gains `__setattr__` or a descriptor `name`.
The type itself is pinned by the object's TYPE_MATCH guard, so the MRO is known. Classes whose dict
cannot change (built-in static types such as `object`, `tuple`, torch._C.TensorBase) get no class-dict
guards; classes of library modules (torch, ...: NOTE [Library modules] in values/builder.py) get the same
ones as user classes, the owner's entry pinned by identity (NOTE [Library class attributes]). `o.__dict__`
and `K.__dict__` repeated by several guards are computed once (NOTE [Guard subexpressions]).
A module slot read also guards `name not in m.__dict__` (`object.__setattr__` can put a value there, past
`nn.Module.__setattr__`); a Tensor method read guards the method's lookup on the tensor's class and, for an
input tensor, that no Python attribute of the tensor shadows it (`x.size = f`).
nn.Module keeps parameters, buffers and children out of `__dict__` (NOTE [Module slots]) and its
`__setattr__` keeps the two disjoint, so slot reads guard the slot entry and the class-dict facts only;
a name found in no slot is guarded absent from all three slots and `__dict__` (MODULE_ATTR_ABSENT).
Python modules: an attribute found absent is guarded absent from the module's `__dict__`, with no module
`__getattr__`; attributes of library modules are pinned by identity (attributes.py, `F.gelu` patched).
"""
from __future__ import annotations

import collections
import types
from typing import Any

from ..guards import COST_ID
from .parametrized_classes import rely_on_identity
from .sources import AttrSource, CallSource, ItemSource, ObjectSource, Ref, Source
from .values.builder import LIBRARY_MODULE_PREFIXES

_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a built-in type whose dict cannot be changed


def is_fixed_class(cls: type) -> bool:
    """A class whose attributes are taken as fixed while tracing: immutable built-in types and library
    classes. Only the former cannot change: lookups on library classes are still guarded (NOTE [Library
    class attributes])."""
    if is_immutable_class(cls):
        return True
    module = getattr(cls, "__module__", "") or ""
    if module == "builtins":  # NOTE [Classes made by exec]
        return False
    return module.split(".")[0] in LIBRARY_MODULE_PREFIXES


# NOTE [Classes made by exec]: a class statement takes `__module__` from its globals' `__name__`, and a
# namespace without one (`exec(source, {})`, notebooks' and code generators' namespaces) gives "builtins".
# Every built-in type of that module is immutable (handled above), so a mutable class naming "builtins" is
# user code: taken for a library class, a `__getattribute__` later added to its base and a replaced
# `__class_getitem__` were not guarded (/tmp/hsound2/k.py: `o.k` kept 2 where eager gives 7, `type(o)[0]`
# kept 2 where eager gives 6).


def is_immutable_class(cls: type) -> bool:
    """A built-in type whose dict cannot be changed (`object`, `tuple`, torch._C.TensorBase): no guard."""
    return bool(cls.__flags__ & _IMMUTABLE_TYPE)


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


# NOTE [MRO guarded]: every lookup fact above walks `cls.__mro__`, and the TYPE_MATCH of an object pins
# `cls` but not its MRO: `C.__bases__ = (B,)` (on C or on any base of C) makes CPython compute a new MRO,
# so an inherited method or class attribute now comes from elsewhere, an absent one may appear, and
# isinstance/issubclass answer differently, while every class-dict guard still holds. So a class whose
# MRO a fact relied on guards its MRO tuple by identity (CPython makes a new tuple whenever it recomputes
# one): one line per class, `C.__mro__ is <the tuple>`, read through type's own descriptor when C has a
# user metaclass (which could define `__mro__`; NOTE [Guards run no user code]). Immutable built-in types
# and library classes (NOTE [Library class attributes]: their bases are not reassigned in practice) get
# none; a user subclass of a library class is guarded, and its tuple changes when any base's MRO does.
# The frame cache persists the tuple as the class's live MRO, checked class by class on load.
def guard_mro(out, cls: Any) -> None:
    """`cls.__mro__` stays the tuple the trace walked."""
    if not isinstance(cls, type) or is_fixed_class(cls):
        return
    name = out.name_of(cls, cls.__name__)
    read = f"{name}.__mro__" if type(cls) is type else f"___type.__dict__['__mro__'].__get__({name})"
    out.add_guard("MRO_MATCH", f"{read} is {out.name_of(cls.__mro__, 'mro')}", None,
                  expected=f"the MRO {[k.__qualname__ for k in cls.__mro__]}", actual=read, cost=COST_ID)


# NOTE [Library metaclass __getattr__]: `K.name` absent from K's MRO is looked up on the metaclass; the trace
# runs that lookup for real (attributes._class_attr), and a library metaclass's own `__getattr__` (EnumType's
# on 3.11, which raises AttributeError for dunders: `hasattr(type(member), "__dataclass_fields__")` in
# dataclasses.astuple/asdict of a config holding an Enum) is then part of what raised. Guarding it absent
# failed on every call: such a frame was traced again per call until the recompile limit ran it eagerly
# (8 graphs and an eager frame over 12 calls, stock torch.compile 2). Its entry is pinned as the library
# entry it is (NOTE [Library class attributes]); a user metaclass's `__getattr__` stays a break
# (NOTE [Metaclass code]).
def guard_class_absent(out, classes, name: str) -> None:
    """`name` is in none of these classes' own dicts (immutable built-in types skipped)."""
    for klass in classes:
        if is_immutable_class(klass):
            continue
        if name == "__getattr__" and name in klass.__dict__ and issubclass(klass, type) and is_fixed_class(klass):
            pin_library_entry(out, klass, name)  # NOTE [Library metaclass __getattr__]
            continue
        source = class_dict_source(klass)
        out.add_guard("CLASS_ATTR_ABSENT", f"{name!r} not in {source.expr(out.names)}", source,
                      expected=f"no attribute {name!r} on {klass.__qualname__}",
                      actual=f"{source.expr(out.names)}.get({name!r})", cost=COST_ID)


def guard_found_on_class(out, cls: type, name: str, index: int, start: int = 0) -> Source | None:
    """`name` is found on `cls.__mro__[index]` searching from `start`: absent before it. Returns the
    source of the owner's raw entry, or None when the owner is a fixed class (an immutable type: nothing
    to guard; a library class: its entry is pinned here, NOTE [Library class attributes])."""
    mro = cls.__mro__
    guard_mro(out, cls)
    guard_class_absent(out, mro[start:index], name)
    owner = mro[index]
    if is_immutable_class(owner):
        return None
    if is_fixed_class(owner):
        pin_library_entry(out, owner, name)
        return None
    return entry_source(owner, name)


# NOTE [Library class attributes]: the trace takes library classes (torch.nn.Linear, nn.Module, ...) as
# fixed: their methods are inlined, their class data read unguarded. A user may still monkeypatch one on
# the class (`nn.Linear.forward = f`, `nn.Module.__call__ = g`), so every library-class attribute the trace
# resolved is pinned: the owner's raw entry `Owner.__dict__[name]` is the same object (by value for
# scalars), and the library classes before the owner in the MRO do not define `name`. Each is one line
# per distinct (class, name), shared by all instances (guards are de-duplicated by expression); the
# class dicts are read raw, so no descriptor runs. Immutable built-in types get none.
def pin_library_entry(out, owner: type, name: str) -> None:
    """`owner.__dict__[name]` (a library class) stays what it is now."""
    value = owner.__dict__[name]
    source = entry_source(owner, name)
    if type(value) is not property:  # a method or data of the class is a value, not only code to run
        rely_on_identity(out, owner)  # NOTE [Parametrized classes alike]
    if type(value) in (bool, int, float, str, type(None)):
        out.guard_constant(source, value)
    elif _scalar_tuple(value):
        _guard_scalar_tuple(out, source, value)
    else:
        out.guard_id(source, value)


# NOTE [Library defaults patched]: the trace models some library functions natively instead of running
# them: nn.Module's `__getattr__` (parameters, buffers and submodules served from their dicts) and
# `__setattr__` (a plain store replayed after the graph). A user may patch one on the class itself
# (`nn.Module.__getattr__ = f`, to serve or log names): asking `impl is torch.nn.Module.__getattr__` then
# compares the patch with itself and the patch was never run (/tmp/hadv/p11.py: eager 5 * x, framejit
# x * w; a patched `__setattr__`'s log stayed empty). torch's own function is told by its code (where and
# under which name it was defined; a functools.wraps wrapper copies the name but not the code); a patch is
# then user code (inlined or a graph break), and the owner's entry is pinned by identity as any library
# entry (NOTE [Library class attributes]), so patching it later fails a guard.
def is_module_default(impl: Any, name: str) -> bool:
    """`impl` is torch's own `nn.Module.<name>` (not a replacement patched onto the class); torch defines
    `__call__` as `_wrapped_call_impl`."""
    import torch.nn.modules.module as module_py
    code = getattr(impl, "__code__", None)
    defined_as = "_wrapped_call_impl" if name == "__call__" else name
    return isinstance(impl, types.FunctionType) and code is not None and code.co_filename == module_py.__file__ \
        and getattr(code, "co_qualname", code.co_name) == f"Module.{defined_as}"


def module_call_default(cls: type) -> bool:
    """Calling an instance of `cls` runs torch's own `nn.Module.__call__` and `_call_impl` (neither patched on
    torch's class nor overridden); the caller pins both entries (calls._guard_call_path)."""
    return is_module_default(getattr(cls, "__call__", None), "__call__") and \
        is_module_default(getattr(cls, "_call_impl", None), "_call_impl")


def guard_lookup(out, cls: type, name: str) -> None:
    """Every class of the MRO keeps resolving `name` as it does now (absent, or the same entry)."""
    index, attr = mro_lookup(cls, name)
    if index is None:
        guard_mro(out, cls)
        guard_class_absent(out, cls.__mro__, name)
    else:
        guard_entry_identity(out, guard_found_on_class(out, cls, name, index), attr)


# NOTE [Scalar class entries by value]: a class constant that is a plain scalar (`aux_loss_coef = 0.01` in
# a dataclass, a flag) is pinned by value, as on library classes: the trace used its value, and a float
# or a long string is another object in every process, so an identity pin made each persisted entry that
# read one fail its guard in the next process (the zoo's moe traced again on a warm cache). NaN keeps the
# identity pin (it equals nothing). A tuple of such scalars (`block_types = ("recurrent", "attention")`, the
# class default a config instance shadows) is pinned by its type, each item's type and its value: it is no
# descriptor, and reading it gives that value; its identity was a new object in every process, so
# recurrent_gemma traced again on every warm start (tools/warm_gaps.py).
_TUPLEGETTER = type(collections.namedtuple("_Probe", "a").a)
_SCALARS = (bool, int, float, str, type(None))


def _scalar_tuple(attr: Any) -> bool:
    return type(attr) is tuple and all(type(v) in _SCALARS and v == v for v in attr)


def _guard_scalar_tuple(out, source: Source, attr: tuple) -> None:
    out.guard_constant(source, attr)  # its type, then `== (...)`, which holds for items of other types too:
    for index, item in enumerate(attr):  # (1,) == (True,) == (1.0,)
        out.guard_type(ItemSource(source, index), type(item))


def guard_entry_identity(out, source: Source | None, attr: Any) -> None:
    """The owner's raw entry is still the same object (a method, a descriptor), or the same scalar value."""
    if source is None:
        return
    if type(attr) in (bool, int, float, str, type(None)) and attr == attr:
        out.guard_constant(source, attr)
    elif _scalar_tuple(attr):
        _guard_scalar_tuple(out, source, attr)
    elif type(attr) is _TUPLEGETTER:
        # a namedtuple field's descriptor (`p.a`): any one with the same index reads the same item, and unlike
        # its identity (no importable name) this persists, so frames reading namedtuple fields start warm
        out.guard_type(source, _TUPLEGETTER)
        e = source.expr(out.names)
        index = attr.__reduce__()[1][0]
        out.add_guard("TUPLEGETTER", f"{e}.__reduce__()[1][0] == {index}", source,
                      expected=f"the descriptor of field {index}", actual=f"{e}.__reduce__()[1][0]")
    else:
        out.guard_id(source, attr)
        _guard_wrapped_functions(out, source, attr)


# NOTE [Functions a method object wraps]: staticmethod, classmethod and property objects are mutable through
# their own `__init__`: `sm.__init__(g)` makes the staticmethod already in the class dict call g (and
# `prop.__init__(getter)` the property read through another getter), while the entry's identity guard still
# passes. A trace that called the wrapped function relied on it, so its identity (None where unset) is
# guarded beside the entry's: `entry.__func__` for staticmethod/classmethod, `entry.fget`/`fset`/`fdel` for a
# property (hhuntG9: eager called the new function, framejit the old one on every later call).
def _guard_wrapped_functions(out, source: Source, attr: Any) -> None:
    if isinstance(attr, (staticmethod, classmethod)):
        parts = ("__func__",)
    elif isinstance(attr, property):
        parts = ("fget", "fset", "fdel")
    else:
        return
    for part in parts:
        inner = getattr(attr, part, None)
        if inner is None:
            out.guard_constant(AttrSource(source, part), None)
        else:
            out.guard_id(AttrSource(source, part), inner)


def guard_not_in_instance(out, obj_source: Source | None, real: Any, name: str) -> None:
    """The instance does not shadow a class attribute (or does not have it at all)."""
    if obj_source is None or not isinstance(_instance_dict(real), dict):
        return
    e = instance_dict_source(obj_source, real).expr(out.names)
    out.add_guard("INSTANCE_ATTR_ABSENT", f"{name!r} not in {e}", obj_source,
                  expected=f"no instance attribute {name!r}", actual=f"{e}.get({name!r})", cost=COST_ID)


# NOTE [Instance attributes past a __getattr__]: the value guard of `o.name` read from the instance dict reads
# `o.name`; where the class has a `__getattr__`, that read runs it once `name` left the dict (`del o.foo`): the
# user's code ran inside the guard of every entry at each miss, and again explaining it (hhuntG3 MED-1: 5 extra
# calls per miss, its side effects changed the result). So the entry is guarded present first
# (INSTANCE_ATTR_PRESENT, a lookup fact: cheapest, and no guard reading through `o` is explained past it).
def guard_instance_entry(out, obj_source: Source, real: Any, cls: type, name: str) -> None:
    """`o.name` read from the instance dict stays so: no class gains a data descriptor `name` (checked before the
    value guards read `o.name`, so a property added later is never run by a guard: NOTE [Guards run no user
    code] in guards/codegen.py), and `name` stays in the dict where the class has a `__getattr__`."""
    guard_lookup(out, cls, name)
    if mro_lookup(cls, "__getattr__")[0] is None or not isinstance(_instance_dict(real), dict):
        return
    e = instance_dict_source(obj_source, real).expr(out.names)
    out.add_guard("INSTANCE_ATTR_PRESENT", f"{name!r} in {e}", obj_source, expected=f"an instance attribute "
                  f"{name!r}", actual=f"{name!r} in {e}", cost=COST_ID)


def instance_dict_source(obj_source: Source, real: Any) -> Source:
    """Where a guard reads the instance dict of `real`: `o.__dict__`, or, for a class that defines `__dict__`
    itself, the C getter's dict (NOTE [Instance dicts read without user code] in codegen_runtime.py)."""
    from .codegen_runtime import dict_overridden, real_instance_dict
    if not dict_overridden(type(real)):
        return attr_source(obj_source, real, "__dict__")
    return CallSource(Ref(real_instance_dict, "instance_dict"), obj_source)


def attr_source(obj_source: Source, real: Any, name: str) -> AttrSource:
    """`o.name` as the default lookup reads it: raw past a Python `__getattribute__` of the class (NOTE
    [Raw attribute reads] in sources.py)."""
    return AttrSource(obj_source, name, raw=has_custom_getattribute(type(real)))


def has_custom_getattribute(cls: type) -> bool:
    """The class (or a base) defines `__getattribute__` in Python: a function, or any object but a C slot a
    user class holds there (a descriptor, a functools.partialmethod: user code all the same, review revA A3;
    a C slot: a type of an extension module outside LIBRARY_MODULE_PREFIXES, pybind11's metaclass); on a
    library class too (NOTE [Patched library __getattribute__])."""
    return not isinstance(mro_lookup(cls, "__getattribute__")[1], types.WrapperDescriptorType)


def guard_absent(out, obj_source: Source | None, real: Any, cls: type, name: str) -> None:
    """`getattr(o, name)` raises AttributeError: absent from the instance, the MRO, no `__getattr__`."""
    guard_not_in_instance(out, obj_source, real, name)
    guard_mro(out, cls)
    guard_class_absent(out, cls.__mro__, name)
    guard_class_absent(out, cls.__mro__, "__getattr__")


def guard_plain_store(out, cls: type, name: str) -> None:
    """A store `o.name = v` traced as a plain instance-dict write stays one: no class gains a
    `__setattr__` before the (fixed) one that does the write, that one is not replaced (NOTE [Library
    defaults patched]), and the class attribute `name`, if any, stays the same object (a data descriptor
    added later would take the store)."""
    index, _ = mro_lookup(cls, "__setattr__")
    guard_found_on_class(out, cls, "__setattr__", index)
    index, attr = mro_lookup(cls, name)
    if index is None:
        guard_class_absent(out, cls.__mro__, name)
    else:
        guard_entry_identity(out, guard_found_on_class(out, cls, name, index), attr)


# NOTE [Code replaced] (inlined callees): a function inlined while tracing is pinned by identity through
# whatever path found it, but `f.__code__ = other` keeps the identity and changes what a call runs. So
# each user function the trace inlined also guards `f.__code__ is <the code traced>`, one line per
# function, naming the function object itself (its identity is guarded where it was read). Functions
# guarded by their code already (NOTE [Closures guarded by code]) and functions of library modules
# (NOTE [Library modules]) are not. The frame cache persists the code as the callee's live code, whose
# hash it checks on load (frame_cache.persist, `callees`).
def guard_code(out, f: Any) -> None:
    """`f.__code__` stays the code object the trace inlined."""
    module = getattr(f, "__module__", None) or ""
    if module.split(".")[0] in LIBRARY_MODULE_PREFIXES:
        return
    name = f.__name__ if isinstance(f.__name__, str) and f.__name__.isidentifier() else "fn"
    out.guard_id(AttrSource(ObjectSource(Ref(f, name)), "__code__"), f.__code__)


def _instance_dict(real: Any) -> Any:
    from .codegen_runtime import real_instance_dict  # NOTE [Instance dicts read without user code]
    return real_instance_dict(real)
