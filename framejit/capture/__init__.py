"""The capture frontend, as the rest of framejit sees it (api.py, cli.py): everything they use is named
here, and nothing else of capture's internals or module-level state is theirs to touch.

- `FrameHook(fn, request)`: the compiled form of a function (hook.py); `CompileRequest`: what one
  `framejit.compile(...)` asks for (requests.py); `module_call`: the function a compiled nn.Module's call
  runs through (module_frame.py).
- Errors: `FramejitError`, `Unsupported`, `GraphBreak` (breaks.py), `BackendCompilerFailed` (backend_call.py),
  `ConstraintViolationError` (shapes.py).
- `reset()`: forget every compiled entry; `disable_code(code)`: never capture that code, and drop the
  entries that relied on it (NOTE [Disable after compiling] in hook.py); `stats()`: the counters and rows
  behind `framejit.stats()`; `eager_frame_count()` / `eager_frames_since(n)`: the frames run wholly
  eagerly (NOTE [Eager frames]); `keep_hooks()`: collect the FrameHooks a block creates (`framejit explain
  SCRIPT`); `DimRange`: a marked dimension's bounds (shapes.py); `call_frame_reader_directly(hook)` /
  `uncall_directly(hook)`: NOTE [Frame readers called directly] (frame_locals.py).
- Tracebacks and module calls: `clean_traceback(exc)` drops framejit's own frames from an exception that
  leaves a compiled call (NOTE [Tracebacks past the hook] in user_tracebacks.py); `stands_for_module_call(code)`
  marks a code whose frame stands for torch's module-call frames; `module_forward` / `module_instance_forward`:
  the functions a compiled module's `forward` attribute runs through, without or with a `forward` set on the
  instance (module_frame.py).

NOTE [Light capture package]: the names are resolved on first use (PEP 562 `__getattr__`), as in
framejit/__init__.py, so importing one submodule (`framejit.capture.normalize`, `.breaks`) does not import
the hook, the frame cache or torch through this package.
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# public name -> the submodule that defines it
_LAZY = {
    "FrameHook": ".hook", "keep_hooks": ".hook", "CompileRequest": ".requests", "module_call": ".module_frame",
    "FramejitError": ".breaks", "GraphBreak": ".breaks", "Unsupported": ".breaks",
    "BackendCompilerFailed": ".backend_call", "DimRange": ".shapes", "ConstraintViolationError": ".shapes",
    "call_frame_reader_directly": ".frame_locals", "uncall_directly": ".frame_locals",
    "module_forward": ".module_frame", "module_instance_forward": ".module_frame",
    "stands_for_module_call": ".user_tracebacks",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def reset() -> None:
    """Forget everything compiled in this process (compiled functions recompile on their next call)."""
    from .hook import reset_all
    reset_all()
    lazy = sys.modules.get(__name__ + ".lazy_generators")
    if lazy is not None:  # NOTE [Generators with finalizers traced lazily]
        lazy.LAZY_CODES.clear()


def disable_code(code: types.CodeType) -> None:
    """Never capture `code` from now on (NOTE [Disable after compiling] in hook.py)."""
    from .breaks import DISABLED
    from .hook import forget_disabled
    DISABLED.add(code)
    forget_disabled(code)


def stats() -> dict[str, Any]:
    """A snapshot of the process-wide counters, the compiled or loaded frames, and the eagerly run ones."""
    from . import eager_frames, python_loop_records
    from .requests import FRAMES, STATS
    return {**STATS, "frames": list(FRAMES), "eager_frames": eager_frames.count(),
            "eager_frame_reasons": eager_frames.snapshot(), "python_loops": python_loop_records.count(),
            "python_loop_reasons": python_loop_records.snapshot()}


def clean_traceback(exc: BaseException) -> None:
    """Drop framejit's own frames from the traceback of an exception leaving a compiled call."""
    from .user_tracebacks import clean
    clean(exc)


def eager_frame_count() -> int:
    from . import eager_frames
    return eager_frames.count()


def eager_frames_since(count: int) -> list[dict]:
    """The frames recorded as run wholly eagerly after the first `count` ({function, location, reason})."""
    from . import eager_frames
    return eager_frames.snapshot()[count:]


__all__ = [*_LAZY, "disable_code", "eager_frame_count", "eager_frames_since", "reset", "stats"]
