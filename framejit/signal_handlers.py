"""Whether an exception caught by framejit was raised by one of the user's Python signal handlers.

At the top level (not in capture/) so that guards/ and backends/ can ask too: they never import capture
(DESIGN.md §3). Compilation-time handling: capture/signal_exceptions.py.
"""
from __future__ import annotations

import os
import signal
import threading

import _signal  # the handlers as set, without signal.py's enum conversions (NOTE [Checks at the recursion limit])


# NOTE [Signal handlers while a compiled frame runs]: the same exception raised while an entry's guards
# are checked, while a miss is explained, or while its graph runs must reach the caller too: not count as a
# failed guard (a spurious miss and recompile), and not as a graph failure (NOTE [Graph failures rerun
# eagerly]: the call would rerun eagerly and return normally, having spent the time twice). Nothing is
# wrapped on that hot path; an `Exception` caught there is asked whether its traceback holds a frame of a
# Python signal handler installed now (a handler runs as a call from the interrupted frame, so its frame is
# in the traceback). KeyboardInterrupt and SystemExit are no `Exception` and pass those handlers anyway.
# NOTE [Compiled handlers]: a framejit-compiled function installed as a handler is a FrameHook, whose
# `__call__` is the first frame of every guard or graph failure of every compiled function: taken as a handler's
# code, every such failure looked raised by a signal handler (a guard's KeyError reached the user: review revQ
# HIGH-1, /tmp/revQ/s6.py). framejit's own code is never a handler's code here; the user function under the hook
# (its `__wrapped__`) still is.
_OWN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


# NOTE [Checks at the recursion limit]: framejit asks this while the user's exception passes a compiled frame, and
# that frame may sit at the recursion limit: a compiled recursion 300 levels deep on 3.12, where every level costs
# C stack (Py_C_RECURSION_LIMIT, not sys.setrecursionlimit: the call of the FrameHook object, whose `__call__` is
# Python; about 490 levels fit under pytest, where eager's plain recursion costs none),
# raised RecursionError in here (signal.valid_signals()'s enum conversions), which replaced the exception being
# asked about (the graph's own RecursionError there; any exception of the user's) at every level above (the 3.12 CI's
# test_traceback_levels failure). The question reads the
# handlers through _signal (no enum calls), and when it still cannot be answered it answers `unknown`: True
# where the caller then re-raises the exception unchanged (a graph's exception: no eager rerun), False where it
# counts the exception as a failed guard or entry condition, as before signal handlers were asked about.
def from_signal_handler(exc: BaseException, unknown: bool = True) -> bool:
    """Whether `exc` was raised by (a callee of) a Python signal handler installed now; `unknown` where the
    recursion limit leaves no room to tell (NOTE [Checks at the recursion limit])."""
    try:
        return _from_signal_handler(exc)
    except RecursionError:
        return unknown


def _from_signal_handler(exc: BaseException) -> bool:
    tb = exc.__traceback__
    if tb is None or threading.current_thread() is not threading.main_thread():
        return False
    codes = set()
    for handler in python_handlers().values():
        for _ in range(8):  # our wrapper, functools.wraps/partial, bound methods
            code = getattr(getattr(handler, "__func__", handler), "__code__", None) or \
                getattr(getattr(type(handler), "__call__", None), "__code__", None)  # a callable object
            if code is not None and not code.co_filename.startswith(_OWN_DIR):  # NOTE [Compiled handlers]
                codes.add(code)
            handler = getattr(handler, "__wrapped__", None) or getattr(handler, "func", None)
            if handler is None:
                break
    while tb is not None and codes:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def reraise_if_from_signal_handler(e: Exception) -> None:
    """For an `except Exception` that takes the exception for a failed guard or a failed graph."""
    if from_signal_handler(e, unknown=False):
        raise e


def python_handlers() -> dict:
    handlers = {}
    for signum in _signal.valid_signals():
        try:
            handler = _signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            handlers[signum] = handler
    return handlers
