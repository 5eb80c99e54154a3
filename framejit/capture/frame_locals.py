"""Frames that read their own local namespace run eagerly.

NOTE [Frames that read their locals]: `locals()`, `vars()` and `dir()` without arguments, and `eval` /
`exec` without their own namespaces, read the calling frame's local variables. A traced frame keeps
only what it needs: a local that nothing reads later is never stored, and code after a graph break runs
in a resume function whose locals are the live values (plus its own helpers). So `len(locals())` after
`a = 1` gave 1 where eager gives 2, `eval("a + 1")` raised NameError, and `locals()` after a break listed
the resume function's names (red team 6). A root frame whose code names one of these builtins (and does
not define it as a global of its own) runs wholly eagerly; a callee inlined into a traced frame is not
concerned (its call runs the builtin at a break, in its own frame).
"""
from __future__ import annotations

import builtins
import dis
import types

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


__all__ = ["reads_own_locals"]
