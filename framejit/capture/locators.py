"""Locators: how an object a persisted entry names is found again in a new process, and code identity.

Shared by the frame cache (frame_cache.py: guards and graph inputs) and the persisted code of frames that
break (persisted_code.py: the objects their transformed code loads), so neither imports the other.
"""
from __future__ import annotations

import enum
import hashlib
import importlib
import sys
import types
from typing import Any

import torch

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
            digest.update(repr(const).encode())


# ---- locators ----------------------------------------------------------------------------------------
# NOTE [Locators]: an object named by a guard or by the transformed code is persisted as a small tuple
# that finds it again: ("module", name), ("globals", module name), ("import", module, qualname),
# ("cell", index of the frame function's closure), ("dtype", name), ("device", str), ("enum", module,
# qualname, member) or ("value", picklable constant). Saving verifies that the locator finds the very
# object; loading verifies the kind of what it finds.
def locate(obj: Any, fn: types.FunctionType) -> tuple:
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, dict):
        for name, module in list(sys.modules.items()):
            if getattr(module, "__dict__", None) is obj:
                return ("globals", name)
        raise NotPersistable("a globals dict of no importable module")
    if isinstance(obj, types.CellType):
        for index, cell in enumerate(fn.__closure__ or ()):
            if cell is obj:
                return ("cell", index)
        raise NotPersistable("a closure cell of an inlined function")
    if isinstance(obj, torch.dtype):
        return ("dtype", str(obj).split(".")[-1])
    if isinstance(obj, torch.device):
        return ("device", str(obj))
    if isinstance(obj, enum.Enum):
        return ("enum", type(obj).__module__, type(obj).__qualname__, obj.name)
    if isinstance(obj, (bool, int, float, str, bytes, type(None), torch.Size)) or (
            type(obj) is tuple and all(isinstance(o, (bool, int, float, str)) for o in obj)):
        return ("value", obj)
    return _import_locator(obj)


def _import_locator(obj: Any) -> tuple:
    if isinstance(obj, (classmethod, staticmethod, types.ClassMethodDescriptorType)):
        return _class_dict_locator(obj)  # NOTE [Class-dict descriptors by name]
    named = obj.fget if isinstance(obj, property) and obj.fget is not None else obj  # NOTE [Properties by name]
    module = getattr(named, "__module__", None)
    qualname = getattr(named, "__qualname__", None)
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
        try:
            if resolve(("import", module, name), None) is obj:
                return ("import", module, name)
        except Exception:
            pass
    # a function reached through a descriptor: a property's getter, a classmethod's function
    for attr in ("fget", "__func__"):
        if getattr(found, attr, None) is obj:
            return ("import", module, qualname, attr)
    # the interpreter's own types with no builtins name (FunctionType is builtins.function, MethodType
    # builtins.method): the `types` module names them
    if isinstance(obj, type) and module == "builtins":
        import types as types_module
        for name, value in vars(types_module).items():
            if value is obj and not name.startswith("_"):
                return ("import", "types", name)
    raise NotPersistable(f"{module}.{qualname} does not import back to the same object")


# NOTE [Class-dict descriptors by name]: a guard on a class attribute lookup names the raw entry of the
# class's __dict__; for a classmethod or staticmethod (torch.autograd.Function.apply, read by every custom
# Function apply) that is the descriptor object, which no attribute read returns (`Function.apply` is a
# bound method). Its function's qualname names the class and the attribute: the locator reads the class's
# __dict__ entry, verified (on save) to be the very object.
def _class_dict_locator(obj: Any) -> tuple:
    """A classmethod/staticmethod by its function's qualname (`Owner.name`); a classmethod of a C type
    (`torch._C._FunctionBase.apply`: on torch 2.14 `Function.__dict__["apply"]` is that very object) by its
    defining type and name. Verified: the class's __dict__ entry must be the very object."""
    if isinstance(obj, types.ClassMethodDescriptorType):
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
    if found is not obj:
        raise NotPersistable(f"{type(obj).__name__} {module}.{owner}.{name} is not that class's own entry")
    return locator


# NOTE [Properties by name]: a property object has no __module__ or __qualname__, but `@property def name`
# in class C leaves its getter named `C.name`, and reading `C.name` on the class gives the property back:
# the getter's names locate it (verified like every locator: the import must find the very object). The
# zoo's bert reads `self.dtype`, a property of its model class, and the guard pinning that property made
# its entry unpersistable ("kept in memory only"): every warm process traced bert again.
def resolve(locator: tuple, fn: types.FunctionType | None) -> Any:
    kind = locator[0]
    if kind == "module":
        return importlib.import_module(locator[1])
    if kind == "globals":
        return importlib.import_module(locator[1]).__dict__
    if kind == "cell":
        return fn.__closure__[locator[1]]
    if kind == "dtype":
        return getattr(torch, locator[1])
    if kind == "device":
        return torch.device(locator[1])
    if kind == "enum":
        return getattr(_import(locator[1], locator[2]), locator[3])
    if kind == "value":
        return locator[1]
    if kind == "mro":
        return _live_mro(locator[1], fn)
    if kind == "code":  # NOTE [Code replaced] in lookup.py
        return resolve(locator[1], fn).__code__
    if kind == "classdict":  # NOTE [Class-dict descriptors by name]
        owner = _import(locator[1], locator[2])
        if not isinstance(owner, type) or locator[3] not in owner.__dict__:
            raise NotPersistable(f"{locator[1]}.{locator[2]} has no own attribute {locator[3]}")
        return owner.__dict__[locator[3]]
    if kind == "import":
        obj = _import(locator[1], locator[2])
        return getattr(obj, locator[3]) if len(locator) > 3 else obj
    raise NotPersistable(f"unknown locator {kind!r}")


def _import(module: str, qualname: str) -> Any:
    obj = importlib.import_module(module) if module != "__main__" else sys.modules["__main__"]
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
