"""framejit: a just-in-time compiler frontend for PyTorch.

Public API only; see api.py for the implementations and DESIGN.md for the architecture.

NOTE [Light import]
`import framejit` imports neither torch nor the capture machinery: the public names below are resolved
on first access by a module-level `__getattr__` (PEP 562). `framejit.config`, `framejit.logs`,
`framejit.cache` and `framejit.cli` are torch-free at import time too, so `python -m framejit cache ls`
starts in milliseconds; commands that compile something import torch when they first touch the API.
"""
from __future__ import annotations

import importlib

from . import config, logs  # torch-free; `framejit.config.x = ...` works right after `import framejit`

__version__ = "0.1.0"

__all__ = [
    "BackendCompilerFailed", "ConstraintViolationError", "FramejitError", "Unsupported", "compile", "disable", "explain", "list_backends", "lookup_backend",
    "mark_dynamic", "mark_static", "maybe_mark_dynamic", "register_backend", "reset", "set_logs", "stats",
    "__version__",
]

# public name -> the submodule (relative to this package) that defines it
_LAZY = {
    "BackendCompilerFailed": ".api", "ConstraintViolationError": ".api", "FramejitError": ".api", "Unsupported": ".api", "compile": ".api", "disable": ".api",
    "explain": ".api", "mark_dynamic": ".api", "mark_static": ".api", "maybe_mark_dynamic": ".api",
    "reset": ".api", "stats": ".api",
    "list_backends": ".backends.registry", "lookup_backend": ".backends.registry",
    "register_backend": ".backends.registry",
    "set_logs": ".logs",
}
_SUBMODULES = ("api", "backends", "cache", "capture", "cli", "guards")


def __getattr__(name: str):
    if name in _SUBMODULES:  # `import framejit; framejit.cache.default_store()` as with eager imports
        return importlib.import_module(f".{name}", __name__)
    if name == "compile":  # on a CPython framejit does not support, the API (and torch) is not imported
        from . import versions
        if versions.unsupported_reason() is not None:
            return versions.eager_compile
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'framejit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value  # later lookups are plain module attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
