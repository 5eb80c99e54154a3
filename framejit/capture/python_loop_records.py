"""Loops run as Python: their bodies' own operations run outside any graph, so each such loop is logged
(`eager_fallback`) and listed in `framejit.stats()` (NOTE [Loop bodies run outside graphs])."""
from __future__ import annotations

import threading
import types

from .. import logs

# NOTE [Loop bodies run outside graphs]: a loop run as Python (NOTE [Loops run as Python] in python_loops.py:
# a for loop over a symbolic range, over an opaque sequence, or breaking on data in every step) runs its body
# as plain Python: calls of Python functions in it go through their frame hooks and are captured as frames,
# but the operators and torch calls written in the body itself run eagerly at every step. A chunked scan
# (`for i in range(ceil(T / 64)): out[:, i] = x[:, i] @ state + x[:, i] @ w`, /tmp/hhuntHF4/symloop70_root.py)
# ran every matmul eagerly once its length became symbolic, with eager_frames 0 and nothing but a graph
# break in the graph_breaks log (hhuntHF4 MED-1). Such a loop is now recorded when a compiled entry runs it as
# Python: once per loop (function, file:line of its `for`), with the reason, counted in
# `framejit.stats()["python_loops"]` and listed in `python_loop_reasons`, and logged on `eager_fallback`.
_LOCK = threading.Lock()
RECORDS: list[dict[str, str]] = []
_SEEN: set[tuple] = set()


def record(code: types.CodeType, index: int, over_symbolic_range: bool) -> None:
    """Note that the loop at instruction `index` of `code` (the user's code) runs as Python (NOTE above), once."""
    from .normalize import normalize
    insts = normalize(code).insts
    line = insts[index].lineno if index < len(insts) else None
    why = "its range's length is symbolic" if over_symbolic_range else "its body breaks, or it iterates an opaque " \
        "sequence, in a frame that would otherwise recompile per step or size"
    location = f"{code.co_filename}:{line if line is not None else code.co_firstlineno}"
    key = (code.co_qualname, location)
    with _LOCK:
        if key in _SEEN:
            return
        _SEEN.add(key)
        entry = {"function": code.co_qualname, "location": location,
                 "reason": f"{why}; the loop runs as Python: the operations written in its body run eagerly at "
                           "every step, outside any graph (calls of Python functions in it are captured as their "
                           "own frames)"}
        RECORDS.append(entry)
    logs.log("eager_fallback", "the for loop of %s at %s runs as Python: %s", entry["function"], location,
             entry["reason"])


def count() -> int:
    return len(RECORDS)


def snapshot() -> list[dict[str, str]]:
    with _LOCK:
        return [dict(e) for e in RECORDS]


__all__ = ["count", "record", "snapshot"]
