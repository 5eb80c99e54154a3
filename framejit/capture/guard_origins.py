"""Guard origins as the running process names them (issue 16).

NOTE [Guard origins from the live code]: every guard records the user line that made it ("file:line: text",
OutputGraph.location), which the guard function's source carries as a comment and the recompiles log as
"(from ...)". A persisted entry is keyed by code hashes, which cover neither file names nor line numbers, so a
warm process running the same functions from another file (the same `__main__.f` in a script moved elsewhere,
a checkout at another path) or with lines added above them restored comments and explanations naming the
tracing process's files and lines. Each origin is therefore persisted with the place of its line: the entry's
function (0) or its i-th persisted callee (i + 1), whose code hashes `restore` checks before this runs; the
path of indices through `co_consts` to the (nested) code compiled from the origin's file; and the bytecode
offset of that code's first instruction on the line. Equal hashes mean equal bytecode, so the same offset of
the live code is on the same source line, whose number and text this process reads from its own file. An
origin no such code names (a guard made outside any frame) keeps its text, as a break record does (NOTE
[Break locations from the live code] in break_locations.py).

Main names: `origin_places(guards, functions)`, `live_origins(places, functions)`, `relocated_source`.
"""
from __future__ import annotations

import linecache
import types
from typing import Iterator


def origin_places(guards, functions: list) -> tuple:
    """((origin, (function index, const path, offset)), ...) for the distinct origins of `guards` (and of
    their parts) that a code of `functions` (the entry's function, then its persisted callees) names."""
    places, seen = [], set()
    for origin in _origins(guards):
        if origin in seen:
            continue
        seen.add(origin)
        place = _place(origin, functions)
        if place is not None:
            places.append((origin, place))
    return tuple(places)


def live_origins(places: tuple, functions: list) -> dict[str, str]:
    """{persisted origin: the origin the live code gives it} (NOTE [Guard origins from the live code])."""
    renamed = {}
    for origin, (base, path, offset) in places:
        code = functions[base].__code__ if base < len(functions) else None
        for i in path:
            code = code.co_consts[i] if isinstance(code, types.CodeType) and i < len(code.co_consts) else None
        line = _line_at(code, offset) if isinstance(code, types.CodeType) else None
        if line is not None:
            renamed[origin] = f"{code.co_filename}:{line}: {linecache.getline(code.co_filename, line).strip()}"
    return renamed


def relocated_source(source: str, renamed: dict[str, str]) -> str:
    """The guard function's source with each line's origin comment (`# <source> | <origin>`, at the end of
    the line: guards/codegen.py) renamed; the code itself is left as it is."""
    if not renamed:
        return source
    lines = []
    for line in source.split("\n"):
        at = line.find(" | ", line.find("  # ") + 1) if "  # " in line else -1
        while at >= 0 and line[at + 3:] not in renamed:  # the origin is the comment's tail after some " | "
            at = line.find(" | ", at + 1)
        lines.append(line if at < 0 else line[:at + 3] + renamed[line[at + 3:]])
    return "\n".join(lines)


def _origins(guards) -> Iterator[str]:
    for g in guards:
        if g.origin:
            yield g.origin
        yield from _origins(g.parts)


def _place(origin: str, functions: list) -> tuple | None:
    for base, f in enumerate(functions):
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType):
            continue
        for path, nested in _codes(code, ()):
            prefix = nested.co_filename + ":"
            number = origin[len(prefix):].partition(":")[0] if origin.startswith(prefix) else ""
            if not number.isdigit():
                continue
            offset = next((start for start, _, line in nested.co_lines() if line == int(number)), None)
            if offset is not None:
                return (base, path, offset)
    return None


def _codes(code: types.CodeType, path: tuple) -> Iterator[tuple[tuple, types.CodeType]]:
    yield path, code
    for i, const in enumerate(code.co_consts):
        if isinstance(const, types.CodeType):
            yield from _codes(const, (*path, i))


def _line_at(code: types.CodeType, offset: int) -> int | None:
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


__all__ = ["live_origins", "origin_places", "relocated_source"]
