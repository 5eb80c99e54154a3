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
import signal
import threading
from typing import Callable, Iterator

from ..signal_handlers import python_handlers

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
        for signum, handler in python_handlers().items():
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
