"""`warnings.warn` and logging calls at a graph break, with their stacklevel counted in the user's frames.

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

NOTE [Module calls past the hook]: in eager, `module(x)` runs `forward` two frames below the caller:
torch's `Module._wrapped_call_impl` and `Module._call_impl` (torch/nn/modules/module.py), so
`warnings.warn(msg, stacklevel=2)` in a forward names module.py's `return forward_call(*args, **kwargs)`
line (and its registry is module.py's), stacklevel=3 `_wrapped_call_impl`'s line, and stacklevel=4 the
caller of the module. A compiled module's forward, and a module called at a break, is called through its
frame hook instead (`compiled_module(x)` -> module_call -> forward's hook), which has no such frames: the
warning named the caller two levels too early and ran out of stack ('sys', 1) at stacklevel 4. Such calls
go through a `ModuleCall` (Hooks.module_forward), whose frame on the stack stands for those two levels:
the walk yields them (module.py's file, lines, names and globals) where it passes one. A module with hooks
is called at a break through `call_with_hooks` / `call_with_backward_hooks` (module_hooks.py, NOTE [Module
hooks]), framejit's copies of `_call_impl`; eager has three levels there: `_wrapped_call_impl`, `_call_impl`
at its `return inner()` and `inner` at the line that calls the pre-hook, forward or forward hook. The
innermost module_hooks.py frame the walk passes is at the line of its call (NOTE [The break's line]); that
line's call (one per line there) names the line of `inner`'s matching call (`_HOOKED_CALLS`).

NOTE [Logging past the hook]: logging's calls (Logger.debug ... log, LoggerAdapter's, logging.warning ...)
name their caller through `Logger.findCaller`, which walks real frames, skipping only logging's own; with
`stacklevel=2` at a break it named hook.py's `miss`/`__call__`. Such a call at a break is made to `log`
below: it finds the level the call names with the same walk as `warn` (logging's rule where the stack runs
out: the outermost frame), and makes the call, with stacklevel=1, from a frame whose code carries that
level's file name, line and function name (`_caller_as`), so the record's pathname, lineno and funcName
are eager's. With `stack_info=True` the stack text still lists framejit's frames above that one.
"""
from __future__ import annotations

import functools
import itertools
import os
import sys
import types
import warnings
from typing import Any, Iterator, NamedTuple

from .user_tracebacks import stands_for_module_call


_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class Level(NamedTuple):
    """One level of the user's call stack: a real frame's, or one that a ModuleCall stands for."""
    filename: str
    lineno: int
    name: str
    globals: dict


class ModuleCall:
    """`hook(module, *args, **kwargs)` in place of `module(*args, **kwargs)` (NOTE [Module calls past the
    hook]): its frame stands for torch's Module._wrapped_call_impl and Module._call_impl."""
    __slots__ = ("hook",)

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.hook(*args, **kwargs)
        except Exception as e:
            from .user_tracebacks import clean
            clean(e)  # NOTE [Tracebacks past the hook] in user_tracebacks.py
            raise


class ResumeModuleCall(ModuleCall):
    """A module-called resume function Rk (`hook`: the plain function) as R(k-1)'s code calls it (NOTE [Nested
    breaks through module calls] in nested_breaks.py): where R(k-1) runs as Python its frame stands for torch's
    levels as a ModuleCall's does; a trace of R(k-1) inlines Rk itself (handlers/stack.py LOAD_CONST), and a
    routed eager run calls Rk through its hook in a ModuleCall (python_loops.make_call_hooked)."""
    __slots__ = ()


def _is_framejit(code: types.CodeType) -> bool:
    return code.co_filename.startswith(_FRAMEJIT_DIR)


def _is_internal(code: types.CodeType) -> bool:
    """CPython's warnings skip the import machinery's frames (`_is_internal_frame`)."""
    return "importlib" in code.co_filename and "_bootstrap" in code.co_filename


def _is_resume(code: types.CodeType) -> bool:
    """A resume function's code, or the transformed code compiled for one (both keep its qualified name:
    NOTE [Resume function names] in resume.py)."""
    return ".<resume at " in getattr(code, "co_qualname", "")


def _user_function(code: types.CodeType) -> tuple[str, str]:
    """(file, qualified name) of the user function a resume function's or transformed code stands for."""
    name = getattr(code, "co_qualname", code.co_name)
    name = name.split(".<resume at ", 1)[0]
    while name.endswith((".<framejit>", ".<step>")):
        name = name.rsplit(".<", 1)[0]
    return code.co_filename, name


def _line_of(function: types.FunctionType, text: str) -> int:
    """The line of `function`'s source that starts with `text` (its first line if none does)."""
    import inspect
    code = function.__code__
    try:
        lines, start = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return code.co_firstlineno
    for offset, line in enumerate(lines):
        if line.strip().startswith(text):
            return start + offset
    return code.co_firstlineno


@functools.lru_cache(maxsize=None)
def _module_call_levels() -> tuple[Level, Level]:
    """The two levels eager has between a module's caller and its forward, innermost first."""
    import torch
    module_globals = sys.modules[torch.nn.Module.__module__].__dict__
    call_impl, wrapped = torch.nn.Module._call_impl, torch.nn.Module._wrapped_call_impl
    return (Level(call_impl.__code__.co_filename, _line_of(call_impl, "return forward_call("), "_call_impl",
                  module_globals),
            Level(wrapped.__code__.co_filename, _line_of(wrapped, "return self._call_impl("), "_wrapped_call_impl",
                  module_globals))


# (the call on a line of module_hooks.py, the start of the line of Module._call_impl's `inner` making it)
_HOOKED_CALLS = (("hook(module, args, kwargs, result)", "hook_result = hook(self, args, kwargs, result)"),
                 ("hook(module, args, result)", "hook_result = hook(self, args, result)"),
                 ("hook(module, args, kwargs)", "args_kwargs_result = hook(self, args, kwargs)"),
                 ("hook(module, args)", "args_result = hook(self, args)"),
                 ("module.forward(", "result = forward_call("))


@functools.lru_cache(maxsize=None)
def _hooked_call_levels(lineno: int) -> tuple[Level, ...]:
    """The three levels eager has between a module's caller and the pre-hook, forward or forward hook that
    the module_hooks.py line `lineno` calls, innermost first; () where they cannot be named."""
    import inspect
    import linecache
    import torch
    from . import module_hooks
    text = linecache.getline(module_hooks.__file__, lineno)
    eager_start = next((eager for ours, eager in _HOOKED_CALLS if ours in text), None)
    call_impl = torch.nn.Module._call_impl
    try:
        lines, start = inspect.getsourcelines(call_impl)
    except (OSError, TypeError):
        return ()
    stripped = [line.strip() for line in lines]
    inner = next((start + i for i, line in enumerate(stripped) if eager_start and line.startswith(eager_start)), None)
    returns = next((start + i + 1 for i, line in enumerate(stripped[:-1])
                    if line == "try:" and stripped[i + 1] == "return inner()"), None)
    if inner is None or returns is None:
        return ()
    filename, module_globals = call_impl.__code__.co_filename, call_impl.__globals__
    return (Level(filename, inner, "inner", module_globals), Level(filename, returns, "_call_impl", module_globals),
            _module_call_levels()[1])


def _level(frame: types.FrameType) -> Level:
    return Level(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, frame.f_globals)


def _logical_caller(frame: types.FrameType, skip_file_prefixes: tuple) -> tuple[types.FrameType | None, tuple]:
    """(the user frame that called the user frame `frame` stands for, the levels of torch's module call
    between them: NOTE [Module calls past the hook]).

    NOTE [Resume functions called by another frame's]: a resume function's caller is the same user frame
    (the transformed function, or an earlier resume function of it), except in a nested break
    (nested_breaks.py): there R(k)'s prologue calls R(k+1), the resume function of the frame F(k) called,
    so a caller standing for another user function is the logical caller. Without this a logging or
    warnings call with stacklevel 2 in R(k+1) named the line that called the compiled function."""
    same_frame = _is_resume(frame.f_code)  # a resume function: its caller is the same user frame
    user = _user_function(frame.f_code)
    module_call: tuple | None = None
    frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        if module_call is None and code is _MODULE_CALL_CODE:
            module_call = _module_call_levels()
        elif module_call is None and code.co_filename == _MODULE_HOOKS_FILE:
            module_call = _hooked_call_levels(frame.f_lineno)
        if _is_framejit(code) or _is_internal(code) or code.co_filename.startswith(skip_file_prefixes):
            frame = frame.f_back
            continue
        if same_frame and _user_function(code) != user:
            return frame, module_call or ()  # NOTE [Resume functions called by another frame's]
        if same_frame:
            same_frame = _is_resume(code)
            frame = frame.f_back
            continue
        return frame, module_call or ()
    return None, module_call or ()


def levels_above(frame: types.FrameType, skip_file_prefixes: tuple = ()) -> Iterator[Level]:
    """Levels 2, 3, ... of the user's stack above the user frame `frame` stands for (level 1)."""
    while frame is not None:
        frame, module_call = _logical_caller(frame, skip_file_prefixes)
        yield from (level for level in module_call if not level.filename.startswith(skip_file_prefixes))
        if frame is not None:
            yield _level(frame)


def _user_frame(frame: types.FrameType) -> types.FrameType:
    """The frame at level 1: `frame`, or the first one above framejit's (run_in_blocks in context.py)."""
    while frame is not None and _is_framejit(frame.f_code):
        frame = frame.f_back
    return frame


def _warn(message, category, stacklevel, source, skip_file_prefixes) -> None:
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    if skip_file_prefixes:
        stacklevel = max(2, stacklevel)
    frame = _user_frame(sys._getframe(2))  # the frame that called `warn` below
    level = None if frame is None else _level(frame)
    if level is not None and stacklevel > 1:
        level = next(itertools.islice(levels_above(frame, skip_file_prefixes), stacklevel - 2, None), None)
    if level is None:
        module_globals, filename, lineno = sys.__dict__, "sys", 1
    else:
        module_globals, filename, lineno = level.globals, level.filename, level.lineno
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


_LOGGING_CALLS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})


def logging_call(fn: Any) -> bool:
    """A method of logging's Logger or LoggerAdapter, or logging's module function, that makes a record
    (NOTE [Logging past the hook])."""
    import logging
    code = getattr(fn, "__code__", None)  # an object answering every attribute (an FX Proxy) has no code
    return type(code) is types.CodeType and code.co_filename == logging.__file__ and code.co_name in _LOGGING_CALLS


def log(method, /, *args, **kwargs):
    """`method(*args, **kwargs)`, a logging call, as made from the user's frame (NOTE [Logging past the
    hook])."""
    stacklevel = kwargs.get("stacklevel", 1)
    frame = _user_frame(sys._getframe(1))
    if frame is None or not isinstance(stacklevel, int) or stacklevel < 1:
        return method(*args, **kwargs)  # logging's own answer (its own frame for stacklevel < 1)
    level = _level(frame)
    for level in itertools.islice(levels_above(frame), stacklevel - 1):
        pass  # where the stack runs out, logging names the outermost frame
    return _caller_as(level)(method, *args, **{**kwargs, "stacklevel": 1})


# NOTE [Caller-naming calls in tail functions]: a tail function (NOTE [Breaks inside try blocks] in
# graph_break.py, [Loops run as Python] in python_loops.py) runs part of the user's frame as plain Python,
# called by the transformed function, which stands for the same user frame, below hook.py's frames. A
# `warnings.warn(msg, stacklevel=2)` or `log.warning(msg, stacklevel=2)` made there by CPython's own code
# named the transformed function at the break's line (the `raise` before an except handler, a loop's head)
# where eager names the user's caller (review A F1: an except handler with a print in it), and a user
# callee's `warnings.warn(msg, stacklevel=3)` did the same. Every call in a tail function (a loop's body
# only, for a loop's; python_loops.route_calls) now calls `route(callable)`'s answer (make_call_hooked):
# `tail_callee` below first (`warn` above for warnings.warn, `log` for a logging call), then a user
# function through its frame hook as in loops, whose own calls at breaks count their levels here. One more
# Python call per call made there. Not covered: torch's or the standard library's functions called there
# that warn with stacklevel 3 or more, and callees run wholly eagerly.
def tail_callee(target: Any) -> Any:
    """What a call in a tail function calls instead of `target` when it names its caller, or `target`
    (NOTE [Caller-naming calls in tail functions])."""
    if target is warnings.warn:
        return warn
    if logging_call(target):
        return functools.partial(log, target)
    return target


_TEMPLATE = compile("def caller(__call, /, *args, **kwargs): return __call(*args, **kwargs)", "<framejit>", "exec")
_CALLER_CODE = next(c for c in _TEMPLATE.co_consts if isinstance(c, types.CodeType))
_CALLERS: dict[tuple, types.FunctionType] = {}


def _caller_as(level: Level) -> types.FunctionType:
    """A function that calls its first argument from a frame with the level's file name, line, function name
    and globals (what a warning raised in the call, Logger.warn's, reads)."""
    key = (level.filename, level.lineno, level.name, id(level.globals))
    caller = _CALLERS.get(key)
    if caller is None or caller.__globals__ is not level.globals:
        if len(_CALLERS) >= 4096:
            _CALLERS.clear()
        code = _CALLER_CODE.replace(co_filename=level.filename, co_name=level.name, co_qualname=level.name,
                                    co_firstlineno=max(level.lineno or 1, 1))
        caller = _CALLERS[key] = types.FunctionType(code, level.globals)
    return caller


_MODULE_CALL_CODE = ModuleCall.__call__.__code__
stands_for_module_call(_MODULE_CALL_CODE)  # NOTE [Tracebacks past the hook] in user_tracebacks.py
_MODULE_HOOKS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_hooks.py")
