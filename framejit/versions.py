"""Which CPython versions framejit captures, and what `compile` does on any other.

framejit reads and writes CPython bytecode, whose instruction set changes with every minor version
(capture/normalize.py reads it, capture/emit.py writes it; both take the running version from
`python_version()`; cache keys name the full version). On a version outside SUPPORTED, `framejit.compile`
returns the function or module unchanged, so it runs eagerly, and warns once per process; nothing of the
capture machinery is imported, so an instruction set framejit has never seen cannot crash the process.

Torch-free and import-free (beyond the standard library): `framejit.compile` consults it before importing
the API module.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable

SUPPORTED: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))

_warned = False


def python_version() -> tuple[int, int]:
    """The running CPython's (major, minor) (a function, so that tests can stand in for another one)."""
    return sys.version_info[0], sys.version_info[1]


def unsupported_reason() -> str | None:
    """Why framejit cannot capture on this interpreter, or None when it can."""
    version = python_version()
    if sys.implementation.name != "cpython":
        return f"framejit captures CPython bytecode only; this is {sys.implementation.name}"
    if version not in SUPPORTED:
        names = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED)
        return f"framejit supports CPython {names}; this is {version[0]}.{version[1]}"
    return None


def eager_compile(model: Callable | None = None, *, stacklevel: int = 3, **options: Any):
    """`framejit.compile` on an unsupported interpreter: the model itself (it runs eagerly), after one
    warning per process (`stacklevel`: the user's frame, as seen from the warning call). Used as a decorator
    with or without arguments, as `compile` is."""
    _warn_once(stacklevel)
    if model is None:
        return lambda m: m
    return model


def _warn_once(stacklevel: int) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(f"{unsupported_reason()}: framejit.compile runs every function eagerly (nothing is captured)",
                  RuntimeWarning, stacklevel=stacklevel)


__all__ = ["SUPPORTED", "eager_compile", "python_version", "unsupported_reason"]
