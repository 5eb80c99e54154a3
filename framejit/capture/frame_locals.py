"""Frames that read their own local namespace run eagerly.

NOTE [Frames that read their locals]: `locals()`, `vars()` and `dir()` without arguments, and `eval` /
`exec` without their own namespaces, read the calling frame's local variables. A traced frame keeps
only what it needs: a local that nothing reads later is never stored, and code after a graph break runs
in a resume function whose locals are the live values (plus its own helpers). So `len(locals())` after
`a = 1` gave 1 where eager gives 2, `eval("a + 1")` raised NameError, and `locals()` after a break listed
the resume function's names (red team 6). A root frame whose code names one of these builtins (and does
not define it as a global of its own) runs wholly eagerly; a callee inlined into a traced frame is not
concerned (its call runs the builtin at a break, in its own frame).

NOTE [Frames read through the frame stack]: `sys._getframe(n)`, `inspect.currentframe()` / `.f_back`,
`inspect.stack()` / `getouterframes`, `traceback.extract_stack()` / `print_stack()` and a frame's
`f_locals` / `f_lineno` reach the real frames. Traced, the user's frame is the transformed function or
a resume function, whose locals are only what the graph's break needs (a dead local is never stored)
and whose lines are not the user's, and an inlined callee has no frame at all: `helper()` reading
`sys._getframe(1).f_locals["y"]` raised KeyError where eager returns y (issue 11). A root frame whose
code names one of these, or whose trace reaches such a callee (inlined at any depth), therefore runs
wholly eagerly: its own code in its own frame, every local under its own name, callees called as
Python. logging's own code (`Logger.findCaller`) is left to NOTE [Callees that read their caller's
frame] in graph_break.py. Not covered: the frames above a compiled function's frame are framejit's
hook frames (no frame-evaluation hook), so `sys._getframe().f_back` in it names hook.py, not its caller
(but see NOTE [Frame readers called directly]).

NOTE [Frame readers called directly]: a function compiled by `framejit.compile(fn)` whose own code reads
the frame stack always runs wholly eagerly (above), yet it ran one FrameHook.__call__ (and on a miss one
`miss`) frame below its caller: `sys._getframe(1).f_code.co_name` answered 'miss', then '__call__' where
eager answers the caller's name, and `len(inspect.stack())` / `traceback.extract_stack()` counted 2 or 1
frames more (red team h12red3). Unless fullgraph=True (which raises at the first call), such a hook gets a
class of its own whose `__call__` is the function itself (a staticmethod: CPython's call slot calls it with
no Python frame between), so the function's frame is called by its caller's frame as in eager. The hook
keeps its attributes; explain() puts the hook's class back to report the break. A later `fn.__code__ = ...`
runs the new code eagerly too.
"""
from __future__ import annotations

import builtins
import dis
import logging
import types
import typing

from .breaks import BreakKind, Unsupported

_READERS = frozenset({"locals", "vars", "dir", "eval", "exec"})
_NEED_NO_ARGS = frozenset({"vars", "dir"})  # with an argument, they read that object only


def reads_own_locals(fn: types.FunctionType) -> str | None:
    """The builtin through which `fn`'s code may read its own locals, or None."""
    code = fn.__code__
    if not _READERS.intersection(code.co_names):
        return None
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL", "PUSH_NULL")]
    for k, inst in enumerate(instructions):
        name = inst.argval if inst.opname in ("LOAD_GLOBAL", "LOAD_NAME") else None
        if name not in _READERS or name in fn.__globals__ or getattr(builtins, name, None) is None:
            continue
        following = instructions[k + 1] if k + 1 < len(instructions) else None
        if name in _NEED_NO_ARGS and not (following is not None and following.opname == "CALL"
                                          and following.arg == 0):
            continue
        return name
    return None


_FRAME_READERS = frozenset({"_getframe", "currentframe", "getouterframes", "getinnerframes", "f_back", "f_locals",
                            "extract_stack", "print_stack", "format_stack", "walk_stack"})


def reads_frames(code: types.CodeType) -> bool:
    """Whether `code` may read the frame stack (NOTE [Frames read through the frame stack])."""
    names = code.co_names
    return not _FRAME_READERS.isdisjoint(names) or ("stack" in names and "inspect" in names)  # not torch.stack


def frame_reader_break(code: types.CodeType) -> Unsupported | None:
    """The whole-frame break for a root frame or inlined callee whose code reads frames, or None."""
    # logging keeps its handling at graph breaks; typing._caller reads only the module name of the frame that
    # makes a TypeVar (f_globals['__name__'], the same in the trace), as a PEP 695 generic function does
    if code.co_filename in (logging.__file__, typing.__file__) or not reads_frames(code):
        return None
    e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(code, 'co_qualname', code.co_name)} reads the frame "
                    "stack (sys._getframe, inspect, traceback): the frame runs eagerly")
    e.frame_eager = True
    return e


def call_frame_reader_directly(hook) -> None:
    """NOTE [Frame readers called directly]: `hook` (a FrameHook made by framejit.compile) calls its function
    with no frame of its own when that function's code reads the frame stack."""
    fn = hook.fn
    if hook.request.fullgraph or frame_reader_break(fn.__code__) is None:
        return
    base = type(hook)
    hook.__class__ = type(base.__name__, (base,), {"__call__": staticmethod(fn), "__module__": base.__module__,
                                                   "__qualname__": base.__qualname__, "calls_directly": True})


def uncall_directly(hook) -> None:
    """Undo call_frame_reader_directly (explain() traces the frame to report its break)."""
    if type(hook).__dict__.get("calls_directly"):
        hook.__class__ = type(hook).__mro__[1]


__all__ = ["call_frame_reader_directly", "frame_reader_break", "reads_frames", "reads_own_locals", "uncall_directly"]
