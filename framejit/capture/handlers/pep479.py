"""CALL_INTRINSIC_1 STOPITERATION_ERROR (3.12+): the handler CPython adds around every generator body.

NOTE [The generator body's own handler]: from 3.12 on a generator's body is covered by a handler the compiler
adds (NOTE [Handlers the compiler adds] in normalize.py): `CALL_INTRINSIC_1 STOPITERATION_ERROR; RERAISE 1`.
The intrinsic turns a StopIteration (PEP 479) leaving the body into RuntimeError("generator raised
StopIteration") and leaves any other exception as it is; RERAISE raises the result out of the frame. The trace
reaches it when it follows an exception re-raised out of the body's own handlers (a `finally` around a yield
the exception was thrown into: NOTE [Exceptions thrown into suspended generators] in lazy_generators.py). Any
other exception passes through unchanged, as in CPython; a StopIteration stays a graph break (the converted
RuntimeError's chaining is not modelled).
"""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported
from . import op


@op("STOPITERATION_ERROR")
def stopiteration_error(tx, inst):
    exc = getattr(tx.peek(), "value", None)
    if not isinstance(exc, BaseException) or isinstance(exc, (StopIteration, StopAsyncIteration)):
        raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, "STOPITERATION_ERROR: the StopIteration-to-RuntimeError "
                                                        "conversion (PEP 479) is not traced")
