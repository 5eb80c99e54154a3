"""Resume functions called with their arguments handed over, so objects die where eager's die.

NOTE [Arguments handed to resume functions]: at a graph break eager's frame holds its live locals in one
place, its own slots: `y = x * 2; r = weakref.ref(y); print(); del y` frees y at the `del`. Compiled, the
code after the break runs in a resume function called by the transformed function, and every frame on the
way held the same objects: the transformed function's slots (its arguments, `___graph_out` with the graph's
outputs, `___pre0`, `___result0`), its value stack (CPython keeps a call's arguments there until the call
returns, unless the callee is a plain Python function: 3.11+ then moves them into the new frame), and the
FrameHook's `__call__(*args)`, whose tuple lives for the whole call. So `r() is None` answered False where
eager answers True, a `weakref.finalize` or `__del__` ran after the function returned, not at the `del`.
Now the tail call of a transformed function into a hooked resume function (graph_break._resume) loads
the constant `caller(hook, n)`, a plain function of n parameters made once per hook and arity, and, after
loading the arguments, `release_locals` marks the place where make_function sets every fast local of the transformed
function to None and deletes it (nothing reads them after the call: RETURN_VALUE follows). The plain
function moves its parameters into a list (its slots deleted), picks the entry as FrameHook.__call__ does
(guards; the miss path traces with a tuple of them that dies with the trace), and calls the entry's
function with `box.pop()` for each argument: values on its stack only, which CPython moves into the resume
function's frame. A graph that fails reruns the frame eagerly or makes its early effects (NOTE [Graph
failures rerun eagerly], NOTE [Effects before a failing graph]); both need the arguments, which are read
back from the failed frame in the traceback (the graph call comes first, before any of them is stored
again; an entry whose code stores one earlier, or takes cells, `*args` or keywords, is called as before,
holding them). Anything the plain path does not model (compile disabled, the TorchScript tracer, `__code__`
or defaults reassigned) calls the hook itself, as before. Not covered: the top-level call of a compiled
function (the FrameHook object is no plain function: its caller's stack holds the arguments, which eager's
caller also holds unless it passed a temporary), try-block trampolines and loops run as Python (their frame
is the user's own code), and tail functions' callees.
"""
from __future__ import annotations

import dis
import functools
import os
import sys
from typing import Any

from bytecode import CellVar, FreeVar, Instr, TryBegin

from .. import config
from .breaks import DISABLED, fx_tracing
from .op_warnings import rerun_without
from .user_tracebacks import clean as clean_traceback
from torch._C import _is_tracing as jit_tracing


def release_locals() -> None:
    """A marker constant (never called): make_function clears the fast locals where it is loaded."""


def release_marker() -> list:
    """Where make_function clears the fast locals (expand_release)."""
    return [Instr("LOAD_CONST", release_locals), Instr("POP_TOP")]


def caller(hook: Any, n: int):
    """The plain function of `n` parameters that calls `hook`'s entry with them handed over; made once per
    hook and arity, and loaded by the transformed code as a constant (NOTE [The handed call's hit path])."""
    made = hook.__dict__.get("_handed")
    if made is None:
        made = hook._handed = {}
    fn = made.get(n)
    if fn is None:
        fn = made[n] = _template(n)(hook, _select, _failed, clean_traceback, rerun_without, config, jit_tracing,
                                    sys._getframe, _PSEUDO_FILE, Bounce)
        fn.__framejit_handed__ = (hook, n)  # persisted_code describes it by these (NOTE [Persisted handed calls])
    return fn


# NOTE [The handed call's hit path]: the plain function runs on every call of a function with a break, so its
# common case is written into it: compiling is on, the hooked function's code and defaults are the entries',
# and the first entry's guard passes (an entry that reruns after a failing graph: once `_arguments_in_frame`
# found its arguments in its frame); then it calls the entry's function with the arguments popped from the
# box. Anything else (another entry, a miss, the plain path not modelled) goes through `_select` as before.
# The template is compiled under a pseudo file name, so stacks do not show lines of this module for its frame
# (review revF LOW-1); the name lies in framejit's directory, so the frame stays hidden from tracebacks and
# warnings' stack levels (user_tracebacks._hidden, op_warnings). Transformed code loads the made function
# itself (graph_break._load_resume_callee);
# NOTE [Persisted handed calls] in persisted_code.py makes it again when that code is loaded from the cache.
_PSEUDO_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "<framejit resume call>")


# NOTE [Tail calls bounced to a driver]: every tail call into a resume function nested one more pair of frames
# (the plain function below and the resume function's transformed function) under the caller's, which stayed on
# the stack until the chain returned. A loop stepped in Python (NOTE [Loops carried across breaks]) tail-calls its
# body's resume function, which tail-calls the step's, once per iteration: 1,200 steps raised RecursionError into
# the user's program (/tmp/revAG/deep2.py). So the plain function looks at who called it: a transformed function
# (its caller, the call in its tail position: RETURN_VALUE follows, no handler around it) that was itself called
# by such a plain function (a "driver", known by the pseudo file name its code carries) does not call the entry:
# it returns a `Bounce` (the `bounced` function of the same hook and arity, and the box of arguments), which its
# caller returns to the driver, and the driver calls `bounced(box)` in a loop. `bounced` is the same call without
# the check, and returns a Bounce it gets to the loop, so the stack stays at driver, bounced, transformed
# function, whatever the number of steps. The arguments stay in the box (no frame holds them), each entry's
# graph failure is handled by its own call as before (`failed` with that hook and entry), and a Bounce never
# reaches other code: only a driver's call of an entry's function receives one.
class Bounce:
    """A tail call into a resume function, handed to the driver below (NOTE above)."""

    __slots__ = ("go", "box")

    def __init__(self, go: Any, box: list) -> None:
        self.go, self.box = go, box


@functools.lru_cache(maxsize=None)
def _template(n: int):
    names = [f"a{i}" for i in range(n)]
    params = ", ".join(names)
    lines = ["def make(hook, select, failed, clean, rerun, config, jit_tracing, getframe, pseudo, Bounce):",
             f"    def call({params}):",
             f"        box = [{', '.join(reversed(names))}]"]
    if n:
        lines.append(f"        del {params}")
    lines += ["        up = getframe(1)",
              "        if up.f_back is not None and up.f_back.f_code.co_filename == pseudo and \\",
              "                not up.f_code.co_exceptiontable:",
              "            del up",
              "            return Bounce(bounced, box)",
              "        del up"]
    lines += _entry_call_lines(n, ["                result = fn(%s)" % ", ".join(["box.pop()"] * n)],
                               ["            else:",
                                "                del fn, entry",
                                "                while type(result) is Bounce:",
                                "                    go, box = result.go, result.box",
                                "                    result = go(box)",
                                "                return result"])
    lines += ["    def bounced(box):"]
    lines += _entry_call_lines(n, ["                return fn(%s)" % ", ".join(["box.pop()"] * n)], [])
    lines += ["    return call"]
    namespace: dict = {}
    exec(compile("\n".join(lines) + "\n", _PSEUDO_FILE, "exec"), namespace)  # noqa: S102 - fixed template
    return namespace["make"]


def _entry_call_lines(n: int, call: list, after: list) -> list:
    """The body of the plain function: pick the entry (NOTE [The handed call's hit path]), call it with the
    arguments popped from `box` (`call`, then `after` as the try's else), rerun eagerly when its graph failed."""
    in_order = ", ".join(f"box[{n - 1 - i}]" for i in range(n))
    return ["        try:",
            "            f, entries = hook.fn, hook.entries",
            "            entry = entries[0] if entries and not config.disable and f.__code__ is hook.code and \\",
            "                f.__defaults__ is hook.defaults[0] and f.__kwdefaults__ is hook.defaults[1] and \\",
            "                not jit_tracing() else None",
            "            del f, entries",
            "            fn = None",
            "            if entry is not None and (entry.rerun is None and entry.on_graph_error is None or \\",
            "                                      entry.__dict__.get('_args_in_frame')):",
            "                try:",
            f"                    hit = entry.guard.check({in_order})",
            "                except Exception:",
            "                    hit = False",
            "                fn = entry.fn if hit else None",
            "                skip = 1",
            "            else:",
            "                skip = 0",
            "            if fn is None:",
            "                entry, fn = select(hook, box, skip)",
            "            try:",
            *call,
            "            except Exception as e:",
            "                failure = failed(hook, entry, e)",
            "                if failure is None:",
            "                    raise",
            *after,
            "            return rerun(failure[1], hook.eager, failure[0], {})",
            "        except BaseException as e:",
            "            clean(e)",
            "            raise"]


def _select(hook: Any, box: list, skip: int = 0) -> tuple:
    """(entry, function) to call with the arguments in `box` (reversed), as FrameHook.__call__ and miss
    choose, the first `skip` entries' guards known to fail; entry None: a function that handles everything
    itself."""
    args = tuple(reversed(box))
    fn = hook.fn
    if config.disable or jit_tracing() or fn.__code__ is not hook.code or \
            fn.__defaults__ is not hook.defaults[0] or fn.__kwdefaults__ is not hook.defaults[1]:
        return None, hook
    for entry in hook.entries[skip:] if skip else hook.entries:
        try:
            hit = entry.guard.check(*args)
        except Exception:
            hit = False
        if hit:
            return _entry_call(hook, entry)
    if fn.__code__ in DISABLED or fx_tracing():
        return None, hook.eager
    entry = hook._find_or_compile(args, {})
    del args
    if entry is None:
        return None, hook._limit_eager() if hook.limit_logged else hook.eager
    return _entry_call(hook, entry)


def _entry_call(hook: Any, entry: Any) -> tuple:
    if (entry.rerun is None and entry.on_graph_error is None) or _arguments_in_frame(entry):
        return entry, entry.fn
    return None, functools.partial(_holding, hook, entry)


def _holding(hook: Any, entry: Any, *args: Any) -> Any:
    """The entry's call holding its arguments, for a rerun after a failing graph (FrameHook.__call__)."""
    try:
        return entry.fn(*args)
    except Exception as e:
        if (shown := hook._reruns(entry, e, args, {})) is None:
            raise
    return rerun_without(shown, hook.eager, args, {})


def _arguments_in_frame(entry: Any) -> bool:
    """The entry's transformed function keeps its parameters in their slots up to its graph call."""
    known = entry.__dict__.get("_args_in_frame")
    if known is None:
        known = entry._args_in_frame = _keeps_parameters(getattr(entry.fn, "__code__", None))
    return known


def _keeps_parameters(code: Any) -> bool:
    from .codegen import graph_call_span
    if code is None or code.co_flags & (0x04 | 0x08) or code.co_kwonlyargcount:
        return False
    params = set(code.co_varnames[:code.co_argcount])
    if params & set(code.co_cellvars):
        return False
    start, end = graph_call_span(code)
    if start < 0:
        return False
    for inst in dis.get_instructions(_plain_constants(code)):
        if inst.offset >= end:
            break
        if ("STORE_FAST" in inst.opname or "DELETE_FAST" in inst.opname or "AND_CLEAR" in inst.opname) and \
                not params.isdisjoint(inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)):
            return False
    return True


# NOTE [Instructions read without constant reprs]: dis.get_instructions formats `repr()` of every constant the
# code loads (argrepr). A transformed function holds the user's objects as constants (a module's tensors, a
# tensor subclass whose __torch_function__ logs every call): reading its instructions ran the user's
# __repr__ and formatted large tensors on every compile (review revH MED-1). The scan reads opcodes, offsets
# and local names only, so it reads a copy of the code whose other constants are their indices.
_PLAIN_CONSTANTS = (type(None), bool, int, float, str)


def _plain_constants(code: Any) -> Any:
    consts = tuple(c if type(c) in _PLAIN_CONSTANTS else i for i, c in enumerate(code.co_consts))
    return code.replace(co_consts=consts)


def _failed(hook: Any, entry: Any, exc: BaseException) -> tuple | None:
    """(arguments, warnings shown) to rerun the frame eagerly with, when `exc` came from the entry's graph
    and the entry reruns (its early effects are made otherwise: FrameHook._reruns); None: it propagates (also
    where this lookup runs out of stack: NOTE [Bookkeeping at the recursion limit] in deep_traces.py)."""
    try:
        return _failed_graph(hook, entry, exc)
    except RecursionError:
        return None


def _failed_graph(hook: Any, entry: Any, exc: BaseException) -> tuple | None:
    if entry is None:
        return None
    from .raising_floats import preload_frame  # NOTE [Rebuilt floats that raise]: before any store, too
    frame = preload_frame(exc, entry.fn.__code__)
    if frame is None and (entry.rerun is not None or entry.on_graph_error is not None):
        from .graph_errors import graph_call_frame
        frame = graph_call_frame(entry, exc)
    if frame is None:
        return None
    values, code = frame.f_locals, entry.fn.__code__
    args = tuple(values[name] for name in code.co_varnames[:code.co_argcount])
    shown = hook._reruns(entry, exc, args, {})
    return None if shown is None else (args, shown)


def expand_release(insts: list, argnames) -> list:
    """`insts` (a transformed function's body, its temporaries cleared before each return: NOTE [Temporaries
    cleared before return] in caught_exceptions.py) with each `LOAD_CONST release_locals` replaced by clearing
    every fast local of the function (set to None, then deleted), then `LOAD_CONST None` for the POP_TOP after
    it (NOTE [Arguments handed to resume functions])."""
    if not any(isinstance(i, Instr) and i.name == "LOAD_CONST" and i.arg is release_locals for i in insts):
        return insts
    cells = {i.arg.name for i in insts if isinstance(i, Instr) and isinstance(i.arg, (CellVar, FreeVar))}
    names = dict.fromkeys(argnames)
    for i in insts:
        if isinstance(i, Instr) and "FAST" in i.name:
            names.update(dict.fromkeys(a for a in (i.arg if isinstance(i.arg, tuple) else (i.arg,))
                                       if isinstance(a, str)))
    names = [n for n in names if n not in cells]
    if any(isinstance(i, TryBegin) for i in insts):
        names = []  # a handler could read them (transformed code has none so far)
    out = []
    for inst in insts:
        if isinstance(inst, Instr) and inst.name == "LOAD_CONST" and inst.arg is release_locals:
            for name in names:
                out += [Instr("LOAD_CONST", None, lineno=inst.lineno), Instr("STORE_FAST", name, lineno=inst.lineno),
                        Instr("DELETE_FAST", name, lineno=inst.lineno)]
            inst = Instr("LOAD_CONST", None, lineno=inst.lineno)
        out.append(inst)
    return out


__all__ = ["caller", "expand_release", "release_locals"]
