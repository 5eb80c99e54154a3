"""Python's import machinery is never traced: a call into it is a graph break that runs it as plain Python.

NOTE [Import machinery at breaks]: `importlib.import_module(name)`, `importlib.util.find_spec`,
`importlib.reload`, `importlib.metadata.version("torch")`, `pkgutil.iter_modules` and friends are Python
code (importlib/__init__.py, the frozen `importlib._bootstrap`/`_bootstrap_external`, importlib.metadata,
pkgutil). Inlined, their bodies break again and again inside (module locks, `sys.modules`, finders, file
system reads): `def f(x): m = importlib.import_module("mod"); return m.h(x)` traced 81 frames cold and 29 in
a warm process, and ran 2 of them eagerly. A break at the call alone did not help, since the call at a break
went through a frame hook and compiled `import_module` as a frame of its own. So:

- inlining a function of the import machinery raises a break at the call (`import_break`), and
- at that break the callee is called directly, never through a frame hook (`import_machinery`, consulted
  where graph_break.py decides which callees are hooked), as a builtin would be.

The import runs once, in Python, with eager's effects (`sys.modules`, the module's top-level code) and
value; nothing of it is guarded or persisted. The `import mod` statement (IMPORT_NAME) goes through
`builtins.__import__` (C) and is handled by the IMPORT_NAME handler; lazy modules whose `__getattr__`
imports a submodule (transformers' `_LazyModule`) reach `import_module` inside the inlined `__getattr__`,
and break at the attribute access of the user's frame.
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported

# modules (by their globals' __name__) whose functions are the import machinery; a package name also
# covers its submodules (importlib.util, importlib.metadata, importlib._bootstrap, ...)
_IMPORT_MODULES = ("importlib", "pkgutil", "zipimport", "importlib_metadata", "importlib_resources")


def import_machinery(fn: Any) -> bool:
    """Whether `fn` is a Python function of the import machinery (NOTE [Import machinery at breaks])."""
    module = getattr(fn, "__globals__", None)
    name = module.get("__name__") if isinstance(module, dict) else None
    if not isinstance(name, str):
        return False
    return name in _IMPORT_MODULES or name.startswith(tuple(m + "." for m in _IMPORT_MODULES))


def import_break(fn: Any) -> None:
    """Raise the break for inlining `fn` when it belongs to the import machinery."""
    if import_machinery(fn):
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
        module = fn.__globals__["__name__"]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{module}.{name} is Python's import machinery: "
                          "it runs as plain Python at a graph break")


__all__ = ["import_break", "import_machinery"]
