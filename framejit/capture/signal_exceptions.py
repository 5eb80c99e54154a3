"""Exceptions raised by the user's signal handlers while a frame is compiled.

NOTE [Signal handlers during compilation]: a Python signal handler runs in the main thread between two
bytecodes of whatever code runs there, and an exception it raises (a `SIGALRM` handler raising
`TimeoutError`, the usual way to bound a call's time) comes out of that code. While framejit traces and
compiles a frame, that code is framejit's: the exception was taken for an internal error (the frame then
ran eagerly on every later call: a timeout at a bad moment disabled compilation of that function for the
process), or an `except Exception` inside the trace swallowed it (the user's timeout never fired). Eager
raises it to the caller. So while a frame is compiled in the main thread, each Python signal handler is
wrapped: an exception it raises is remembered (and raised on, as it would be), and when the compilation
ends, however it ended, the remembered exception is raised from the call, as if the handler had run just
before the frame's first instruction. No entry is made for that call (an eager-frame record made while
it compiled is dropped: the frame does not run eagerly): the next call compiles the frame again. The handlers are put back after the compilation (unless one was replaced meanwhile); a handler that
raises nothing behaves as before.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Callable, Iterator

_depth = 0  # compilations in progress in the main thread (a compilation may compile another frame)


def _wrapped(handler: Callable, raised: list) -> Callable:
    def run_handler(signum, frame):
        try:
            return handler(signum, frame)
        except BaseException as e:
            raised.append(e)
            raise
    run_handler.__wrapped__ = handler
    return run_handler


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
_OWN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def from_signal_handler(exc: BaseException) -> bool:
    """Whether `exc` was raised by (a callee of) a Python signal handler installed now."""
    tb = exc.__traceback__
    if tb is None or threading.current_thread() is not threading.main_thread():
        return False
    codes = set()
    for handler in _python_handlers().values():
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


def _python_handlers() -> dict:
    handlers = {}
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            handlers[signum] = handler
    return handlers


@contextlib.contextmanager
def raised_by_signal_handlers() -> Iterator[None]:
    """Compile a frame inside it (NOTE [Signal handlers during compilation])."""
    global _depth
    if _depth or threading.current_thread() is not threading.main_thread():
        yield
        return
    from . import eager_frames
    raised: list = []
    installed = {}
    records = eager_frames.snapshot_records()
    _depth += 1
    try:
        for signum, handler in _python_handlers().items():
            installed[signum] = (handler, _wrapped(handler, raised))
            signal.signal(signum, installed[signum][1])
        yield
    finally:
        _depth -= 1
        for signum, (handler, wrapper) in installed.items():
            if signal.getsignal(signum) is wrapper:
                signal.signal(signum, handler)
        if raised:
            eager_frames.drop_records_since(records)
            raise raised[0]
