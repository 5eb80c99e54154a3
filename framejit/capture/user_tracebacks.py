"""Tracebacks of exceptions leaving compiled code, with the entries eager's has.

NOTE [Tracebacks past the hook]: framejit has no frame-evaluation hook (NOTE [Warnings past the hook] in
caller_frames.py), so an exception raised below compiled code passed framejit's own frames on its way out: the
FrameHook's `__call__` and `miss` above every compiled frame and every callee called at a break,
`call_through_hook`, a ModuleCall, a compiled module's `__call__`; and a frame that broke was two entries, the
transformed function (or resume function) at the line of the break calling its resume function, then the
resume function at the line that raised. `traceback.extract_tb(e.__traceback__)` of `raise KeyError` two calls
below a break listed 10 entries where eager lists 3 (`f`, `helper`, `callee`), and a formatted traceback named
hook.py six times. Each of those framejit frames now catches what leaves it (`except Exception`: zero cost when
nothing is raised), rewrites the exception's `__traceback__` (`user_traceback`) and re-raises it with a bare
`raise`, which CPython does without adding the re-raising frame (do_raise's re-raise goes straight to the
unwinding), so the entry of the frame that catches is gone too. The rewrite drops every entry of framejit's
own code (its package directory), then every entry of a user frame whose next entry is a resume function of
the same code or the frame made for a frame reader's call (NOTE [User frames for readers in resume
functions]): that frame only called its continuation, which stands for the same user frame at the line eager
shows. The chain is rebuilt from the first change on (new traceback objects; the exception's old ones are not
mutated) and an exception whose entries are all kept keeps its traceback object. The frame of a kept resume
entry is the resume function's (its locals are the live ones: NOTE [Locals of a frame in a traceback]).
A frame that stands for torch's levels of a module call (`Module._wrapped_call_impl`, `_call_impl`: a
ModuleCall's, a compiled module's `__call__`; and `inner` too for module_hooks.py's copies of `_call_impl`,
NOTE [Module calls past the hook]) is those entries at eager's lines, in frames made for them
(mappings_runtime.made_frame: no locals), made once where a compiled module's `__call__` and the ModuleCall
below it stand for the same call. Not covered: an exception raised inside a graph keeps the graph module's
frames (graphs that fail rerun eagerly: NOTE [Graph failures rerun eagerly]); a framejit frame other than those
above keeps its entry until a hook above it rewrites the traceback (a handler between them sees it); framejit's
own internal errors lose framejit's entries too; made entries carry no column positions (no `^^^` marks).
"""
from __future__ import annotations

import os
import re
import types
import weakref

_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MODULE_HOOKS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_hooks.py")
_RESUME = ".<resume at "

# codes made for a frame reader's call (user_frames._user_frame_code), by id (a code holding a dict constant
# is unhashable): they stand for the frame above them
_READER_CODES: dict[int, weakref.ref] = {}


def add_reader_code(code: types.CodeType) -> None:
    key = id(code)
    _READER_CODES[key] = weakref.ref(code, lambda _, key=key: _READER_CODES.pop(key, None))


def _reader_code(code: types.CodeType) -> bool:
    ref = _READER_CODES.get(id(code))
    return ref is not None and ref() is code


def _hidden(code: types.CodeType) -> bool:
    return code.co_filename.startswith(_FRAMEJIT_DIR) or id(code) in _MODULE_CALLS


_MADE = re.compile(r"(\.<(resume at \d+|framejit|graph_error)>)+$")  # codegen.make_function, resume.py


def _base(code: types.CodeType) -> str:
    """The qualified name of the user's code that `code` was made for."""
    return _MADE.sub("", getattr(code, "co_qualname", code.co_name))


def _continued_by(t: types.TracebackType, below: types.TracebackType) -> bool:
    """The frame of `below` (the next kept entry) is a resume function of the user frame `t` names, or the
    frame made for a reader's call in it, called by `t`'s frame through framejit's frames only: the entry of `t`
    is not one of eager's."""
    code, called = t.tb_frame.f_code, below.tb_frame.f_code
    if not (_resume_of(called, code) or _reader_code(called) and _base(called) == _base(code)):
        return False
    # f_back is kept by a finished frame that has a frame object (a traceback's have); a resume function of the
    # same code on the way stands for the same user frame (its entry was dropped by a hook below)
    caller = below.tb_frame.f_back
    for _ in range(32):
        if caller is None or caller is t.tb_frame or not (_hidden(caller.f_code) or _resume_of(caller.f_code, code)):
            break
        caller = caller.f_back
    return caller is t.tb_frame


def _resume_of(called: types.CodeType, code: types.CodeType) -> bool:
    return _RESUME in getattr(called, "co_qualname", "") and called.co_filename == code.co_filename and \
        _base(called) == _base(code)


# ids of the codes whose frames stand for torch's Module._wrapped_call_impl and _call_impl (ModuleCall.__call__,
# a compiled module's __call__: NOTE [Module calls past the hook] in caller_frames.py); their functions live on
_MODULE_CALLS: set[int] = set()


def stands_for_module_call(code: types.CodeType) -> None:
    _MODULE_CALLS.add(id(code))


def _torch_levels(t: types.TracebackType) -> list | None:
    """The levels of torch's module call (outermost first) the frame of `t` stands for; None: not such a frame."""
    code = t.tb_frame.f_code
    if id(code) not in _MODULE_CALLS and code.co_filename != _MODULE_HOOKS_FILE:
        return None
    from .caller_frames import _hooked_call_levels, _module_call_levels
    if id(code) in _MODULE_CALLS:
        return list(reversed(_module_call_levels())) if t.tb_next is not None else []
    return list(reversed(_hooked_call_levels(t.tb_lineno)))


def _torch_code(name: str) -> types.CodeType | None:
    import torch
    codes = [torch.nn.Module._wrapped_call_impl.__code__, torch.nn.Module._call_impl.__code__]
    codes += [c for c in codes[1].co_consts if isinstance(c, types.CodeType)]
    return next((c for c in codes if c.co_name == name), None)


def _made_levels(levels: list) -> list[types.TracebackType]:
    """Entries for `levels` of torch's module call, in frames made for them (no locals)."""
    from .mappings_runtime import made_frame
    out = []
    for level in levels:
        code = _torch_code(level.name)
        if code is not None:
            frame = made_frame(code.co_name, code.co_qualname, code.co_filename, code.co_firstlineno,
                               level.globals.get("__name__"))
            out.append(types.TracebackType(None, frame, -1, level.lineno))
    return out


def _made_torch_entry(t: types.TracebackType) -> bool:
    code = t.tb_frame.f_code
    return code.co_filename == _module_file() and code is not _torch_code(code.co_name)


def _module_file() -> str:
    import torch
    return torch.nn.Module._call_impl.__code__.co_filename


# NOTE [framejit's own errors keep their frames]: an exception raised by framejit's own code (an internal error
# at run time, a fullgraph or argument error) keeps every entry: dropping framejit's frames left only the user's
# call line and a message with no location (review revN N7). Only exceptions raised below, in the user's code
# or in torch, are rewritten to eager's entries.
def user_traceback(tb: types.TracebackType | None,
                   tail: types.TracebackType | None = None) -> types.TracebackType | None:
    """`tb` with the entries eager's traceback has (NOTE [Tracebacks past the hook]); `tail`: an entry of `tb`
    from which on it was cleaned already (NOTE [Tracebacks cleaned level by level])."""
    entries = []
    while tb is not None and tb is not tail:
        entries.append(tb)
        tb = tb.tb_next
    if tail is None and entries and entries[-1].tb_frame.f_code.co_filename.startswith(_FRAMEJIT_DIR):
        return entries[0]  # NOTE [framejit's own errors keep their frames]
    kept: list = []
    for k, t in enumerate(entries):
        levels = _torch_levels(t)
        if levels is not None:
            below = next((u for u in entries[k + 1:] if not _hidden(u.tb_frame.f_code)), tail)
            if not (below is not None and _made_torch_entry(below)):  # a stand-in below already made them
                kept += _made_levels(levels)
        elif not _hidden(t.tb_frame.f_code):
            kept.append(t)
    kept = [t for t, below in zip(kept, kept[1:] + [tail]) if below is None or not _continued_by(t, below)]
    if len(kept) == len(entries) and all(k is e for k, e in zip(kept, entries)):  # (made entries can be as many)
        return entries[0] if entries else tail
    same = 0  # the longest tail of `entries` kept as it is is shared; new objects above it
    while same < len(kept) and kept[-1 - same] is entries[-1 - same]:
        same += 1
    chain = kept[len(kept) - same] if same else tail
    for t in reversed(kept[:len(kept) - same]):
        chain = types.TracebackType(chain, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return chain


# NOTE [Tracebacks cleaned level by level]: an exception leaving N nested compiled calls (a recursive compiled
# function) is cleaned by each of their hooks on its way out, and each rewrote the whole traceback below it:
# quadratic (a raise at depth 800 took 830 ms, 68 in eager; review revN N3). Below the entries the exception
# gained since the last clean, its traceback is the chain that clean made, so only those new entries are
# looked at. The last clean is remembered by ids only: an exception or traceback kept alive here would keep
# its frames, and their tensors, alive after the user dropped it (a batch-size finder that catches an
# out-of-memory error and retries smaller must get that memory back). The ids are trusted only for the same
# exception object, whose chain holds an entry of that id on the same frame at the same instruction; an
# address reused by another exception gives that only for an entry at the same place in the same frame.
_LAST = (0, 0, 0, -1)  # ids of the exception last cleaned, of the head of its chain and its frame; its tb_lasti


def _cleaned_tail(exc: BaseException, tb: types.TracebackType | None) -> types.TracebackType | None:
    """The entry of `tb` from which on the last clean of `exc` left it, or None."""
    exc_id, head_id, frame_id, lasti = _LAST  # one read: another thread may clean at the same time
    if exc_id != id(exc):
        return None
    while tb is not None and id(tb) != head_id:
        tb = tb.tb_next
    return tb if tb is not None and id(tb.tb_frame) == frame_id and tb.tb_lasti == lasti else None


def _innermost(tb: types.TracebackType) -> types.TracebackType:
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def clean(exc: BaseException) -> None:
    """Rewrite `exc.__traceback__` in place before a bare `raise` re-raises it."""
    global _LAST
    tb = exc.__traceback__
    try:
        tail = _cleaned_tail(exc, tb)
        new = user_traceback(tb, tail)
        own = tail is None and tb is not None and _innermost(tb).tb_frame.f_code.co_filename.startswith(_FRAMEJIT_DIR)
    except Exception:  # never in the way of the user's exception
        _LAST = (0, 0, 0, -1)
        return
    # NOTE [Tracebacks cleaned level by level]; framejit's own errors are never rewritten (no tail for them)
    _LAST = (0, 0, 0, -1) if own or new is None else (id(exc), id(new), id(new.tb_frame), new.tb_lasti)
    if new is not tb:
        exc.__traceback__ = new
