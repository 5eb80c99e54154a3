"""Recursion limits met by framejit's own machinery deep in the user's recursion: the call runs as eager runs
it, and nothing is installed or recorded for good (NOTE [Traces out of stack])."""
from __future__ import annotations

import sys

from .. import logs
from .dynamic_misses import RaisedAtSymbolicOp

# NOTE [Traces out of stack]: a compiled function that recurses (`def rec(x, n): return x if n == 0 else
# rec(x + 1, n - 1)`, a tree walk over nested lists) may miss its guards hundreds of levels deep, where the
# trace itself (a few hundred frames of framejit's own) runs out of the recursion limit. That RecursionError
# was taken for a framejit bug: the frame got an internal-error eager entry (and an eager-frames record) for
# good, and the RecursionError of the hook's own bookkeeping on the way out reached the user's program where
# eager returns (hhuntG4 MED-2, /tmp/hhuntG4/p/m01_recursion.py: n = 950 raised, eager returns at 990). Such a
# trace, started deep in the stack (`deep_stack`), now runs this call eagerly and installs nothing
# (`TooDeepToTrace`, handled as NOTE [Calls that raise at a symbolic op] in dynamic_misses.py is): later calls
# from higher up compile as before, and the call itself runs with eager's frames only below the hook. A
# RecursionError of a trace started near the top of the stack is still framejit's own failure (logged, the
# frame eager). With fullgraph=True it is Unsupported as before.
class TooDeepToTrace(RaisedAtSymbolicOp):
    """convert_frame's answer for a trace that ran out of stack deep in the user's recursion: run the call
    eagerly, install no entry (NOTE above)."""


def deep_stack(fraction: int = 4) -> bool:
    """The current stack holds more than 1/`fraction` of the recursion limit's frames (an O(depth) walk: only
    on a failure path)."""
    limit = sys.getrecursionlimit() // fraction
    frame, depth = sys._getframe(1), 0
    while frame is not None and depth <= limit:
        frame, depth = frame.f_back, depth + 1
    return depth > limit


def raise_if_too_deep(exc: BaseException, name: str) -> None:
    """`exc`, raised while tracing `name`: TooDeepToTrace when it is a RecursionError met deep in the stack."""
    if isinstance(exc, RecursionError) and deep_stack():
        logs.log("eager_fallback", "%s: the trace ran out of stack deep in a recursion (%s); this call runs "
                 "eagerly, nothing is installed (NOTE [Traces out of stack])", name, exc)
        raise TooDeepToTrace() from None


# NOTE [Bookkeeping at the recursion limit]: the hook's own work around a call, deep in the user's recursion, can
# run out of stack where the user's code did not: the miss path's recompile explanation and marks (`ast.dump` of
# a guard), the lookup of an entry that failed (FrameHook._reruns, lifetimes._failed: is the exception the
# graph's?). Its RecursionError then replaced the user's exception (a ValueError raised 924 levels down came
# out as RecursionError; eager raises the ValueError up to 995 levels) or ended a call eager completes. Neither
# is the user's: FrameHook._find_or_compile puts back what the miss marked or installed and runs the call
# eagerly, this once (`out_of_stack`); the failure lookups answer "not the graph's", so the user's exception
# propagates unchanged. Each catches in the frame that called the bookkeeping, which the user's code already
# reached, so the handler itself has stack. Frames the hook adds to every level (its `__call__`) still count
# against the limit: a recursion that fits eager's stack with fewer spare frames than those raises
# RecursionError compiled.
def out_of_stack(name) -> None:
    """The miss path ran out of stack (NOTE above): logged where the stack allows; None, run eagerly."""
    try:
        logs.log("eager_fallback", "%s: framejit's bookkeeping ran out of stack deep in a recursion; this call runs "
                 "eagerly, nothing is installed (NOTE [Bookkeeping at the recursion limit])", name())
    except RecursionError:
        pass
    return None


__all__ = ["TooDeepToTrace", "deep_stack", "out_of_stack", "raise_if_too_deep"]
