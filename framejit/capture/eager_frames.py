"""Frames framejit runs wholly eagerly: counted, kept with their reason, and logged.

NOTE [Eager frames]: a frame that framejit cannot run correctly runs as plain Python: tracing found no
break point it could resume from, the traced code raised (eager raises it the same way), an internal
error was caught, or the frame hit the recompile limit. Each such decision is one record here
(`function`, `location` file:line, `reason`), counted in `stats()["eager_frames"]`, listed in
`stats()["eager_frame_reasons"]` and in `explain()`, and logged once on the `graph_breaks` artifact, so
"0 graphs" is never silent. A record is made when the decision is made (per entry, not per call that
reuses it).
"""
from __future__ import annotations

import threading
import types

from .. import logs

EAGER_FRAMES: list[dict[str, str]] = []
_LOCK = threading.Lock()


def record(code: types.CodeType, reason: str, location: str | None = None) -> dict[str, str]:
    """Note that the frame of `code` runs eagerly because of `reason`; returns the record."""
    entry = {"function": code.co_qualname,
             "location": location if location and location != "<unknown>" else
             f"{code.co_filename}:{code.co_firstlineno}",
             "reason": reason}
    with _LOCK:
        EAGER_FRAMES.append(entry)
    logs.log("graph_breaks", "frame %s runs wholly eagerly (%s): %s", entry["function"], entry["location"], reason)
    return entry


def forget(code: types.CodeType, needle: str) -> None:
    """Drop the newest record of `code` whose reason holds `needle` (a frame traced again instead)."""
    with _LOCK:
        for i in range(len(EAGER_FRAMES) - 1, -1, -1):
            if EAGER_FRAMES[i]["function"] == code.co_qualname and needle in EAGER_FRAMES[i]["reason"]:
                del EAGER_FRAMES[i]
                return


def count() -> int:
    return len(EAGER_FRAMES)


def snapshot() -> list[dict[str, str]]:
    with _LOCK:
        return [dict(e) for e in EAGER_FRAMES]


def snapshot_records() -> list[dict[str, str]]:
    """The records themselves (not copies), for `drop_records_since`."""
    with _LOCK:
        return list(EAGER_FRAMES)


def drop_records_since(kept: list) -> None:
    """Drop the records not in `kept` (a `snapshot_records()`): NOTE [Signal handlers during compilation]."""
    ids = {id(r) for r in kept}
    with _LOCK:
        EAGER_FRAMES[:] = [r for r in EAGER_FRAMES if id(r) in ids]


def reset() -> None:
    with _LOCK:
        EAGER_FRAMES.clear()
