"""A frame with the user's code shape, made for a frame reader's call in a resume function.

NOTE [User frames for readers in resume functions]: a frame reader called at a break (NOTE [Breaks at calls
that read frames] in frame_locals.py) sees the frame that calls it at `sys._getframe(1)`. In the root frame
that is the transformed function, whose code has the user's signature (argument count, names, `*args`,
`**kwargs`); in a resume function it is the resume function's transformed code, whose arguments are the stack
values and the live locals (`___stack0, x, n, y`). `inspect.getargvalues(sys._getframe(1))` (call-logging
helpers: `{a: values[a] for a in args}`) then listed `___stack0` among the arguments, which the frame does not
hold: KeyError where eager returns `{'x': ..., 'n': ...}` (review revJ J6); `f_code.co_argcount` and
`co_varnames` were the resume function's too. There the call is made from one more frame: a function made per
call (`make_user_frame`) whose code has the original code's name, qualified name, file, first line,
signature (argument counts, `*args`/`**kwargs` flags, parameter names), `co_varnames` in the original's order
and free variables (the original's closure cells), and every instruction at the break's line. Its arguments
are bound from defaults, its prologue deletes the parameters the user's frame has not bound, stores the
user's bound locals into their slots from a per-thread slot (`_take`: set by make_user_frame for this call and
emptied before the reader runs; before, two cells `___data`/`___call` that `co_freevars` listed beside the
user's free variables), makes the call with `CALL_FUNCTION_EX`, and returns
(result, the locals after the call): a reader writing through `f_locals` (3.13) is seen by the rest of the
function. Not exact: one more frame of the user's name stands between the reader and the caller's caller
(the resume function's transformed frame above it; the frames above a user's frame were framejit's already),
and the original's cell variables are plain locals of this frame (`co_cellvars` empty).
"""
from __future__ import annotations

import functools
import inspect
import threading
import types

import bytecode
from bytecode import Instr

from . import emit
from .user_tracebacks import add_reader_code

# NOTE [User frames for readers in resume functions]: what make_user_frame hands its function, per thread
_PENDING = threading.local()


def _take(call: bool) -> tuple:
    """The locals' values (then the call's (kwargs, args), forgetting both) make_user_frame left for its function."""
    data = _PENDING.data
    if call:
        del _PENDING.data
    return data[call]


def make_user_frame(original: types.CodeType, names: tuple[str, ...], line: int, kw_names: tuple[str, ...],
                    closure: tuple, values: tuple, args: tuple, kwvalues: tuple) -> types.FunctionType:
    """A function that, called with no arguments, makes the call `callee(*args, **kwargs)` from a frame holding
    `names` bound to `values` (`values` ends with the callee) and returns (result, the locals after the call).
    Its globals are the caller's (the transformed function's, the user's module's)."""
    import sys
    code = _user_frame_code(original, names, line)
    _PENDING.data = (values, (dict(zip(kw_names, kwvalues)), args))  # taken by the function's prologue
    fn = types.FunctionType(code, sys._getframe(1).f_globals, original.co_name, (None,) * original.co_argcount,
                            tuple(closure) or None)
    if original.co_kwonlyargcount:
        kwonly = original.co_varnames[original.co_argcount:original.co_argcount + original.co_kwonlyargcount]
        fn.__kwdefaults__ = dict.fromkeys(kwonly)
    return fn


def _parameters(code: types.CodeType) -> tuple[str, ...]:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return code.co_varnames[:count]


@functools.lru_cache(maxsize=256)
def _user_frame_code(original: types.CodeType, names: tuple[str, ...], line: int) -> types.CodeType:
    """The code of make_user_frame's functions (NOTE [User frames for readers in resume functions])."""
    params = _parameters(original)
    slots = list(original.co_varnames) + [n for n in original.co_cellvars if n not in original.co_varnames]
    # every slot named first in the original's order (jumped over, never run), so co_varnames is the original's
    start = bytecode.Label()
    body: list = [Instr("COPY_FREE_VARS", len(original.co_freevars))] if original.co_freevars else []
    body += [Instr("RESUME", 0), emit.jump_forward(start)]
    for name in slots:
        body += [emit.load_fast_checked(name), Instr("POP_TOP")]
    body.append(start)
    body += [Instr("DELETE_FAST", name) for name in params if name not in names]
    body += emit.null_before_callable()
    body += emit.call_const(_take, [Instr("LOAD_CONST", False)]) + [Instr("UNPACK_SEQUENCE", len(names) + 1)]
    body += [Instr("STORE_FAST", name) for name in names]
    body += emit.null_after_callable()
    body += emit.call_const(_take, [Instr("LOAD_CONST", True)]) + [Instr("UNPACK_SEQUENCE", 2)]
    body += emit.call_ex(True)
    body += [emit.load_fast_checked(name) for name in names] + [Instr("BUILD_TUPLE", len(names)), Instr("BUILD_TUPLE", 2),
                                                     Instr("RETURN_VALUE")]
    for instr in body:
        if isinstance(instr, Instr):
            instr.lineno = line
    bc = bytecode.Bytecode(body)
    bc.argcount = original.co_argcount
    bc.posonlyargcount = original.co_posonlyargcount
    bc.kwonlyargcount = original.co_kwonlyargcount
    bc.argnames = list(params)
    bc.freevars = list(original.co_freevars)
    bc.name = original.co_name
    if hasattr(bc, "qualname"):
        bc.qualname = original.co_qualname
    bc.filename = original.co_filename
    bc.first_lineno = original.co_firstlineno
    bc.flags = bytecode.CompilerFlags.OPTIMIZED | bytecode.CompilerFlags.NEWLOCALS | \
        (original.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_NESTED))
    code = bc.to_code()
    add_reader_code(code)  # NOTE [Tracebacks past the hook]: its caller's entry is not eager's
    return code


__all__ = ["make_user_frame"]
