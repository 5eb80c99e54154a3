"""IMPORT_NAME / IMPORT_FROM for modules that are already imported.

NOTE [Imports inside compiled functions]: `import torch` or `from .utils import helper` inside a
function only binds names when every module involved is already in `sys.modules` (importing anew runs
module code, a side effect framejit does not replay): the import is answered at trace time with the
real `__import__`, and the module is read through `sys.modules[name]` (guarded by identity like any
global, so a reload recompiles). A module not imported yet is a graph break: the residual code imports
it and the rest of the frame resumes captured. CPython's IMPORT_NAME calls the frame's builtin
`__import__`, which a user may replace (`builtins.__import__ = hook`): the answer from `sys.modules` is
right only while it is CPython's own, so that is guarded by identity, and a replaced one is a graph break.
"""
from __future__ import annotations

import importlib.util
import sys
import types

from ..breaks import BreakKind, Unsupported, UserException
from ..sources import GlobalSource, ItemSource, ObjectSource, Ref
from ..values import PyModuleValue
from ..values.builder import wrap
from . import op

_MODULES_REF = Ref(sys.modules, "modules")


@op("IMPORT_NAME")
def import_name(tx, inst):
    level_value, fromlist_value = tx.popn(2)
    fromlist = fromlist_value.as_constant()
    level = level_value.as_constant()
    name = inst.arg
    _guard_default_import(tx)
    absolute = _resolve(tx, name, level)
    # NOTE [Reads past writes through a namespace dict]: `sys.modules[name] = m` earlier in the graph
    tx.output.side_effects.check_namespace_read(sys.modules, absolute)
    _require_imported(absolute)
    for item in fromlist or ():
        if item != "*" and not hasattr(sys.modules[absolute], item):
            _require_imported(f"{absolute}.{item}")
    if fromlist:
        bound = absolute
    elif level == 0:
        bound = absolute.partition(".")[0]
    else:  # `from . import x` always has a fromlist; `import .x` is not valid syntax
        bound = absolute
    tx.push(_module_value(tx, bound))


@op("IMPORT_FROM")
def import_from(tx, inst):
    module = tx.peek()
    if not isinstance(module, PyModuleValue):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"from-import out of {module.describe()}")
    name = inst.arg
    real = module.obj
    if hasattr(real, name):
        tx.push(tx.getattr(module, name))
        return
    submodule = f"{real.__name__}.{name}"
    if submodule in sys.modules:
        tx.push(_module_value(tx, submodule))
        return
    # the error is a fact like any other: a later `module.name = v` or import of the submodule must miss
    try:
        tx.push(tx.getattr(module, name))  # raises, the name guarded absent from the module
        return
    except UserException:
        pass
    modules = tx.output.name_of(sys.modules, "modules")
    tx.output.add_guard("MODULE_ABSENT", f"{submodule!r} not in {modules}", None, expected=f"{submodule} not imported")
    raise UserException(_import_error(real, name))


def _import_error(module: types.ModuleType, name: str) -> ImportError:
    """CPython's error for `from module import name` (ceval's import_from), with its `name`, `path` and, from 3.12,
    `name_from` (NOTE [Members of caught exceptions] in caught_exceptions.py)."""
    module_name, path = getattr(module, "__name__", None), module.__dict__.get("__file__")
    shown = module_name if isinstance(module_name, str) else "<unknown module name>"
    if not isinstance(path, str):
        error = ImportError(f"cannot import name {name!r} from {shown!r} (unknown location)", name=module_name)
    elif getattr(getattr(module, "__spec__", None), "_initializing", False):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"from-import out of the partially initialized {shown}")
    else:
        error = ImportError(f"cannot import name {name!r} from {shown!r} ({path})", name=module_name, path=path)
    if hasattr(error, "name_from"):
        error.name_from = name
    return error


def _guard_default_import(tx) -> None:
    """The frame's builtin `__import__` is CPython's own, and stays it (NOTE [Imports inside compiled functions])."""
    builtins_dict = tx._builtins()
    current = builtins_dict.get("__import__")
    if not (type(current) is types.BuiltinFunctionType and current.__self__ is sys.modules.get("builtins")
            and current.__name__ == "__import__"):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, "import with a replaced builtins.__import__")
    tx.output.guard_id(ItemSource(ObjectSource(Ref(builtins_dict, "B")), "__import__"), current)


def _resolve(tx, name: str, level: int) -> str:
    if level == 0:
        return name
    package = tx.f_globals.get("__package__") or tx.f_globals.get("__name__", "").rpartition(".")[0]
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError) as e:
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"relative import: {e}") from None


def _require_imported(name: str) -> None:
    if not isinstance(sys.modules.get(name), types.ModuleType):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"import of {name!r}, which is not imported yet")
    parts = name.split(".")
    for i in range(1, len(parts)):
        if not isinstance(sys.modules.get(".".join(parts[:i])), types.ModuleType):
            raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"import of {name!r}, whose package is not imported")


def _module_value(tx, name: str):
    return wrap(tx.output, sys.modules[name], GlobalSource(_MODULES_REF, name))
