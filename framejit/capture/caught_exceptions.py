"""Exceptions caught by the traced code's own try/except or with-block: the trace follows the handler.

NOTE [Exceptions caught while tracing]: when an instruction raises the user's exception (a UserException:
`{}["a"]`, `next(it)` at the end, `raise KeyError`, a callee that raises) and CPython's exception table
sends it to a try/except or try/finally handler of the same code object (the handler starts with
PUSH_EXC_INFO; a with-block's, whose next instruction is WITH_EXCEPT_START, only as NOTE [Exceptions in
with-blocks] says), the trace does what CPython does: drop the
stack to the handler's depth, push the exception (after the raising offset when the entry says `lasti`)
and continue at the handler. CHECK_EXC_MATCH decides `except T` from the exception's type, which the
trace knows (the raising operation was guarded as for any other result); the exception itself is a
constant (NOTE [Exceptions made while tracing] rebuilds it per call). A RuntimeError (NotImplementedError
included) is not followed: fake tensors and the shape environment raise their own ones (a guard on
data-dependent sizes, a kernel the fake mode cannot run) where eager raises nothing, and an `except
RuntimeError` would then take a branch eager does not; those keep the path below.

NOTE [RuntimeErrors raised by the user]: a RuntimeError the traced code raises itself (RAISE_VARARGS of an
exception class or of an exception object made in the trace: `raise RuntimeError("stop")`, in this frame or a
callee) is raised in eager too, so it is followed like a ValueError (before, `try: raise RuntimeError(...)
except RuntimeError: ...` made the whole frame run eagerly). Fake-tensor and shape-environment RuntimeErrors
and framejit's own errors (not UserExceptions: logged, the frame runs eagerly) are still not followed.

A followed handler is speculative until its POP_EXCEPT. If anything escapes the frame from inside it (the
handler re-raises, raises another exception, breaks the graph, or the except clause does not match), the
trace gives up on it and raises the original exception from the raising instruction, so everything
behaves as before handlers were followed: the root frame breaks before that instruction and plain Python
raises and handles it (convert.py), an inlined callee's exception takes NOTE [Exceptions caught in
callees]. A callee's handler that already mutated visible state before giving up cannot be undone inside
this trace (places that model a caught exception, such as `hasattr`, would keep the trace going), so that
case is a graph break instead, which retraces the frame from scratch.

NOTE [Handlers of callees given up]: a callee's exception that leaves it from under its own handler carries
`callee_break` (NOTE [Exceptions caught in callees]); unless the trace followed that handler to a raise of
the same exception type (RERAISE: a `finally`, an `except` that does not match; `raise KeyError(key) from
None` as os.environ's), whether the callee handles it is unknown (the handler could not be traced, or was
never followed: a RuntimeError, a with-block's exit, a bare `raise`). Neither a caller's handler nor the
places that model a caught exception (hasattr, getattr/next with a default, Mapping.get, `in`) may take it:
they did, so a callee whose except clause calls something untraceable (str(t), print, sys._getframe(), a
torch module global such as nn.Module's always-called forward hooks read) lost its handler, and the
caller's `except` ran or hasattr answered False instead (red team 16). Such an exception leaves the callee
as its `callee_break` (translator.run): the root frame breaks at its call into the callee (convert.py).
"""
from __future__ import annotations

import dataclasses
import traceback
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .normalize import Inst, is_user_handler
from .values import BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, NewObjectValue, ObjectValue, \
    TupleValue, UserFunctionValue, Value


@dataclasses.dataclass
class Handling:
    """One followed handler: the exception it caught, where it was raised, and the side-effect state then."""
    exception: UserException
    index: int
    version: int
    touched: int
    caught: Value | None = None  # the CaughtException pushed for it (a bare `raise` re-raises it)


def follow_handler(tx, inst: Inst, e: UserException) -> bool:
    """Continue the trace at the handler that catches `e` raised by `inst`, if it is a try's handler."""
    insts = tx.program.insts
    handler = inst.handler
    if handler is not None and getattr(e, "reraised", None) is not None:
        return _follow_reraise(tx, inst, e)  # NOTE [Exceptions re-raised from followed handlers]
    thrown = getattr(e, "thrown_in", False)  # NOTE [Exceptions thrown into suspended generators]: GeneratorExit
    if handler is None or not (isinstance(e.exc, Exception) or thrown) or getattr(e, "symbolic", False) or \
            isinstance(e.exc, RuntimeError) and not getattr(e, "user_raised", False):
        return False  # NOTE [Errors of ops on symbolic values] in graph_calls.py
    escaped = getattr(e, "escaped_context", None)  # NOTE [New exceptions leaving callees' handlers]
    same = getattr(e, "caught_as", None)  # NOTE [Exceptions leaving generator context manager blocks]
    handled = tx.handling[-1].caught if tx.handling else None
    context = _handled_context(tx, e) if handling_anywhere(tx) and escaped is None and same is None else escaped
    if handling_anywhere(tx) and (context is None and same is None or escaped is not None and escaped is not handled):
        return False  # NOTE [Exceptions raised while handling]
    user = is_user_handler(insts, handler)
    if not user and context is None:  # a cleanup CPython runs as the exception leaves a handler: only then
        return False  # NOTE [Contexts of exceptions raised while handling]
    if user and insts[handler + 1].name == "WITH_EXCEPT_START" and not traced_exit(tx, inst, e.exc) or \
            inst.name == "RAISE_VARARGS" and inst.arg == 2:
        return False  # a with-block's exit not traced; `raise X from Y`, whose cause the constant lacks
    if getattr(e, "callee_break", None) is not None and not getattr(e, "escape_traced", False):
        return False  # NOTE [Handlers of callees given up]
    if getattr(e, "attr_obj", None) is not None and not _rebuilt_per_call(e.attr_obj):
        return False  # NOTE [Members of caught exceptions]
    line = inst.lineno if tx.parent is None else None  # NOTE [Tracebacks of caught exceptions]
    if line is not None:
        tx.output.frame_in_traceback = True  # NOTE [Locals of a frame in a traceback]
    caught = same or CaughtException(e.exc, line, _callee_entries(tx, e) if line is not None else (),
                                     getattr(e, "attr_obj", None))
    if same is None:
        caught.context, caught.suppress_context = context, getattr(e, "suppress_context", False)
        caught.cause = getattr(e, "cause_value", None)
        caught.unchained = tx.output if context is None and not thrown else None  # NOTE [Contexts of exceptions
        # raised where nothing is handled]
    if user:
        effects = tx.output.side_effects
        tx.handling.append(Handling(e, inst.index, effects.version, len(effects.touched), caught))
    caught.origin, caught.origin_tx = tx.handling[0], tx  # NOTE [Exceptions re-raised from followed handlers]
    if not user and same is None and tx.parent is not None:  # NOTE [New exceptions leaving callees' handlers]
        caught.raised_stack = e.user_stack or tx.user_stack()  # where it was raised, not the cleanup's RERAISE
    return _enter_handler(tx, inst, caught)


def _enter_handler(tx, inst: Inst, caught: CaughtException) -> bool:
    """Go on at the handler of `inst` as CPython does: the stack cut to its depth, the raising offset when the
    entry says `lasti`, the exception."""
    del tx.stack[inst.handler_depth:]
    tx.kw_names = ()
    if inst.handler_lasti:
        tx.push(ConstantValue(inst.position))
    tx.push(caught)
    tx.jump(inst.handler)
    return True


# NOTE [Exceptions re-raised from followed handlers]: a bare `raise` in a followed handler, an `except` clause
# that does not match, and the end of a `finally` (RERAISE) raise the exception being handled again: the same
# object, whose `__context__` and traceback CPython leaves as they are (a re-raise sets no context and, unlike
# `raise e`, adds no traceback entry). The trace follows it too (before, it gave the handler up, so
# `try: (try: 1/0 except ZeroDivisionError: raise) except ZeroDivisionError: ...` ran from the division on as
# plain Python, uncounted even under fullgraph): the UserException carries the CaughtException (`reraised`),
# and the handlers it reaches are followed whatever else is being handled: the cleanup CPython runs while the
# exception leaves a handler (3.11+: COPY 3, POP_EXCEPT, RERAISE 1; the `except E as e` cleanup that unbinds
# `e`), then the next try's or traced with-block's handler, which gets the same CaughtException (eager's object
# there is the same: `e2 is e`, same traceback). Such a handler stays speculative with the origin of the first
# one (the instruction that raised first, the side-effect state then): if anything escapes the frame, even
# after the cleanup's POP_EXCEPT ended the handlers that were active, the trace gives them up from there
# (give_up_handlers). `raise e` is not a re-raise here (it adds a traceback entry); a new exception raised
# while handling is NOTE [Contexts of exceptions raised while handling].
def _follow_reraise(tx, inst: Inst, e: UserException) -> bool:
    insts, handler, caught = tx.program.insts, inst.handler, e.reraised
    if is_user_handler(insts, handler):
        if insts[handler + 1].name == "WITH_EXCEPT_START" and not traced_exit(tx, inst, e.exc):
            return False
        origin = caught.origin
        tx.handling.append(Handling(origin.exception, origin.index, origin.version, origin.touched, caught))
    return _enter_handler(tx, inst, caught)


def reraised_here(tx, raised: Exception) -> bool:
    """`raised` re-raises an exception whose handlers `tx` followed (and may all have ended)."""
    caught = getattr(raised, "reraised", None)
    return caught is not None and caught.origin_tx is tx


def reraised(tx, value: Value, exc: BaseException) -> UserException:
    """The UserException of re-raising `value` (RERAISE, a bare `raise`): tagged when it is a CaughtException of
    a handler `tx` followed (NOTE [Exceptions re-raised from followed handlers])."""
    e = UserException(exc)
    if isinstance(value, CaughtException) and getattr(value, "origin_tx", None) is tx:
        e.reraised = value
    return e


# NOTE [Members of caught exceptions]: an AttributeError that leaves a getattr (LOAD_ATTR, a method load,
# getattr()) with neither `name` nor `obj` set gets the attribute's name and the object from CPython
# (set_attribute_error_context: `except AttributeError as e: e.name, e.obj is o`, read by "Did you mean"
# suggestions); a NameError of a global or free variable gets `name`, an ImportError of `from m import x` its
# `name` (m) and `path`. The trace made its exceptions without them, and the per-call rebuild (NOTE
# [Exceptions made while tracing]) copied args and __dict__ only, so a caught one had None (review revO O4). The
# trace sets them as CPython does (attribute_error_context at translator.getattr); the rebuild passes those
# members as constants (`exception_members`: a pickled template loses them) and, for an AttributeError, its
# object: the value the trace read the attribute of, rebuilt per call (its source, or a fixed object). A caught
# AttributeError whose object cannot be rebuilt so (an object or tensor made by the trace) is not followed: the
# frame breaks before the instruction and Python sets them. Nor is one that a getter raised (a property's, a
# descriptor's `__get__`: descriptors.getter_call): whether CPython sets its members depends on the version
# and the form of the read (3.11's `o.prop` and every `getattr(o, "prop")` set them; a method load `o.prop()`,
# and 3.12+'s `o.prop`, specialized as LOAD_ATTR_PROPERTY, leave None).
def attribute_error_context(e: UserException, obj: Value, name: str) -> None:
    """`e` leaves `getattr(obj, name)`: an AttributeError with no name and object gets them, as in CPython."""
    exc = e.exc
    if not isinstance(exc, AttributeError) or hasattr(e, "attr_obj"):
        return
    if getattr(e, "getter_raised", False):
        e.attr_obj = _UNKNOWN  # not followed: Python sets the members, or not
        return
    real = obj.value if isinstance(obj, ConstantValue) else getattr(obj, "obj", None)
    if exc.name is None and exc.obj is None or exc.name == name and real is not None and exc.obj is real:
        exc.name, exc.obj = name, None  # the object is the value's, rebuilt per call: not the trace's one
        e.attr_obj = obj


_UNKNOWN = Value()  # the object of a getter's AttributeError: never rebuilt


def _rebuilt_per_call(value: Value) -> bool:
    return value is not _UNKNOWN and value.source is not None or isinstance(value, (ObjectValue, BuiltinValue)) or \
        isinstance(value, ConstantValue) and not isinstance(value.value, BaseException)


def exception_rebuild(value: ConstantValue) -> tuple[Any, tuple, list[Value]]:
    """How the emitted code makes the exception constant `value` each call: the function, its constant
    arguments, then the values emitted after them (NOTE [Exceptions made while tracing], [Tracebacks of caught
    exceptions], [Members of caught exceptions], [Contexts of exceptions raised while handling])."""
    from .mappings_runtime import fresh_exception, fresh_exception_raised_at, fresh_exception_with_cause, \
        fresh_exception_with_context
    if not isinstance(value, CaughtException):
        return fresh_exception, (value.value,), []
    members = exception_members(value.value) + ((("__suppress_context__", True),) if value.suppress_context else ())
    constants = (value.value, value.raise_line, value.callees, members)
    obj = [value.attr_obj] if value.attr_obj is not None else []
    if value.context is not None and value.cause is not None:
        return fresh_exception_with_cause, constants, [value.context, value.cause, *obj]
    if value.context is not None:
        return fresh_exception_with_context, constants, [value.context, *obj]
    return fresh_exception_raised_at, constants, obj


def exception_members(exc: BaseException) -> tuple:
    """(name, value) of the members CPython sets on `exc` that its args and __dict__ do not rebuild."""
    names = ("name", "path", "name_from") if isinstance(exc, ImportError) else \
        ("name",) if isinstance(exc, (AttributeError, NameError)) else ()
    return tuple((n, getattr(exc, n)) for n in names if getattr(exc, n, None) is not None)


# NOTE [Exceptions raised while handling]: CPython sets an exception's `__context__` to the exception being
# handled where it is raised (`except KeyError: try: raise ValueError ... except ValueError as v: v.__context__`
# is the KeyError; traceback.format_exception prints "During handling of the above exception ..."). The trace
# folds exceptions to constants rebuilt per call from their type, args and dict (NOTE [Exceptions made while
# tracing]), which carry no context: such a `v.__context__` read None under framejit (review revG G6). An
# exception raised while a handler followed by this trace or by a caller's trace is active is therefore not
# followed: it escapes that handler, whose own exception is then raised again from its instruction (the root
# frame breaks before it and plain Python raises and handles both, setting the context), as for any other
# exception leaving a followed handler. A followed exception is thus raised where only an exception handled
# around the frame's call can be active (a caller's plain-Python except block, or an outer frame's): its
# rebuilt object (a CaughtException, caught in the root frame or in an inlined callee) takes that one,
# `sys.exc_info()` when it is rebuilt, as its context (mappings_runtime.fresh_exception_raised_at). An
# exception made and never raised keeps None (plain fresh_exception), as eager's.
#
# NOTE [Contexts of exceptions raised while handling]: a new exception raised where a handler of the same frame
# is active (`except ZeroDivisionError: try: raise KeyError except KeyError as e: e.__context__`; an inlined
# `__exit__` that raises ValueError for the KeyError of its block) is followed as any other, with that
# handler's exception (a CaughtException) as its context: `e.__context__` reads that value in the trace, and the
# rebuilt exception gets the rebuilt handled one as `__context__` (codegen: one object however reached, as
# preloaded). Not followed still: one raised where only a caller's handler is active, a re-raise of an older
# exception that already has a context or is the handled one itself (`raise e`), an exception with a cause.
def _handled_context(tx, e: UserException) -> Value | None:
    """The CaughtException that becomes the context of `e`, raised while `tx` handles it, or None."""
    caught = tx.handling[-1].caught if tx.handling else None
    if caught is None or e.exc is caught.value or e.exc.__context__ is not None or e.exc.__cause__ is not None:
        return None
    return caught


def handling_anywhere(tx) -> bool:
    """A handler followed by `tx` or by a translator it is inlined into is active."""
    while tx is not None:
        if tx.handling:
            return True
        tx = tx.parent
    return False


# NOTE [Tracebacks of caught exceptions]: an exception the traced code raises and catches itself is a constant
# rebuilt per call (NOTE [Exceptions made while tracing]), so it had no traceback: `except KeyError as e`
# (or a with-block's `__exit__` that suppresses it and keeps it) saw `e.__traceback__` None where eager's holds
# the raising frame (traceback.format_exception(e): 1 line instead of 3; revC C1). Caught by a handler of the
# root frame, the rebuilt exception gets eager's first traceback entry: the frame running the compiled code
# (the function's own transformed code or a resume function of it: the user's file, name and line numbers)
# at the line of the instruction that raised (the `raise`, or the call into a callee that raised). The
# entries of the inlined callees it was raised in (their frames never exist) follow it, one per callee at the
# line that raised or called on (`_callee_entries`, from the exception's user stack), each in a frame made
# for it (mappings_runtime.made_frame: the callee's name, qualified name, file, first line and module
# globals; no locals), so `traceback.extract_tb(e.__traceback__)` of a stored exception that `_inner(y)`
# raised lists eager's entries (before: the caller's only; `raise err` after a break had 2 entries where
# eager has 3). The traceback of an exception caught in an inlined callee is still None (no frame of the
# callee to point at).
class CaughtException(ConstantValue):
    """An exception constant caught by a followed handler, with the user's line that raised it when the handler
    is the root frame's (None in a callee) and the callees' entries below it; rebuilt with the context eager's
    has (NOTE [Exceptions raised while handling])."""

    def __init__(self, value: BaseException, raise_line: int | None, callees: tuple = (),
                 attr_obj: Value | None = None) -> None:
        super().__init__(value)
        self.raise_line = raise_line
        self.callees = callees
        self.attr_obj = attr_obj  # an AttributeError's `obj` (NOTE [Members of caught exceptions])
        self.context: Value | None = None  # NOTE [Contexts of exceptions raised while handling]
        self.suppress_context = False  # raised `from None`: NOTE [New exceptions leaving callees' handlers]
        self.cause: Value | None = None  # raised `from` the handled exception: the same NOTE
        self.unchained = None  # the trace's output when raised where no traced handler was active

    def attr_in_trace(self, name: str) -> Value | None:
        """NOTE [Contexts of exceptions raised where nothing is handled]: `e.__context__` of an exception raised
        where no handler of the trace was active is the exception the caller handled at entry: None, guarded."""
        out = self.unchained
        if name != "__context__" or self.context is not None or out is None or getattr(out, "entry_exception", True):
            return None
        import sys
        exc_info = out.name_of(sys.exc_info, "exc_info")
        out.add_guard("EXCEPTION_STATE", f"{exc_info}()[1] is None", None, expected="no exception being handled",
                      actual=f"{exc_info}()[1]")
        return ConstantValue(None)

    @property
    def known_members(self) -> dict[str, Value]:
        """The members the trace knows where the template's would be wrong (attributes._constant_attr)."""
        known = {"__context__": self.context} if self.context is not None else {}
        if self.cause is not None:
            known["__cause__"] = self.cause
        if self.suppress_context:
            known["__suppress_context__"] = ConstantValue(True)
        return known


def _callee_entries(tx, e: UserException) -> tuple:
    """(name, qualified name, file, first line, module, line) of each inlined callee `e` was raised in, outermost
    first (NOTE [Tracebacks of caught exceptions])."""
    stack = list(getattr(e, "user_stack", ()) or ())
    if stack and stack[0].code is tx.code:
        del stack[0]
    return tuple((f.code.co_name, getattr(f.code, "co_qualname", f.code.co_name), f.code.co_filename,
                  f.code.co_firstlineno, f.module, f.lineno) for f in stack if f.code is not None)


def give_up_handlers(tx, raised: Unsupported | UserException) -> Unsupported | UserException:
    """What escapes a frame from inside followed handlers: the first handler's own exception, raised again
    from its instruction (or a graph break when a callee's handler already mutated state)."""
    from .lazy_generators import thrown_out
    if thrown_out(tx, raised):  # NOTE [Exceptions thrown into suspended generators]: traced to its re-raise
        tx.handling.clear()
        raised.escape_traced = True
        return raised
    escaped = _new_exception_leaving(tx, raised)
    first = tx.handling[0] if tx.handling else raised.reraised.origin  # NOTE [Exceptions re-raised from ...]
    tx.handling.clear()
    if escaped is not None:
        return escaped
    if tx.parent is None and (isinstance(raised, Unsupported) or tx.current is not None and
                              caught_in_frame(tx.program.insts, tx.current)):
        first.exception.handler_given_up = _given_up_break(tx, first, raised)  # NOTE [Handlers given up in ...]
    effects = tx.output.side_effects
    if tx.parent is not None and (effects.version != first.version or len(effects.touched) != first.touched) and \
            not _reraised_whole(raised, first):
        return Unsupported(BreakKind.EXCEPTION_RAISED,
                           f"a handler (except or finally clause) of {tx.code.co_qualname} that caught "
                           f"{type(first.exception.exc).__name__} changed state and could not be traced to its end "
                           f"({str(raised).splitlines()[0]})")
    tx.current = tx.program.insts[first.index]
    # NOTE [Handlers of callees given up]: traced to a raise of it here; an inner frame's flag (a new exception that
    # left a further callee, NOTE [New exceptions leaving callees' handlers]) does not say this handler was traced
    first.exception.escape_traced = isinstance(raised, UserException) and type(raised.exc) is type(first.exception.exc)
    return first.exception


# NOTE [Handlers that re-raise what they caught]: a callee's handler that changed state (a `finally:` appending to a
# log, writing a tensor in place, counting in a global) and then re-raised the very exception it caught (the
# `finally`'s RERAISE, a bare `raise`, an `except` that does not match) was given up like one that could not be
# traced: a break at the call into the callee, and from a generator with finalizers a frame run wholly eagerly,
# with the reason "the except clause ... could not be traced" (hhuntG7 MED-1). Followed to that re-raise, the
# handler ran in the trace exactly as in eager: nothing is left to undo, so the exception leaves the callee as
# traced (escape_traced) and a caller's handler takes it. A handler that breaks, raises something else, or whose
# exception is not the same object is given up as before, now with a reason that says so. Where a block of the callee
# the trace did not follow lies between (a `with torch.no_grad():` around the try: NOTE [Blocks an escape passed
# untraced]) the exception leaves as the callee's break, as before (this change first landed without that rule and
# left grad mode off after the call: revBI HIGH-1).
def _reraised_whole(raised: Unsupported | UserException, first: Handling) -> bool:
    """`raised` is the exception `first` caught, re-raised by the handlers the trace followed to their end (a
    `finally`'s RERAISE, a bare `raise`): what they did is what eager does (NOTE [Handlers that re-raise what they
    caught])."""
    caught = getattr(raised, "reraised", None)
    return isinstance(raised, UserException) and caught is not None and caught.origin is first and \
        raised.exc is first.exception.exc


# NOTE [Contexts of exceptions raised where nothing is handled]: the context of an exception raised where no handler
# of the trace is active is the exception a caller handles at the frame's entry (NOTE [Exceptions raised while
# handling]: the rebuilt one takes `sys.exc_info()` then), so `except E as e: e.__context__` was a graph break for
# every caught exception (PyTorch's test_exceptions.py test_raise_set___context__, testChainingDescriptors). When
# the caller handled nothing at entry (convert's `entry_exception`, as NOTE [sys.exc_info while tracing]) the read
# answers None with the same EXCEPTION_STATE guard, so a call from inside a caller's `except` retraces (and breaks
# there, as before). Not for an exception thrown into a generator (CPython chains it with the generator's state),
# nor one the trace made and holds under another name (`te = TypeError(); raise te`: `te` is not the caught value).
# NOTE [New exceptions leaving callees' handlers]: a new exception raised in an inlined callee while one of its
# followed handlers is active and leaving the callee (`except KeyError: raise ValueError(key)`, os.environ's
# `raise KeyError(key) from None`) was given up: the callee's handled exception was raised again from its
# instruction, so the frame broke at the call into the callee, and where the new one had the handled one's type
# the caller's handler took the handled object for it (review: `except KeyError as e: e.args` read the callee's
# ('zz',), eager's ('other',)). CPython runs the handler (its side effects are eager's too) and raises the new
# exception out of the callee with the handled one as its `__context__` (and, for `from None`, no cause and
# `__suppress_context__` set). The trace does the same: the new exception leaves the callee (escape_traced, NOTE
# [Handlers of callees given up]) carrying the handled CaughtException (`escaped_context`); a caller's handler
# that catches it while nothing else is handled takes that as the context of its CaughtException, rebuilt with
# it (fresh_exception_with_context) and read by `e.__context__` / `e.__suppress_context__`; `raise X from e` of the
# handled exception `e` itself (contextlib-style wrapping) makes it the `__cause__` too (fresh_exception_with_cause).
# Given up as before: any other cause (`raise X from y`), an exception that already has a context or cause, the handled
# exception itself (`raise e`), one that left a further callee's given-up handler, one raised in the root
# frame (NOTE [Handlers given up in the root frame]), and one that a handler of the callee the trace did not
# follow still covers where it leaves (caught_in_frame): `raise X from e` is not followed into the cleanups
# (follow_handler), so a `finally:` or an outer try around the except clause was skipped (hhuntG3 HIGH-0:
# a @contextmanager generator's `finally` lost, eager ['exc', 'fin'], compiled ['exc']).
def _new_exception_leaving(tx, raised: Unsupported | UserException) -> UserException | None:
    if tx.parent is None or not isinstance(raised, UserException) or getattr(raised, "callee_break", None) is not None:
        return None
    if tx.current is not None and caught_in_frame(tx.program.insts, tx.current):
        return None  # a `finally`, try or with-block of the callee that the trace did not follow would see it
    caught = getattr(raised, "reraised", None)
    if caught is not None:  # raised in the handler and its cleanup followed: the context is known
        context = caught.context
        if context is None or caught.origin_tx is not tx or raised.exc is context.value:
            return None
    else:
        context = tx.handling[-1].caught if tx.handling else None
        if context is None or raised.exc is context.value or raised.exc.__context__ is not None or \
                raised.exc.__cause__ is not None or getattr(raised, "thrown_in", False):
            return None
    cause = getattr(raised, "raised_from", None)
    if cause is not None and cause is not context and not (cause.is_constant() and cause.as_constant() is None):
        return None
    escaped = UserException(raised.exc, getattr(caught, "raised_stack", ()))  # traceback: the raising line
    escaped.user_raised = escaped.escape_traced = True
    escaped.escaped_context, escaped.suppress_context = context, cause is not None
    escaped.cause_value = cause if cause is context else None
    return escaped


# NOTE [Handlers given up in the root frame]: when the root frame gives up a followed handler because something
# else than the handled exception leaving the frame escaped it (a graph break inside the handler, or a new
# exception that a handler of the frame catches: `except ZeroDivisionError: try: raise KeyError except
# KeyError: ...`), the frame breaks before the instruction that raised first and runs from there as Python,
# going on after its handlers. That is a graph break like any other: under fullgraph=True it is raised
# (before, the frame's rest ran as Python with no error), otherwise it is the entry's break, counted and
# logged (convert.py). Where only the handled exception, or one no handler of the frame catches, leaves the
# frame, eager raises it out of the frame too, and breaking before the raise stays NOTE [Exceptions raised
# by the traced code].
#
# NOTE [Blocks an escape passed untraced]: an exception a callee's followed handlers re-raise (a `finally`'s RERAISE,
# a bare `raise`), or one a further callee let out as traced, is traced out of the callee (escape_traced) only where
# no handler of the callee covers the instruction it leaves from: one that does was not followed (or the exception
# would not leave from there), so CPython runs code there that the trace did not. The common one is a with-block whose
# exit is torch's (no_grad, set_grad_enabled(False), autocast, inference_mode: not followed, NOTE [Exceptions in
# with-blocks]): `with torch.no_grad(): try: raise KeyError finally: pass` in a callee, caught by the frame, left grad
# mode off for the rest of the frame, and the graph's switch left it off in the whole process after the call (autocast
# on the same; revBI HIGH-1: z.requires_grad False, torch.is_grad_enabled() False after the call where eager has
# True), also with the with-block in a caller of the callee and, on 3.12+, with the raise in a comprehension inside
# the block. Such an exception now leaves the callee as its `callee_break` (leaving_callee): the frame breaks at its
# call into the callee and Python runs the block's exit. Whatever the block's exit restores, that holds for every mode
# and manager the trace does not follow.
def leaving_callee(tx, e: UserException, left: Inst | None) -> UserException | Unsupported:
    """`e` leaves the inlined callee `tx` from `left`: as itself where the trace followed the callee's handlers to
    its escape, else as its `callee_break` where a handler of the callee may handle it (NOTE [Handlers of callees
    given up], [Blocks an escape passed untraced])."""
    from .nested_frames import attach_stack
    if left is not None and caught_in_frame(tx.program.insts, left):
        e.escape_traced = False  # NOTE [Blocks an escape passed untraced]
    if not tx._handles(e):
        return e
    if getattr(e, "callee_break", None) is None:
        e.callee_break = Unsupported(BreakKind.EXCEPTION_RAISED, f"{type(e.exc).__name__} raised where "
                                     f"{tx.code.co_qualname} has a try or with block around it")
        attach_stack(e.callee_break, tx)
    return e if getattr(e, "escape_traced", False) else e.callee_break


def caught_in_frame(insts: list[Inst], inst: Inst) -> bool:
    """What `inst` raises may reach a try's or with-block's handler of its code: through the cleanup
    handlers CPython runs while an exception leaves a handler (each ends in RERAISE)."""
    handler, seen = inst.handler, set()
    while handler is not None and handler not in seen:
        seen.add(handler)
        if is_user_handler(insts, handler):
            return True
        end = next((i for i in range(handler, len(insts)) if insts[i].name == "RERAISE"), None)
        handler = insts[end].handler if end is not None else None
    return False


def _given_up_break(tx, first: Handling, raised: Exception) -> Unsupported:
    why = str(getattr(raised, "graph_break", None) or "").split("\n")[0] if isinstance(raised, Unsupported) else \
        f"{type(raised.exc).__name__} raised while handling it"
    brk = Unsupported(BreakKind.EXCEPTION_RAISED, f"{type(first.exception.exc).__name__} is caught by a handler of "
                      f"{tx.code.co_qualname} that could not be traced ({why}): the frame runs as Python from where "
                      "it is raised")
    return brk.with_stack(tx.user_stack())


def exception_types(value: Value) -> type | tuple:
    """The class (or tuple of classes) of an `except` clause."""
    if isinstance(value, ClassValue):
        return value.obj
    if isinstance(value, TupleValue):
        return tuple(exception_types(item) for item in value.items)
    if isinstance(value, ConstantValue):
        return value.value
    raise Unsupported(BreakKind.EXCEPTION_RAISED, f"`except` over {value.describe()}")


# NOTE [Exceptions in with-blocks]: an exception raised in a with-block goes to the block's handler,
# PUSH_EXC_INFO; WITH_EXCEPT_START, which calls the manager's `__exit__(type, value, traceback)`; a true
# result suppresses the exception (the code goes on after the block), a false one re-raises it. The trace
# follows that handler as it follows a try's (NOTE [Exceptions caught while tracing]) when `__exit__` is a
# Python method of a user object (a class with __enter__/__exit__, contextlib.suppress, unittest's
# assertRaises context): WITH_EXCEPT_START inlines the call. A re-raise leaves the handler, which gives the
# handler up as before (the original exception, from the raising instruction). Torch's own managers
# (no_grad, autocast: ExitValue), generator-based managers and builtin __exit__ methods are not followed.
# The traceback argument is a TracebackValue: never None (`tb is None` is False), any other use of it is
# a graph break, except traceback.clear_frames(tb), which clears the frames of a traceback and has nothing
# to clear here (the raising frames were inlined: the compiled code never runs them), so it is None.
class TracebackValue(Value):
    """The traceback an inlined `__exit__` receives for an exception raised while tracing."""

    def python_type(self) -> type:
        return types.TracebackType

    def describe(self) -> str:
        return "Traceback(of an exception raised while tracing)"


def traced_exit(tx, inst: Inst, exc: BaseException | None = None) -> bool:
    """The with-block whose handler catches what `inst` raised has a Python `__exit__` of a user object, or is a
    generator context manager's (NOTE [Exceptions leaving generator context manager blocks] in generator_ctx.py)."""
    from .generator_ctx import GenMethodValue
    depth = inst.handler_depth
    exit_fn = tx.stack[depth - 1] if 0 < depth <= len(tx.stack) else None
    if isinstance(exit_fn, GenMethodValue):
        from .generator_ctx import exit_followed
        return exit_fn.name == "__exit__" and exit_followed(exit_fn.ctx, exc)
    return isinstance(exit_fn, BoundMethodValue) and isinstance(exit_fn.func, UserFunctionValue) and \
        isinstance(exit_fn.self_value, (ObjectValue, NewObjectValue)) and exit_fn.func.fn.__name__ == "__exit__"


def call_exit(tx) -> Value:
    """WITH_EXCEPT_START: the stack holds __exit__, lasti, the previous exception and the exception."""
    exc = tx.stack[-1]
    return tx.call(tx.stack[-4], [ClassValue(type(exc.value)), exc, TracebackValue()], {})


def clear_frames(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) == 1 and not kwargs and isinstance(args[0], TracebackValue):
        return ConstantValue(None)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "traceback.clear_frames of a traceback from outside")


def with_traceback(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`exc.with_traceback(None)` of an exception constant: the exception itself (NOTE [Exceptions made while
    tracing] gives each call's object no traceback, which is what None sets)."""
    if len(args) == 2 and not kwargs and isinstance(args[0], ConstantValue) and \
            isinstance(args[0].value, BaseException) and args[1].is_constant() and args[1].as_constant() is None:
        return args[0]
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "with_traceback of a traceback")


from .builtins import BUILTIN_HANDLERS  # noqa: E402  (builtin calls the translator answers itself)
from .module_hooks import TRACE_TIME  # noqa: E402  (functions the translator answers itself)

TRACE_TIME[traceback.clear_frames] = clear_frames
BUILTIN_HANDLERS[BaseException.with_traceback] = with_traceback


# NOTE [Temporaries cleared before return]: a caught exception's traceback names the transformed function's frame
# (NOTE [Tracebacks of caught exceptions]), and a frame object that outlives its call keeps its locals: with
# `except KeyError as e: STORE.append(e)`, framejit's temporaries (`___graph_out` holding the graph's outputs,
# `___pre0`, `___effect0`, a resume function's `___stack0`) and what they held stayed alive as long as the
# stored exception, where eager's frame holds only the user's locals (review revG G3: an object the user dropped,
# `t = None`, stayed alive; tensors pinned). A transformed function that rebuilds such an exception sets each
# of those locals to None and deletes it right before every RETURN_VALUE.
def temporaries_cleared(insts: list, argnames) -> list:
    """`insts` (a transformed function's body) clearing its `___` locals before each RETURN_VALUE when it
    rebuilds a caught exception's traceback (NOTE [Temporaries cleared before return])."""
    from bytecode import Instr
    from .mappings_runtime import fresh_exception_raised_at
    if not any(isinstance(i, Instr) and i.name == "LOAD_CONST" and i.arg is fresh_exception_raised_at for i in insts):
        return insts
    temps = dict.fromkeys(n for n in argnames if n.startswith("___"))
    temps.update(dict.fromkeys(i.arg for i in insts if isinstance(i, Instr) and i.name == "STORE_FAST"
                               and isinstance(i.arg, str) and i.arg.startswith("___")))
    out = []
    for inst in insts:
        if isinstance(inst, Instr) and inst.name == "RETURN_VALUE":
            for name in temps:
                out += [Instr("LOAD_CONST", None, lineno=inst.lineno), Instr("STORE_FAST", name, lineno=inst.lineno),
                        Instr("DELETE_FAST", name, lineno=inst.lineno)]
        out.append(inst)
    return out


# NOTE [Locals of a frame in a traceback]: a caught exception's rebuilt traceback names the transformed
# function's frame (NOTE [Tracebacks of caught exceptions]), and a frame outlives its call as long as a stored
# exception (`except KeyError as e: STORE.append(e)`) holds it. Eager's frame then holds the user's locals as
# they were at return; the transformed frame held only its arguments (NOTE [Temporaries cleared before return]),
# so `e.__traceback__.tb_frame.f_locals` and TracebackException(capture_locals=True) listed ['x'] where eager
# lists ['t', 'x', 'y'], and an object only a user local held (`a = Tracked()`, watched by a weakref or
# weakref.finalize) died at return where eager keeps it while the exception lives (review revJ J3, J5). A root
# frame whose trace caught an exception there and that returns without a break now stores every user local's
# final value under its own name before returning (the tensors among them are graph outputs), deletes the
# parameters the user's code deleted, and its ___ temporaries are cleared as before. A local whose value cannot
# be rebuilt is left out (as before). Not covered: a frame that breaks after catching (its final locals are
# the resume function's, another frame), and cell variables.
def final_locals(tx) -> dict[str, Any]:
    """The root frame's user locals at its return, in slot order, when a caught exception's traceback may name
    its frame (empty otherwise)."""
    if not getattr(tx.output, "frame_in_traceback", False):
        return {}
    order = {name: k for k, name in enumerate(tx.code.co_varnames)}
    names = sorted((n for n in tx.locals if n in order and not n.startswith("___")), key=order.get)
    return {name: tx.locals[name] for name in names if tx.locals[name] is not None}


def final_values(final: dict[str, Any]) -> list:
    """The values among `final` that the transformed function rebuilds (LazyArgs are loaded from their slots)."""
    from .values.base import LazyArg
    return [v for v in final.values() if not isinstance(v, LazyArg)]


def emit_final_locals(cg, rebuild, code: types.CodeType, final: dict[str, Any]) -> None:
    """Store `final` under their own names (every value loaded before any is stored) and delete the deleted
    parameters, before the return (NOTE [Locals of a frame in a traceback])."""
    from .values.base import LazyArg
    if not final or not any(i.name == "LOAD_CONST" and i.arg is _raised_at() for i in cg.insts):
        return
    stored = []
    for name, value in final.items():
        if isinstance(value, LazyArg) and value.name == name:
            continue
        start = len(cg.insts)
        try:
            cg.load_fast(value.name) if isinstance(value, LazyArg) else rebuild.emit(value)
        except Unsupported:
            del cg.insts[start:]
            continue
        stored.append(name)
    for name in reversed(stored):
        cg.store_fast(name)
    params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04)
                              + bool(code.co_flags & 0x08)]
    for name in params:
        if name not in final and not name.startswith("___"):
            cg.emit("DELETE_FAST", name)


def _raised_at():
    from .mappings_runtime import fresh_exception_raised_at
    return fresh_exception_raised_at
