"""Locators: how an object a persisted entry names is found again in a new process, and code identity.

Shared by the frame cache (frame_cache.py: guards and graph inputs) and the persisted code of frames that
break (persisted_code.py: the objects their transformed code loads), so neither imports the other.
"""
from __future__ import annotations

import collections
import contextlib
import enum
import hashlib
import importlib
import logging
import os
import sys
import types
from typing import Any

import torch

_MISSING = object()


class NotPersistable(Exception):
    """Some part of an entry cannot be found again in a new process."""


# ---- code identity ---------------------------------------------------------------------------------
def code_hash(code: types.CodeType) -> str:
    """A hash of what a code object does (bytecode, constants, names), not of where it is."""
    digest = hashlib.sha256()
    _hash_code(code, digest)
    return digest.hexdigest()


def _hash_code(code: types.CodeType, digest) -> None:
    for part in (code.co_code, repr(code.co_names), repr(code.co_varnames), repr(code.co_freevars),
                 repr(code.co_cellvars), repr(code.co_flags), repr(code.co_argcount), repr(code.co_kwonlyargcount),
                 code.co_qualname):
        digest.update(part if isinstance(part, bytes) else part.encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _hash_code(const, digest)
        else:
            digest.update(_const_text(const).encode())


# NOTE [Set constants hashed in order]: `x in {"cuda", "xpu"}` compiles to a frozenset constant, whose repr
# lists its items in hash order, and str hashes differ between processes (PYTHONHASHSEED): a code hash taken
# from the repr differed in every new process, so each entry that inlined such a function (torch.optim's
# _accelerator_graph_capture_health_check, run by every optimizer step) was "not used" by the next process.
# NOTE [Function constants hashed by their code]: generated code may load a function as a constant (a nested
# break's resume function Rk calls R(k+1): NOTE [Nested breaks persisted] in nested_persist.py), whose repr
# names its address, which differs in every process; such a constant is hashed by its code's hash and by the
# module its globals are (review revI HIGH-1: `moda.same` and `modb.same`, one source reading a global K that
# differs, made resume functions of equal code hash; the root's entries for both had one key, so the second
# ran with the first's globals, K = 2 where eager read 100, cold and warm). A module name, not a file path:
# the same key on every machine of a fleet sharing the cache. A resume function reached through a module
# call (NOTE [Nested breaks through module calls] in nested_breaks.py) is marked in its text, and so is the
# ResumeModuleCall R(k-1)'s code calls it in: one call site calling `self.inner` in one process and
# `self.inner.forward` in the next gave R(k-1) codes of one hash, whose entries ran without (or with)
# torch's levels in warnings and tracebacks (review revL HIGH-2).
def _const_text(const: Any) -> str:
    if isinstance(const, types.FunctionType):  # NOTE [Function constants hashed by their code]
        module = const.__globals__.get("__name__") if isinstance(const.__globals__, dict) else None
        called = ", module_called" if getattr(const, "__framejit_module_called__", False) else ""
        return f"function({module!r}, {code_hash(const.__code__)}{called})"
    if isinstance(const, frozenset):
        return "frozenset(" + repr(sorted(_const_text(c) for c in const)) + ")"
    if type(const) is tuple:
        return "(" + ", ".join(_const_text(c) for c in const) + ",)"
    if type(const).__name__ == "ResumeModuleCall":  # R(k-1)'s call of a module-called Rk (caller_frames.py)
        return f"module_call({_const_text(const.hook)})"
    return repr(const)


# ---- locators ----------------------------------------------------------------------------------------
# NOTE [Locators]: an object named by a guard or by the transformed code is persisted as a small tuple
# that finds it again: ("module", name), ("globals", module name), ("import", module, qualname),
# ("cell", index of the frame function's closure), ("dtype", name), ("device", str), ("enum", module,
# qualname, member), ("value", picklable constant), or a path through closures ("fcell", "contents": NOTE
# [Closure cells by path]). Saving verifies that the locator finds the very
# object; loading verifies the kind of what it finds.
def locate(obj: Any, fn: types.FunctionType) -> tuple:
    if isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops._OpNamespace)):  # NOTE [Op packets by name]
        found = _op_packet_locator(obj)  # (a namespace is a ModuleType that no import finds)
        if found is not None:
            return found
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if obj is sys.modules:  # `"jax" in sys.modules` (transformers' is_jax_jitting) guards the dict's keys
        return ("import", "sys", "modules")
    if isinstance(obj, dict):
        for name, module in list(sys.modules.items()):
            if getattr(module, "__dict__", None) is obj:
                return ("globals", name)
        raise NotPersistable("a globals dict of no importable module")
    if isinstance(obj, types.CellType):
        for index, cell in enumerate(fn.__closure__ or ()):
            if cell is obj:
                return ("cell", index)
        path = closure_path(obj, fn)  # NOTE [Closure cells by path]
        if path is not None:
            return path
        raise NotPersistable("a closure cell of an inlined function")
    if isinstance(obj, torch.dtype):
        return ("dtype", str(obj).split(".")[-1])
    if isinstance(obj, (torch.memory_format, torch.layout)) and getattr(torch, str(obj).split(".")[-1], None) is obj:
        return ("dtype", str(obj).split(".")[-1])  # torch.preserve_format, torch.strided: torch's attributes too
    if isinstance(obj, torch.device):
        return ("device", str(obj))
    if isinstance(obj, torch._ops.OpOverload):  # an op by its namespace, name and overload (custom ops too)
        return ("op", obj.namespace, obj._schema.name.split("::")[-1], obj._overloadname)
    if isinstance(obj, logging.Logger) and logging.getLogger(obj.name) is obj:
        return ("logger", obj.name)  # a library's module-level `logger`, pinned by a guard: found by its name
    if obj is os.environ:  # `os.environ.get(...)` read by library code at trace time (guarded by its items)
        return ("import", "os", "environ")
    if type(obj) is tuple and obj and all(isinstance(o, type) for o in obj):  # isinstance(v, (int, float))
        return ("tuple", [locate(o, fn) for o in obj])
    if isinstance(obj, enum.Enum):
        return ("enum", type(obj).__module__, type(obj).__qualname__, obj.name)
    if isinstance(obj, (bool, int, float, str, bytes, type(None), torch.Size)) or (
            type(obj) is tuple and all(isinstance(o, (bool, int, float, str)) for o in obj)):
        return ("value", obj)
    if isinstance(obj, types.FunctionType) and hasattr(obj, "__framejit_nested__"):
        from .nested_persist import describe_raw  # NOTE [Nested breaks persisted]: R1..Rn by what made them
        return describe_raw(obj, fn)
    try:
        return _import_locator(obj)
    except NotPersistable:
        path = closure_path(obj, fn)  # NOTE [Closure cells by path]: a function held only by a cell
        if path is None:
            path = _global_binding(obj, fn)  # NOTE [Objects by the global that binds them]
        if path is None and isinstance(obj, type):
            path = _class_by_instance(obj, fn)  # NOTE [Local classes by an instance]
        if path is None and isinstance(obj, types.FunctionType):
            path = _class_attribute(obj, fn)  # NOTE [Functions by the class that holds them]
        if path is None:
            raise
        return path


# NOTE [torch's C functions by torch._C]: a C function torch re-exports from torch._C (`torch.is_grad_enabled`,
# which every entry's grad-mode guard calls, NOTE [Grad mode read from torch._C]) is located in torch._C, where
# it is defined: by its `torch.` name, a warm process that had replaced `torch.is_grad_enabled` (with a
# functools.wraps wrapper, which copies the module and name the locator checks) bound the replacement in the
# guard.
def _import_locator(obj: Any) -> tuple:
    if isinstance(obj, (classmethod, staticmethod) + _SLOT_DESCRIPTORS):
        return _class_dict_locator(obj)  # NOTE [Class-dict descriptors by name]
    named = obj.fget if isinstance(obj, property) and obj.fget is not None else obj  # NOTE [Properties by name]
    module = getattr(named, "__module__", None)
    if module is None and isinstance(obj, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        module = obj.__objclass__.__module__  # a C method (`torch.Tensor.detach`): its class's module
    qualname = getattr(named, "__qualname__", None)
    if isinstance(obj, types.BuiltinFunctionType) and module == "torch" \
            and getattr(torch._C, obj.__name__, None) is obj:
        return ("import", "torch._C", obj.__name__)  # NOTE [torch's C functions by torch._C]
    if isinstance(obj, types.BuiltinMethodType) and isinstance(obj.__self__, type) and module is None:
        try:  # a C static method of a type (`tuple.__new__`, which a namedtuple's `_make` calls): by its type
            locator = ("getattr", _import_locator(obj.__self__), obj.__name__)
        except NotPersistable:
            locator = None
        if locator is not None and _finds(locator, None, obj):
            return locator
    if isinstance(obj, types.FunctionType) and qualname and "<" in qualname:
        found = _substitute_locator(obj)  # NOTE [Library substitutes by their original]
        if found is not None:
            return found
        name = getattr(obj, "__name__", None)  # F.max_pool2d: made by boolean_dispatch, named for its module
        if module and isinstance(name, str) and "<" not in name and _finds(("import", module, name), None, obj):
            return ("import", module, name)
    if not module or not qualname or "<" in qualname:
        raise NotPersistable(f"{type(obj).__name__} {qualname or obj!r} cannot be imported by name")
    try:
        found = resolve(("import", module, qualname), None)
    except Exception:
        found = None
    if found is obj:
        return ("import", module, qualname)
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and name != qualname:  # torch.relu: qualname _VariableFunctionsClass.relu
        with contextlib.suppress(Exception):
            if resolve(("import", module, name), None) is obj:
                return ("import", module, name)
    # a property's getter, a classmethod's function, or what an lru_cache wraps (NOTE [Cached functions] inlines
    # `__wrapped__`, guarded by identity; the frame cache checks its code hash as every inlined callee's)
    for attr in ("fget", "__func__", "__wrapped__"):
        if getattr(found, attr, None) is obj:
            return ("import", module, qualname, attr)
    path = _wrapped_path(found, obj)  # NOTE [Functions under their decorators]
    if path:
        return ("import", module, qualname, *path)
    # the interpreter's own types with no builtins name (FunctionType is builtins.function, MethodType
    # builtins.method): the `types` module names them
    if isinstance(obj, type) and module == "builtins":
        import types as types_module
        for name, value in vars(types_module).items():
            if value is obj and not name.startswith("_"):
                return ("import", "types", name)
        if _interpreter_types().get(qualname) is obj:  # NOTE [Interpreter types by a sample]
            return ("itype", qualname)
    found = _namedtuple_method_locator(obj, module, qualname)
    if found is not None:
        return found
    raise NotPersistable(f"{module}.{qualname} does not import back to the same object")


# NOTE [Op packets by name]: `torch.ops.ns.name(x)` and `torch.ops.ns.name.default(x)` in traced code read
# the namespace object `torch.ops.ns` and the packet `torch.ops.ns.name`, which the guards pin by identity;
# neither imports by its names (a packet's __module__ is 'torch._ops.ns' and its qualname a pybind11 record's),
# so a frame calling a custom op through torch.ops was kept in memory only. Both are found again through
# torch.ops by name (torch caches each on its parent, one object per process), verified to find the very
# object. What the op does is checked where the graph calls it (NOTE [Persisted operator targets] in
# frame_cache.py).
def _op_packet_locator(obj: Any) -> tuple | None:
    if isinstance(obj, torch._ops._OpNamespace):
        locator = ("op_namespace", obj.name)
    else:
        namespace, _, name = obj._qualified_op_name.partition("::")
        locator = ("op", namespace, name, None)
    return locator if _finds(locator, None, obj) else None


# NOTE [Interpreter types by a sample]: the types of the interpreter's iterators and views (`list_iterator`,
# `range_iterator`, `dict_keyiterator`, `dict_keys`, ...) are named by neither `builtins` nor `types`, yet
# guards pin them (a resume function inside `for i in range(n)` gets the loop's iterator on its stack, and
# its TYPE_MATCH names `range_iterator`): they are found again as the type of a sample object.
_ITYPES: dict[str, type] = {}


def _interpreter_types() -> dict[str, type]:
    if not _ITYPES:
        samples = [iter([]), iter(()), iter(range(0)), iter(range(1 << 70)), iter({}), iter({}.values()),
                   iter({}.items()), iter(set()), iter(""), iter("\u1234"), iter(b""), iter(bytearray()),
                   reversed([]), reversed(range(0)), {}.keys(), {}.values(), {}.items(), iter(lambda: 0, 0),
                   iter(collections.OrderedDict()), collections.OrderedDict().keys(), iter(collections.deque()),
                   reversed(collections.deque()), iter(memoryview(b""))]
        for sample in samples:
            _ITYPES.setdefault(type(sample).__qualname__, type(sample))
    return _ITYPES


# NOTE [Library substitutes by their original]: a function framejit traces in place of a library one
# (library_substitutes.py: namedtuple `_replace`'s stand-in is made per class) has no importable name; it is
# found as the substitute of the original it stands for, whose own locator finds it (NOTE [Namedtuple
# methods by their class]). Resolving makes the substitute again from the live original.
def _substitute_locator(obj: Any) -> tuple | None:
    from .library_substitutes import _REPLACES
    original = next((k for k, v in list(_REPLACES.items()) if v is obj), None)
    if original is None:
        return None
    try:
        locator = ("substitute", _import_locator(original))
    except NotPersistable:
        return None
    return locator if _finds(locator, None, obj) else None


# NOTE [Objects by the global that binds them]: an object the trace pinned by identity may have no name
# of its own: a module-level list whose bound `append` a resume function gets on its stack (`LOG.append(
# y.item())` breaking at `.item()`: the guard pins `___stack1.__self__`), a module-level config object.
# Such an object is found again as the global that binds it, in the module of the frame's function or of
# a function the trace inlined: ("bound", module, name, locator of its type). Only mutable objects (lists,
# sets, deques, instances of Python classes that are not tuples; dicts are located as a module's globals or
# not at all, in `locate`): in one process such an object
# changes between calls, so every fact the trace read from it beyond its identity and its type is guarded
# anyway, and resolving checks the type (a warm process binding another type there does not use the entry).
# Immutable objects (tuples, frozensets, functions, classes, tensors) never are: a trace may take their
# contents as constants of their identity.
_BINDABLE = (list, set, collections.deque)


def _global_binding(obj: Any, fn: types.FunctionType | None) -> tuple | None:
    cls = type(obj)
    if isinstance(obj, (tuple, frozenset, torch.Tensor, type, types.FunctionType, types.ModuleType)) or not (
            isinstance(obj, _BINDABLE) or (cls.__flags__ & _HEAPTYPE and hasattr(obj, "__dict__"))):
        return None
    try:
        type_locator = locate(cls, fn)  # an import, or NOTE [Local classes by an instance]
    except NotPersistable:
        return None
    for module in _entry_modules(fn):
        for name, value in list(sys.modules[module].__dict__.items()):
            if value is obj:
                locator = ("bound", module, name, type_locator)
                return locator if _finds(locator, fn, obj) else None
    return None


_HEAPTYPE = 1 << 9


def _entry_modules(fn: types.FunctionType | None) -> list[str]:
    """The modules of the frame's function and of the functions the trace inlined (`closures`)."""
    functions = [fn] + (list(_CLOSURE_ROOTS[-1][1]) if _CLOSURE_ROOTS and _CLOSURE_ROOTS[-1][0] is fn else [])
    modules: list[str] = []
    for f in functions:
        name = getattr(f, "__globals__", {}).get("__name__")
        if isinstance(name, str) and name not in modules and name in sys.modules:
            modules.append(name)
    return modules


# NOTE [Local classes by an instance]: a class made inside a function has no importable name, yet a module
# may bind an instance of it: with the `kernels` package installed, transformers replaces functions such as
# llama's `apply_rotary_pos_emb` by an instance of `_create_func_module.<locals>.Func` (an nn.Module), and the
# trace pins that class (TYPE_MATCH of the global). Such a class is found again as the type of that global, in
# the module of the frame's function or of an inlined function: ("type_of", module, name), verified to find
# the very class. In a warm process it is the class of what the program binds there now, as an importable
# class is whatever its module binds; the entry's guards check the rest (its dict, its MRO, its methods'
# code by their hashes).
def _class_by_instance(cls: type, fn: types.FunctionType | None) -> tuple | None:
    for module in _entry_modules(fn):
        for name, value in list(sys.modules[module].__dict__.items()):
            if type(value) is cls:
                locator = ("type_of", module, name)
                return locator if _finds(locator, fn, cls) else None
    return None


# NOTE [Functions by the class that holds them]: a function made inside another one and stored in a class
# dict has no importable name: huggingface_hub's strict dataclasses install `strict.<locals>.wrap.<locals>.
# __strict_setattr__` as every transformers config class's `__setattr__`, and the local Func class above has
# its own `forward`. Such a function is found as its class's dict entry, the class by its own locator (an
# import, or NOTE [Local classes by an instance]): ("in_class", class locator, name), verified to find the
# very function. The class is found through the garbage collector's referrers (the function's referrers are
# the class dict): only when an entry is saved, never while tracing.
_SEARCHING: set[int] = set()  # functions whose class is being located (a local class's own search)


_HELD: dict[tuple[int, int], tuple | None] = {}  # answers while one entry is saved (`closures` clears it)


def _class_attribute(obj: types.FunctionType, fn: types.FunctionType | None) -> tuple | None:
    key = (id(obj), id(fn))
    if key in _HELD:  # each search scans the interpreter's objects (~0.15 s with transformers imported) and
        return _HELD[key]  # closure_path asks again for every object it locates: once per function and save
    if id(obj) in _SEARCHING:
        return None
    _SEARCHING.add(id(obj))
    try:
        found = _search_class_attribute(obj, fn)
    finally:
        _SEARCHING.discard(id(obj))
    if _CLOSURE_ROOTS:
        _HELD[key] = found
    return found


def _search_class_attribute(obj: types.FunctionType, fn: types.FunctionType | None) -> tuple | None:
    for cls in _classes_near(obj, fn):  # NOTE [Classes near the function first]
        name = next((k for k, v in list(cls.__dict__.items()) if v is obj and isinstance(k, str)), None)
        if name is not None:
            locator = _in_class(cls, name, obj, fn)
            if locator is not None:
                return locator
    import gc
    for namespace in gc.get_referrers(obj):
        if not isinstance(namespace, dict):
            continue
        name = next((k for k, v in namespace.items() if v is obj and isinstance(k, str)), None)  # `__setattr__`
        if name is None:
            continue
        for cls in gc.get_referrers(namespace):
            locator = _in_class(cls, name, obj, fn) if isinstance(cls, type) else None
            if locator is not None:
                return locator
    return None


def _in_class(cls: type, name: str, obj: Any, fn: types.FunctionType | None) -> tuple | None:
    if cls.__dict__.get(name) is not obj:
        return None
    try:
        owner = locate(cls, fn)
    except NotPersistable:
        return None
    locator = ("in_class", owner, name)
    return locator if _finds(locator, fn, obj) else None


# NOTE [Classes near the function first]: the garbage collector's referrers are found by scanning every object
# it tracks (~0.15 s per function and save with transformers imported), and miss every object gc.freeze()
# moved to its permanent generation (servers freeze after importing, before forking): a decorated `forward`
# of a frozen process's model was "not importable by name" and each of its entries kept in memory only. The
# classes of the function's own module and of the entry's modules (module-level classes, the classes of
# module-level instances, and their MROs) are tried first; the referrers only when none holds it.
def _classes_near(obj: types.FunctionType, fn: types.FunctionType | None):
    seen: set[int] = set()
    for name in (obj.__module__, *_entry_modules(fn)):
        namespace = getattr(sys.modules.get(name) if isinstance(name, str) else None, "__dict__", {})
        for value in list(namespace.values()):
            for cls in (value if isinstance(value, type) else type(value)).__mro__:
                if id(cls) not in seen:
                    seen.add(id(cls))
                    yield cls


# NOTE [Code by its file's module]: a guard may pin the code of a function the trace did not inline: a
# frame that breaks at `with my_ctx(l):` (a @contextlib.contextmanager function) guards the code of the
# decorator's `contextmanager.<locals>.helper` (NOTE [Code replaced] in lookup.py) before inlining it, and
# neither the frame's module nor an inlined function's has it. `code_locator` then searches the module
# whose file the code was compiled from as well. No callee's hash covers such a code object, so the entry
# keeps its own hash with the locator (("hashed", locator, hash)) and loading refuses a code that changed.
# NOTE [Functions under their decorators]: a method decorated by wrappers that keep its names
# (transformers' `@deprecate_kwarg(...)` over `@capture_outputs` over `forward`) imports as the outermost
# wrapper; the trace inlines each layer, and a break may resume in the innermost code. Each inner function
# is found from the import by the `__wrapped__` chain functools.wraps leaves (a few levels), verified to
# be the very object.
def _wrapped_path(found: Any, obj: Any, depth: int = 4) -> list[str] | None:
    path: list[str] = []
    for _ in range(depth):
        found = getattr(found, "__wrapped__", None)
        if found is None:
            return None
        path.append("__wrapped__")
        if found is obj:
            return path
    return None


def code_locator(code: types.CodeType, modules) -> tuple | None:
    """A locator for a code object: the code of a function its module (one of `modules`, then the module
    whose file the code was compiled from) imports by the code's qualname, or of one under that function's
    decorators (NOTE [Functions under their decorators]), or a code nested in one (NOTE [Nested code by its
    enclosing function]); verified to find the very object. None when there is none. The file's module is
    looked for in sys.modules (a scan of every module) only when none of `modules` has the code."""
    candidates = [m for m in modules if isinstance(m, str)]
    for module in candidates:
        locator = _code_in_module(code, module)
        if locator is not None:
            return locator
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == code.co_filename and isinstance(name, str) and name not in candidates:
            locator = _code_in_module(code, name)
            if locator is not None:
                return locator
    return None


def _code_in_module(code: types.CodeType, module: str) -> tuple | None:
    if "<" not in code.co_qualname:
        try:
            found = resolve(("import", module, code.co_qualname), None)
        except Exception:
            found = None
        for path in ([], ["__wrapped__"], ["__wrapped__"] * 2, ["__wrapped__"] * 3, ["__wrapped__"] * 4):
            f = found
            for attr in path:
                f = getattr(f, attr, None)
            if getattr(f, "__code__", None) is code:
                return ("code", ("import", module, code.co_qualname, *path))
    return nested_code_locator(code, module)


def _namedtuple_method_locator(obj: Any, module: str, qualname: str) -> tuple | None:
    """NOTE [Namedtuple methods by their class]: `collections.namedtuple` makes `_replace`, `__repr__`,
    `_asdict` (and `_make`'s function) per class, with `__module__` 'collections' and qualname `P._replace`,
    which import back to nothing. Such a function is found as the class-dict entry of the namedtuple class
    that holds it, by the class's own module and qualname; resolving checks it is the very object. The class
    is one of `tuple.__subclasses__()` (namedtuple and typing.NamedTuple make direct subclasses of tuple;
    the interpreter keeps that list itself): before, it was found through the garbage collector's referrers,
    which miss every object gc.freeze() moved to the permanent generation (servers freeze after importing),
    so such entries were kept in memory only there, and each search scanned every tracked object."""
    owner, _, name = qualname.rpartition(".")
    if module != "collections" or not owner or "<" in owner or not isinstance(obj, (types.FunctionType, classmethod)):
        return None  # (a classmethod: `_make`, read through the class dict by `self._make`)
    for cls in tuple.__subclasses__():
        if cls.__qualname__ != owner or not isinstance(cls.__dict__.get("_fields"), tuple):
            continue
        entry = cls.__dict__.get(name)
        if entry is obj:
            path = ()
        elif type(entry) is classmethod and entry.__func__ is obj:  # `_make`'s function, inlined
            path = ("__func__",)
        else:
            continue
        locator = ("classdict", cls.__module__, cls.__qualname__, name)
        return locator + path if _finds(locator + path, None, obj) else None
    return None


# NOTE [Class-dict descriptors by name]: a guard on a class attribute lookup names the raw entry of the
# class's __dict__; for a classmethod or staticmethod (torch.autograd.Function.apply, read by every custom
# Function apply) that is the descriptor object, which no attribute read returns (`Function.apply` is a
# bound method). Its function's qualname names the class and the attribute: the locator reads the class's
# __dict__ entry, verified (on save) to be the very object. The descriptors a class's C slots make (the
# `__dict__` getset of a Python class, read by the lookup of `self.__dict__`, a __slots__ member) have no
# module: they are found the same way, by the type that defines them (`__objclass__`) and their name.
_SLOT_DESCRIPTORS = (types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType)


def _class_dict_locator(obj: Any) -> tuple:
    """A classmethod/staticmethod by its function's qualname (`Owner.name`); a classmethod of a C type
    (`torch._C._FunctionBase.apply`: on torch 2.14 `Function.__dict__["apply"]` is that very object) by its
    defining type and name. Verified: the class's __dict__ entry must be the very object."""
    if isinstance(obj, _SLOT_DESCRIPTORS):
        owner_type, name = getattr(obj, "__objclass__", None), getattr(obj, "__name__", None)
        module, owner = getattr(owner_type, "__module__", None), getattr(owner_type, "__qualname__", None)
    else:
        func = obj.__func__
        module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
        owner, _, name = (qualname or "").rpartition(".")
    if not module or not owner or not name or "<" in owner:
        raise NotPersistable(f"{type(obj).__name__} {obj!r} cannot be imported by name")
    locator = ("classdict", module, owner, name)
    try:
        found = resolve(locator, None)
    except Exception:
        found = None
    if found is not obj and isinstance(obj, classmethod):  # a namedtuple's `_make`
        locator = _namedtuple_method_locator(obj, module, f"{owner}.{name}")
        found = obj if locator is not None else None
    if found is not obj:
        raise NotPersistable(f"{type(obj).__name__} {module}.{owner}.{name} is not that class's own entry")
    return locator


# NOTE [Closure cells by path]: a guard may name a closure cell of a function the trace inlined (not the
# frame's own function), or a function held only by such a cell: transformers wraps every ModelOutput's
# dataclass __init__ in a closure (`_BCCacheNameMeta`'s `__init__(self, *args, **kwargs)`, named like the
# __init__ it wraps), and inlining it reads its cell `init`, the dataclass's own __init__, whose cells hold
# its defaults. Neither has an importable name. Such an object is located by the path that reaches it from
# a function that does: ("fcell", locator of the function, index, free variable name) for the cell, and
# ("contents", locator of the cell, facts) for a function in a cell. Resolving a path reads the live
# objects again and verifies each step: the free variable has the same name, and the function found in a
# cell is the same kind of function (`_function_facts`: module, qualname, code hash, globals, defaults),
# else NotPersistable (the entry is not used). The cell's contents are what the entry's guards check on
# every call, as for the frame's own cells: a cell that holds another function later fails the guard
# that pins it (its identity, against the function the path found when the entry was loaded). Paths are
# searched only from the functions the trace inlined (`closures`, set by frame_cache.persist), breadth
# first, at most a few levels deep.
_CLOSURE_ROOTS: list[tuple] = []  # (frame function, inlined functions) of the entry being persisted
_PATH_DEPTH = 9  # levels of objects, cells and functions alternating: four functions deep


@contextlib.contextmanager
def closures(fn: types.FunctionType, functions) -> Any:
    """Within this block, `locate` finds cells and cell-held functions through `functions`' closures."""
    _CLOSURE_ROOTS.append((fn, tuple(functions)))
    try:
        yield
    finally:
        _CLOSURE_ROOTS.pop()
        if not _CLOSURE_ROOTS:
            _HELD.clear()


def closure_path(obj: Any, fn: types.FunctionType) -> tuple | None:
    """A path locator for a cell (or a function held by a cell) of the functions `closures` gave, verified
    to find the very object; None when there is none."""
    if not _CLOSURE_ROOTS or _CLOSURE_ROOTS[-1][0] is not fn:
        return None
    roots: list[tuple[Any, tuple]] = []
    for index, cell in enumerate(fn.__closure__ or ()):
        roots.append((cell, ("cell", index)))
    unnamed = []
    for f in _CLOSURE_ROOTS[-1][1]:
        if f is not fn and isinstance(f, types.FunctionType) and f.__closure__:
            try:
                roots.append((f, _import_locator(f)))
            except NotPersistable:
                unnamed.append(f)
    found = _path_from(obj, fn, roots)
    if found is not None or not unnamed:
        return found
    # NOTE [Functions by the class that holds them]: searched only when the named roots lead nowhere (each
    # search scans the interpreter's objects)
    held = [(f, _class_attribute(f, fn)) for f in unnamed]
    held = [(f, loc) for f, loc in held if loc is not None]
    return _path_from(obj, fn, roots + held) if held else None


def _path_from(obj: Any, fn: types.FunctionType, roots: list[tuple[Any, tuple]]) -> tuple | None:
    seen = {id(o) for o, _ in roots}
    level = roots
    for _ in range(_PATH_DEPTH):
        found = next((loc for o, loc in level if o is obj), None)
        if found is not None:
            return found if _finds(found, fn, obj) else None
        following = []
        for o, loc in level:
            if isinstance(o, types.FunctionType):
                for index, cell in enumerate(o.__closure__ or ()):
                    if id(cell) not in seen:
                        seen.add(id(cell))
                        following.append((cell, ("fcell", loc, index, o.__code__.co_freevars[index])))
            elif isinstance(o, types.CellType):
                try:
                    contents = o.cell_contents
                except ValueError:
                    continue
                if isinstance(contents, types.FunctionType) and id(contents) not in seen:
                    seen.add(id(contents))
                    try:
                        following.append((contents, ("contents", loc, _function_facts(contents, fn))))
                    except NotPersistable:
                        pass
        level = following
    return None


# NOTE [Nested code by its enclosing function]: the code of a closure (torch.optim's
# `_use_grad_for_differentiable.<locals>._use_grad`, the wrapper of every optimizer's step) has no importable
# function, but it is a constant of its enclosing function's code, which has: ("code_in", locator of the
# enclosing function, the code's qualname) finds it among that code's constants (nested ones too). Code is
# immutable; its user (a break resuming in it) checks its hash on load as well.
def nested_code_locator(code: types.CodeType, module: str) -> tuple | None:
    outer, sep, _ = code.co_qualname.partition(".<locals>.")
    if not sep or "<" in outer:
        return None
    locator = ("code_in", ("import", module, outer), code.co_qualname)
    return locator if _finds(locator, None, code) else None


def _nested_code(code: types.CodeType, qualname: str) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_qualname == qualname:
                return const
            found = _nested_code(const, qualname)
            if found is not None:
                return found
    return None


def _finds(locator: tuple, fn: types.FunctionType, obj: Any) -> bool:
    try:
        return resolve(locator, fn) is obj
    except Exception:
        return False


# NOTE [Defaults that lead back]: a default of a cell-held function is located like any object, and a
# default with no importable name (`def block(x, *, act=lambda t: t.relu())` inside a factory) is searched
# for through the closures again, which reach `block`'s cell and describe `block` again: the recursion
# never ended (RecursionError, and the whole frame ran eagerly as after an internal error, with the
# default backend only, the one whose entries persist). A function being described is not described
# again: that path is NotPersistable, and the entry is kept in memory only.
_DESCRIBING: set[int] = set()


def _function_facts(f: types.FunctionType, fn: types.FunctionType) -> tuple:
    """What a function found in a cell must be to stand for the one the trace inlined (beyond the cells
    its guards check): its names, code, globals and defaults (each default by locator and type)."""
    def described(values):
        return None if values is None else [(locate(v, fn), type(v).__module__, type(v).__qualname__) for v in values]
    if id(f) in _DESCRIBING:  # NOTE [Defaults that lead back]
        raise NotPersistable(f"the defaults of {f.__qualname__} lead back to it")
    _DESCRIBING.add(id(f))
    try:
        kwdefaults = f.__kwdefaults__
        return (f.__module__, f.__qualname__, code_hash(f.__code__), locate(f.__globals__, fn),
                described(f.__defaults__), None if kwdefaults is None else (list(kwdefaults),
                                                                            described(kwdefaults.values())))
    finally:
        _DESCRIBING.discard(id(f))


def _in_cell(cell: Any, facts: tuple, fn: types.FunctionType) -> types.FunctionType:
    if not isinstance(cell, types.CellType):
        raise NotPersistable("a closure path does not lead to a cell")
    try:
        contents = cell.cell_contents
    except ValueError:
        raise NotPersistable("a closure cell on a persisted path is empty") from None
    if not isinstance(contents, types.FunctionType) or _function_facts(contents, fn) != facts:
        raise NotPersistable(f"the function in a closure cell is not {facts[0]}.{facts[1]} as cached")
    return contents


# NOTE [Properties by name]: a property object has no __module__ or __qualname__, but `@property def name`
# in class C leaves its getter named `C.name`, and reading `C.name` on the class gives the property back:
# the getter's names locate it (verified like every locator: the import must find the very object). The
# zoo's bert reads `self.dtype`, a property of its model class, and the guard pinning that property made
# its entry unpersistable ("kept in memory only"): every warm process traced bert again.
def resolve(locator: tuple, fn: types.FunctionType | None) -> Any:
    """The object `locator` names in this process (`fn`: the compiled function, for its cells); raises
    NotPersistable where it cannot be found as it was when cached."""
    from .locator_kinds import RESOLVERS
    handler = RESOLVERS.get(locator[0])
    if handler is None:
        raise NotPersistable(f"unknown locator {locator[0]!r}")
    return handler(locator, fn)


# NOTE [Imported by their own name]: an importable function or class is located by its module and name, and
# saving checks that the name finds it. A name is only a binding, though: a warm process that binds another
# function there (`hlp.scale = hlp2.scale`, a plugin choosing its implementation) found that one, and the
# identity guards the trace placed on the function then pinned the new one: with the same code its hash
# matched, while the globals it reads (hlp2.K) are not the ones the entry's guards check (hlp.K), so the warm
# entry computed with the old value. What a name finds must still be named so itself.
def _own_name(obj: Any, module: str, qualname: str) -> Any:
    if isinstance(obj, (types.FunctionType, type)) and obj.__module__ != "builtins" and (  # (`types` names those)
            obj.__module__ != module or qualname not in (obj.__qualname__, obj.__name__)):
        raise NotPersistable(f"{module}.{qualname} is now {obj.__module__}.{obj.__qualname__}")
    return obj


# NOTE [Locators import no user module]: resolving a locator imported its module when the process had not:
# a warm process whose program imports `impl_fast` where the cold one imported `impl_slow` ran impl_slow's
# top-level code (its prints, its registrations) just to check a guard, which eager never does. A module the
# process has not imported is imported only for torch and framejit (which import their own submodules
# lazily, as tracing did in the cold process); any other makes the entry unusable (traced again).
_LAZY_PACKAGES = frozenset({"torch", "framejit"})


def _imported(name: str) -> types.ModuleType:
    module = sys.modules.get(name)
    if module is not None:
        return module
    if name.partition(".")[0] not in _LAZY_PACKAGES:
        raise ModuleNotImported(name)
    return importlib.import_module(name)


class ModuleNotImported(NotPersistable):
    """A locator names a module this process has not imported (yet: NOTE [Entries waiting for an import]
    in hook.py)."""

    def __init__(self, module: str) -> None:
        super().__init__(f"the module {module} is not imported in this process")
        self.module = module


def _import(module: str, qualname: str) -> Any:
    obj = _imported(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _live_mro(locators: list, fn: types.FunctionType) -> tuple:
    """The live MRO of the class `locators[0]` finds, when it is still the classes the locators find."""
    classes = [resolve(loc, fn) for loc in locators]
    mro = classes[0].__mro__
    if len(mro) != len(classes) or any(a is not b for a, b in zip(mro, classes)):
        raise NotPersistable(f"the MRO of {classes[0].__qualname__} changed since it was cached")
    return mro
