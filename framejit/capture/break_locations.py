"""Where a graph break happened, as the running process names it (issue 11).

A `UserFrame` is made from a code object and the canonical instruction it stopped at (`user_frame`). A
persisted entry is keyed by its function's code hash and `module.qualname`, neither of which names the
file or the lines, so the file:line its break record was traced at may not be this process's: the same
`__main__.fn` in another script, or a function with lines added above it. The record is therefore
persisted with, for each frame, which code object it was and the instruction's index, and on restore
each frame is made again from the live code.

NOTE [Break locations from the live code]: a frame's code is found again from a base function and a path
of indices through `co_consts` (nested code: closures, comprehensions). The base is the entry's function
(0) or its i-th persisted callee (i + 1), whose code hashes `restore` has checked, else the importable
function of the frame's module that encloses the code (a callee reached through the hook after the
break, not inlined by the entry), whose code hash is persisted and checked here. The code hash covers the
bytecode and constants, not the lines, so the index names the same instruction of the same canonical
form (normalize.py). A frame whose code is not found so keeps the text it was traced with.
"""
from __future__ import annotations

import dataclasses
import linecache
import sys
import types

from .breaks import GraphBreak, UserFrame
from .locators import code_hash, resolve
from .normalize import Inst, normalize


def user_frame(code: types.CodeType, inst: Inst | None, module: str | None = None) -> UserFrame:
    """The user's frame of `code` (of module `module`) stopped at `inst` (None: at its first line)."""
    lineno = inst.lineno if inst is not None and inst.lineno else code.co_firstlineno
    line = linecache.getline(code.co_filename, lineno).strip()
    return UserFrame(code.co_filename, lineno, code.co_name, line, code, None if inst is None else inst.index,
                     module)


def persisted_break(graph_break: GraphBreak | None, functions: list) -> tuple[GraphBreak | None, tuple]:
    """(the record without code objects, each frame's (base, const path, instruction index) or None);
    `functions` are the entry's function and then its persisted callees, in order."""
    if graph_break is None:
        return None, ()
    places = tuple(_place(frame, functions) for frame in graph_break.user_stack)
    frames = tuple(dataclasses.replace(frame, code=None) for frame in graph_break.user_stack)
    return dataclasses.replace(graph_break, user_stack=frames), places


def restored_break(graph_break: GraphBreak | None, places: tuple, functions: list) -> GraphBreak | None:
    """The persisted record with each placed frame made again from the live code (NOTE [Break locations
    from the live code])."""
    if graph_break is None or not places:
        return graph_break
    frames = []
    for frame, place in zip(graph_break.user_stack, places):
        code = None if place is None else _code_at(place, functions)
        index = None if place is None else place[2]
        if code is None or code.co_name != frame.function or (index is not None and
                                                               index >= len(normalize(code).insts)):
            frames.append(frame)
            continue
        frames.append(user_frame(code, None if index is None else normalize(code).insts[index], frame.module))
    return dataclasses.replace(graph_break, user_stack=tuple(frames))


def _place(frame: UserFrame, functions: list) -> tuple | None:
    for i, f in enumerate(functions):
        path = _const_path(f.__code__, frame.code)
        if path is not None:
            return (i, path, frame.index)
    if frame.code is None or frame.module not in sys.modules:  # nothing imported for it
        return None
    locator = ("import", frame.module, frame.code.co_qualname.partition(".<locals>.")[0])
    try:
        outer = resolve(locator, None).__code__
    except Exception:  # no importable function encloses it
        return None
    path = _const_path(outer, frame.code)
    return None if path is None else ((locator, code_hash(outer)), path, frame.index)


def _const_path(code: types.CodeType, target: types.CodeType | None) -> tuple | None:
    if code is target:
        return ()
    for i, const in enumerate(code.co_consts):
        if isinstance(const, types.CodeType):
            path = _const_path(const, target)
            if path is not None:
                return (i, *path)
    return None


def _code_at(place: tuple, functions: list) -> types.CodeType | None:
    base = place[0]
    if isinstance(base, int):
        code = functions[base].__code__ if base < len(functions) else None
    else:
        try:
            code = resolve(base[0], None).__code__
        except Exception:  # gone in this process: the frame keeps its text
            return None
        code = code if code_hash(code) == base[1] else None
    for i in place[1]:
        if not isinstance(code, types.CodeType) or i >= len(code.co_consts):
            return None
        code = code.co_consts[i]
    return code if isinstance(code, types.CodeType) else None


__all__ = ["persisted_break", "restored_break", "user_frame"]
