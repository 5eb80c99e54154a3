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

NOTE [Signal handlers deferred to safe points]: the handler no longer runs wherever the signal arrives. It ran
between two bytecodes of torch's own code as often as of framejit's (most of a compilation is fake-tensor
propagation), and those are not written to be left half way: a TimeoutError raised inside FakeTensorMode's
dispatch left torch's thread-local mode state set (the next compilation of the process asserted in
`in_kernel_invocation_manager`, or aborted the interpreter: "trying to set the current FakeTensorMode, but one
already exists"), and one raised between `logging._acquireLock()` and its `try` left the logging lock held by
the main thread, so that every other thread's first log call deadlocked (a `tests/capture/test_threads.py`
run hung behind test_signal_handlers' timer). While a frame compiles and the main thread is inside such state
(NOTE [Deferred only where fragile]), the wrapper only records the signal; the handler runs at the next safe
point: the top of the tracer's instruction loop (`poll()`, between two traced instructions, where framejit's
own state is whole) or the end of the compilation, with the frame the signal interrupted. What it raises is
raised from the call as before. Ctrl-C (`default_int_handler`) is handled the same way, so a KeyboardInterrupt
while a frame compiles leaves torch usable. A signal that arrives again before its handler ran is handled
once, as the operating system merges a pending signal.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Callable, Iterator

import _signal  # the handler as set (signal.getsignal converts to enums)

from ..signal_handlers import python_handlers

_depth = 0  # compilations in progress in the main thread (a compilation may compile another frame)
PENDING: list = []  # (handler, signum, frame) recorded while compiling, in arrival order
_raised: list = []  # what the deferred handlers of the compilation in progress raised


def _deferred(handler: Callable) -> Callable:
    def record_signal(signum, frame):
        pending = any(signum == p[1] for p in PENDING)
        if not _fragile() or (pending and signum == signal.SIGINT):  # NOTE [Deferred only where fragile]
            _run(handler, signum, frame)
        elif not pending:  # NOTE [Signal handlers deferred to safe points]
            PENDING.append((handler, signum, frame))
    record_signal.__wrapped__ = handler
    return record_signal


# NOTE [Deferred only where fragile]: deferring every signal (review revBP MED-1) made a compilation blocked in a
# backend (a sleep, an Event.wait, a hung subprocess) deaf to Ctrl-C and to a timeout's SIGALRM: the wait resumed
# after the recorder returned, and the handler ran only when the backend did (3.1 s instead of 0.3 s; never, for a
# backend that hangs). A handler is deferred only where an exception must not cut through: while one of torch's
# dispatch modes is active (fake propagation, whose thread-local state an exception left half set) or while this
# thread holds logging's module lock; anywhere else it runs at once, as before. A second Ctrl-C while the first is
# still pending runs at once anyway: the user insists.
def _fragile() -> bool:
    logging = sys.modules.get("logging")
    owned = getattr(getattr(logging, "_lock", None), "_is_owned", None)
    if owned is not None and owned():
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return torch._C._len_torch_dispatch_stack() > 0 or \
            torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None
    except (AttributeError, RuntimeError):
        return True


def _run(handler: Callable, signum: int, frame) -> None:
    try:
        handler(signum, frame)
    except BaseException as e:
        _raised.append(e)
        raise


def poll() -> None:
    """A safe point of the compilation: run the handlers of the signals that arrived since the last one."""
    while PENDING:
        _run(*PENDING.pop(0))


def _handlers() -> dict:
    handlers = python_handlers()
    if _signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handlers[signal.SIGINT] = signal.default_int_handler
    return handlers


@contextlib.contextmanager
def raised_by_signal_handlers() -> Iterator[None]:
    """Compile a frame inside it (NOTE [Signal handlers during compilation])."""
    global _depth
    if _depth or threading.current_thread() is not threading.main_thread():
        yield
        return
    from . import eager_frames
    installed = {}
    records = eager_frames.snapshot_records()
    _depth += 1
    try:
        for signum, handler in _handlers().items():
            installed[signum] = (handler, _deferred(handler))
            signal.signal(signum, installed[signum][1])
        yield
    finally:
        _depth -= 1
        for signum, (handler, wrapper) in installed.items():
            if signal.getsignal(signum) is wrapper:
                signal.signal(signum, handler)
        while PENDING:  # every handler runs, as in eager; a later one's exception is the one raised
            try:
                poll()
            except BaseException as e:
                if len(_raised) > 1 and e.__context__ is None:
                    e.__context__ = _raised[-2]
        raised = list(_raised)
        PENDING.clear()
        _raised.clear()
        if raised:
            eager_frames.drop_records_since(records)
            raise raised[-1]
