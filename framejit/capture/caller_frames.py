"""`warnings.warn` at a graph break, with its stacklevel counted in the user's frames.

NOTE [Warnings past the hook]: framejit has no frame-evaluation hook, so every compiled frame runs one
Python frame below its caller's: the caller calls the FrameHook, whose `__call__` calls the transformed
function; a resume function is called, through its own hook, by the frame that broke, and stands for the
same user frame. `warnings.warn(msg, stacklevel=2)` (torch's and most libraries' deprecation warnings)
names the frame `stacklevel` levels up, so at a break it named framejit's hook.py instead of the user's
line, and its once-per-location registry (`__warningregistry__` of that frame's globals) was hook.py's,
shared by every call site: a warning shown once per location in eager was shown once in all. The call at
the break is therefore made to `warn` below, which counts levels in user frames: framejit's own frames
are skipped, and the frame that called a resume function is the same user frame as the resume function
(so it is skipped too). The frame at level 1, the transformed function or resume function that makes the
call, carries the user's line (NOTE [The break's line] in graph_break.py). Everything else is CPython's
`warnings.warn`: the same category checks, `warn_explicit` with the same filename, line, module,
registry, and no module globals: CPython's `warn` (do_warn in _warnings.c) passes none, so it never asks
the module's `__loader__` for the source line. Passing the frame's globals did, which called a custom
loader's `get_source` eager never calls, raised IndexError where its source is shorter than the line, and on
3.12 warned 'Module globals is missing a __spec__.loader' for a module whose `__spec__` is None (a script's
`__main__` has one). A frame that runs wholly eagerly (NOTE [Eager frames]) still has the hook's frame
above it: not covered.
"""
from __future__ import annotations

import os
import sys
import types
import warnings


_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_framejit(code: types.CodeType) -> bool:
    return code.co_filename.startswith(_FRAMEJIT_DIR)


def _is_internal(code: types.CodeType) -> bool:
    """CPython's warnings skip the import machinery's frames (`_is_internal_frame`)."""
    return "importlib" in code.co_filename and "_bootstrap" in code.co_filename


def _is_resume(code: types.CodeType) -> bool:
    """A resume function's code, or the transformed code compiled for one (both keep its qualified name:
    NOTE [Resume function names] in resume.py)."""
    return ".<resume at " in getattr(code, "co_qualname", "")


def logical_caller(frame: types.FrameType, skip_file_prefixes: tuple = ()) -> types.FrameType | None:
    """The user frame that called the user frame `frame` stands for (NOTE [Warnings past the hook])."""
    same_frame = _is_resume(frame.f_code)  # a resume function: its caller is the same user frame
    frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        if _is_framejit(code) or _is_internal(code) or code.co_filename.startswith(skip_file_prefixes):
            frame = frame.f_back
            continue
        if same_frame:
            same_frame = _is_resume(code)
            frame = frame.f_back
            continue
        return frame
    return None


def _warn(message, category, stacklevel, source, skip_file_prefixes) -> None:
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    if skip_file_prefixes:
        stacklevel = max(2, stacklevel)
    frame = sys._getframe(2)  # the frame that called `warn` below: the user's, or run_in_blocks (context.py)
    while frame is not None and _is_framejit(frame.f_code):
        frame = frame.f_back
    for _ in range(stacklevel - 1):
        frame = logical_caller(frame, skip_file_prefixes)
        if frame is None:
            break
    if frame is None:
        module_globals, filename, lineno = sys.__dict__, "sys", 1
    else:
        module_globals, filename, lineno = frame.f_globals, frame.f_code.co_filename, frame.f_lineno
    module = module_globals["__name__"] if "__name__" in module_globals else "<string>"
    registry = module_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, filename, lineno, module, registry, None, source)


if sys.version_info >= (3, 12):
    def warn(message, category=None, stacklevel=1, source=None, *, skip_file_prefixes=()):
        """`warnings.warn` as called from the user's frame (NOTE [Warnings past the hook])."""
        _warn(message, category, stacklevel, source, tuple(skip_file_prefixes))
else:
    def warn(message, category=None, stacklevel=1, source=None):
        """`warnings.warn` as called from the user's frame (NOTE [Warnings past the hook])."""
        _warn(message, category, stacklevel, source, ())
