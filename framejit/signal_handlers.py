"""Whether an exception caught by framejit was raised by one of the user's Python signal handlers.

At the top level (not in capture/) so that guards/ and backends/ can ask too: they never import capture
(DESIGN.md §3). Compilation-time handling: capture/signal_exceptions.py.
"""
from __future__ import annotations

import os
import signal
import threading


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


def from_signal_handler(exc: BaseException) -> bool:
    """Whether `exc` was raised by (a callee of) a Python signal handler installed now."""
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
    if from_signal_handler(e):
        raise e


def python_handlers() -> dict:
    handlers = {}
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            handlers[signum] = handler
    return handlers
