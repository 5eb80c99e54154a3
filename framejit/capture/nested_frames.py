"""The translator's side of nested graph breaks (NOTE [Nested graph breaks] in nested_breaks.py): which
inlined frames a break happened in, and stopping a second trace inside them.

A break or exception leaving a trace carries `nest_path`: (code, instruction index) of every frame that was
executing when it was raised, the root first, the frame that raised it last. A trace made again with
`output.nest_stop` set to such a path stops right before the last frame's instruction, inside the same
chain of inlined calls, by raising NestedStop (a BaseException, so that no handler of the trace takes it)
with that frame's translator; each frame on the path keeps `operands`, its stack before its current
instruction.
"""
from __future__ import annotations

from typing import Any

from .breaks import Unsupported, UserException


class NestedStop(BaseException):
    """The innermost frame of `output.nest_stop` reached its instruction (`tx`: its translator)."""

    def __init__(self, tx: Any) -> None:
        super().__init__("nested stop")
        self.tx = tx


def attach_stack(e: Exception, tx: Any) -> None:
    """Add the user's stack of `tx` to `e`, and the path of frames it was raised in (the first frame to see it)."""
    stack = tx.user_stack()
    if isinstance(e, Unsupported):
        e.with_stack(stack)
    elif isinstance(e, UserException) and not e.user_stack:
        e.user_stack = stack
    if "nest_path" not in e.__dict__:
        path, ids = [], set()
        while tx is not None:
            path.append((tx.code, tx.current.index if tx.current is not None else None))
            ids.add(id(tx))
            tx = tx.parent
        e.nest_path = tuple(reversed(path))
        e.nest_tx_ids = frozenset(ids)  # the translators executing (NOTE [Autocast objects open outside])


def stop_for(output: Any, parent: Any, code: Any) -> int | None:
    """The instruction a frame of `code` called from `parent` stops before: the last one of `output.nest_stop`
    when the frame is the last one of that path (its callers executing the path's instructions)."""
    path = output.__dict__.get("nest_stop") if parent is not None else None
    if not path:
        return None
    chain = []
    while parent is not None:
        chain.append((parent.code, parent.current.index if parent.current is not None else None))
        parent = parent.parent
    chain.reverse()
    if len(chain) + 1 != len(path) or code is not path[-1][0]:
        return None
    if any(c is not want[0] or i != want[1] for (c, i), want in zip(chain, path)):
        return None
    return path[-1][1]


def stopped(tx: Any) -> None:
    """`tx` reached its stop_at: the root returns (a plain break); an inlined frame raises NestedStop."""
    if tx.parent is None:
        return None
    raise NestedStop(tx)
