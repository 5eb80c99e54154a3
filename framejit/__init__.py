"""framejit: a just-in-time compiler frontend for PyTorch.

Public API only; see api.py for the implementations and DESIGN.md for the architecture.
"""
from .api import (
    FramejitError,
    Unsupported,
    compile,
    disable,
    explain,
    mark_dynamic,
    reset,
    stats,
)
from .backends.registry import list_backends, lookup_backend, register_backend
from .logs import set_logs

__version__ = "0.1.0"

__all__ = [
    "FramejitError", "Unsupported", "compile", "disable", "explain", "list_backends", "lookup_backend",
    "mark_dynamic", "register_backend", "reset", "set_logs", "stats", "__version__",
]
