"""Frames whose code calls `locals()` on a path the trace may never take.

NOTE [Locals readers decided where they are reached]: a root frame whose code names `locals`, `vars` or `dir`
ran wholly eagerly (NOTE [Frames that read their locals]), whether or not the call can run: transformers'
`GenerationMixin.generate` calls `locals()` only under `if custom_generate is not None and
isinstance(custom_generate, str)` (loading a generation recipe from the Hub), so `framejit.compile(model.generate)`
ran all of generate as Python. Now, when every such read in the frame's own code is a call with no
arguments (`locals()`, `vars()`, `dir()`; `eval`/`exec` keep the old rule), the frame is traced and the
decision is made where the read could happen:
- the trace reaching the call makes the frame run wholly eagerly (frame_locals.caller_namespace_break): its
  own code in its own frame, as before, so the dict lists eager's names and values;
- a graph break from which one of the calls is reachable in the code's control flow (jumps, fall-through,
  exception handlers; any jump counts, taken or not) makes the frame run eagerly too (convert._break_entry):
  the code after a break runs in a resume or tail function whose locals are not the frame's (dead ones are
  never passed on). A break from which none is reachable continues as any other, and its resume function,
  whose code cannot reach one either, is traced (`traced_despite_readers`).
The branch the trace takes is guarded as usual (`custom_generate is None`), so a call that takes the other
path retraces and runs eagerly from there. A resume function from which a call is reachable keeps the old
rule (it runs eagerly).
"""
from __future__ import annotations

import types

_NO_ARG_READERS = frozenset({"locals", "vars", "dir"})
_READERS = frozenset({"locals", "vars", "dir", "eval", "exec"})
_ENDS = frozenset({"JUMP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE",
                   "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})


def _loaded_name(arg):
    return arg[1] if isinstance(arg, tuple) else arg


def reader_sites(code: types.CodeType, f_globals: dict) -> list[int] | None:
    """The indices (canonical instructions) of the calls of a frame reader in `code`'s own code, each a
    load of `locals`/`vars`/`dir` by its global name followed by a call with no arguments; None when some
    load of a reader name is not of that form (eval, exec, a reader passed on)."""
    import builtins

    from .normalize import normalize
    insts = normalize(code).insts
    sites = []
    for k, inst in enumerate(insts):
        if inst.name not in ("LOAD_GLOBAL", "LOAD_NAME"):
            continue
        name = _loaded_name(inst.arg)
        if name not in _READERS or name in f_globals or getattr(builtins, name, None) is None:
            continue
        following = insts[k + 1] if k + 1 < len(insts) else None
        if name not in _NO_ARG_READERS or following is None or following.name != "CALL" or following.arg != 0:
            return None
        sites.append(inst.index)
    return sites


def reachable(code: types.CodeType, start: int, targets: list[int]) -> bool:
    """Whether an instruction of `targets` can run after the instruction at `start` (itself included)."""
    from .normalize import normalize
    insts = normalize(code).insts
    wanted, seen, todo = set(targets), set(), [start]
    while todo:
        index = todo.pop()
        if index in seen or not 0 <= index < len(insts):
            continue
        if index in wanted:
            return True
        seen.add(index)
        inst = insts[index]
        if isinstance(inst.arg, int) and not isinstance(inst.arg, bool) and \
                ("JUMP" in inst.name or inst.name in ("FOR_ITER", "SEND") or
                 getattr(inst.instr, "has_jump", lambda: False)()):
            todo.append(inst.arg)
        if inst.handler is not None:
            todo.append(inst.handler)
        if inst.name not in _ENDS:
            todo.append(index + 1)
    return False


def _is_resume(code: types.CodeType) -> bool:
    return ".<resume at " in getattr(code, "co_qualname", "")


def traced_despite_readers(fn: types.FunctionType) -> bool:
    """`fn`'s code names a frame reader, yet it is traced (NOTE [Locals readers decided where they are
    reached]): every read is a no-argument call, and, for a resume function, none can run."""
    sites = reader_sites(fn.__code__, fn.__globals__)
    if sites is None:
        return False
    return not _is_resume(fn.__code__) or not reachable(fn.__code__, 0, sites)


def break_reaches_reader(fn: types.FunctionType, index: int) -> bool:
    """A break at instruction `index` of `fn`'s code from which a frame reader's call can run."""
    code = fn.__code__
    if not _READERS.intersection(code.co_names):
        return False
    sites = reader_sites(code, fn.__globals__)
    return sites is None or bool(sites) and reachable(code, index, sites)
