"""Generators driven with `send()`, traced step by step in the consumer's order.

NOTE [Generators driven by send]: a generator run ahead to completion (NOTE [Eager generators] in
translator.py) cannot take values sent in: `g = acc(); next(g); for t in xs: y = g.send(t)` (a
coroutine-style accumulator, often an endless `while True: t = yield total`) broke at every `send`
(run ahead, `total + None` raised, or the endless loop hit the trace limit). A generator function called
by a frame that drives generators with `send` (the name `send` is among the `co_names` of the calling
frame or of a frame above it in the trace) and whose body has no try/with block of its own (one that has
is lazy once it changed state when run ahead: NOTE [Generators with finalizers traced lazily]) becomes a
LazyGeneratorValue: a translator for its body, bound and not yet run, that `next(g)`, `g.send(v)`,
`g.__next__()`, `g.close()`, `for x in g`, `list(g)` resume up to the next `yield` (YIELD_VALUE
suspends it, Translator.suspend_at_yield, as for a generator context manager) with the value sent in
as the result of that `yield`. The body's steps thus interleave with the consumer's exactly as in
eager, so its side effects and the consumer's are recorded in eager's order (no run-ahead checks).

CPython's own rules are kept: a non-None value sent to a generator not started raises TypeError; a
generator that returns raises StopIteration(value) at the step that ends it and StopIteration() at any
later step; an exception its body raises ends it and reaches the consumer; close() of a generator
without handlers ends it and runs nothing. A StopIteration raised by the body (PEP 479's RuntimeError),
and a return value that is not a constant are graph breaks; `throw()`:
NOTE [Exceptions thrown into suspended generators].

A suspended generator cannot be rebuilt in Python, so such a value is live from its call until it ends:
a graph break while it is live moves before the root frame's instruction that called the generator
function (break_before_generator_cms, as for a live generator context manager), so plain Python makes the
real generator and the resume function goes on from there; returning or storing it is a break there too
(`made_at`, codegen.escaped_generator). A suspended generator simply dropped when the frame returns is
unobservable: its body has no handler that close() would run (one with handlers: NOTE [Generators with
finalizers traced lazily]). A generator from outside (an argument, a
global) is a real suspended frame: its `send` stays a graph break.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import (BoundMethodValue, BuiltinValue, CellValue, ConstantValue, DictValue, IteratorValue,
                     NewObjectValue, ObjectValue, SequenceValue, SymFloatValue, SymNodeValue, TensorValue,
                     UserFunctionValue, Value)


def drives_with_send(tx) -> bool:
    """The calling frame, or one above it in the trace, names `send` (NOTE [Generators driven by send])."""
    frame = tx
    while frame is not None:
        if "send" in frame.code.co_names:
            return True
        frame = frame.parent
    return False


def uses_sent_values(code: Any) -> bool:
    """Some `yield` of `code` has its result used (`t = yield total`): a generator written for send()."""
    from .normalize import normalize
    insts = normalize(code).insts
    for i, inst in enumerate(insts):
        if inst.name != "YIELD_VALUE":
            continue
        after = next((x for x in insts[i + 1:] if x.name not in ("RESUME", "NOP")), None)
        if after is not None and after.name != "POP_TOP":
            return True
    return False


# NOTE [Generators that mutate state]: a generator run ahead of its consumer (NOTE [Eager generators] in
# translator.py) whose body mutates state the consumer can see (appends to an outside list, a nonlocal, a print
# of a logged value) was a graph break at the call that made it, so the generator and everything after ran as
# Python. It is now traced again lazily (`retry_lazy`, as for one that raises: NOTE [StopIteration leaving a
# generator body]): its body is stepped in the consumer's order, so its effects and the consumer's interleave
# as in eager. Where the lazy trace cannot go on (it escapes, a break while it is live) the retry falls back to
# that break. Consumers that draw it all at once where eager may stop early or runs code of its own between the
# draws (any, all, max/min with key=, functools.reduce, sum with an object start, itertools.chain: protocol.
# iterate -> remaining()) break where it was made when the drawing had effects (the SideEffects/effect counts of
# NOTE [Lazy generators drawn ahead]), as before 042e0c2 (review revY HIGH-1: `all(small(p) for p in params)`
# with `small` logging gave [2, 5, 1, 2] where eager gives [2, 5]); list(), tuple(), f(*g) draw it whole.
LAZY_CODES: set = set()  # (root code, generator code): NOTE [Lazy generators decided per frame]


def wants_lazy(tx, f: Any) -> bool:
    from .normalize import has_handlers
    read: list = []
    if _lazy_for_frame(tx.output, f.__code__) or runs_code_on_close(f, read):
        return True
    _guard_handler_names(tx.output, f, read)
    return (drives_with_send(tx) or uses_sent_values(f.__code__)) and not has_handlers(f.__code__)


# NOTE [Generators whose handlers run on close]: a run-ahead generator (NOTE [Eager generators]) whose normal path
# changes nothing is taken as ended; but one suspended at a `yield` and dropped (the frame returns, `del g`, a
# `break` out of a for loop over it) is closed by CPython, which throws GeneratorExit in: an `except
# GeneratorExit` / `except BaseException` / bare `except:` handler, a finally or a with-block's __exit__ runs
# then (review revW HIGH-1: `try: yield t + 1 except GeneratorExit: LOG.append("ge")` dropped after one next()
# logged nothing). A generator with an except clause that can catch GeneratorExit is lazy from the start (NOTE
# [Generators with finalizers traced lazily]), where the close-at-return and break rules apply. Only handlers
# whose every except clause names a class of `Exception` (a global or builtin name, or a tuple of them) are known
# to stay out of close(). A finally or
# with-block runs the same code on the normal path, where the run ahead sees what it changes (it stays run ahead),
# except what reads the exception: NOTE [Handlers that see the exception on close]. The names the except clauses
# were resolved through are guarded when the generator runs ahead (`MyErr = GeneratorExit` later must miss).
def runs_code_on_close(f: Any, read: list | None = None) -> bool:
    from .normalize import is_user_handler, normalize
    insts = normalize(f.__code__).insts
    handlers = {inst.handler for inst in insts if inst.handler is not None and is_user_handler(insts, inst.handler)}
    return any(not _exception_only(f, insts, h + 1, [] if read is None else read) for h in sorted(handlers))


def _guard_handler_names(out, f: Any, read: list) -> None:
    """Guards each global or builtin name `runs_code_on_close` resolved (NOTE [Lookup facts])."""
    from .sources import GlobalSource, ItemSource, ObjectSource, Ref
    for name in read:
        if name in f.__globals__:
            out.guard_id(GlobalSource(Ref(f.__globals__, "G"), name), f.__globals__[name])
            continue
        g = out.name_of(f.__globals__, "G")
        out.add_guard("BUILTIN_NOT_SHADOWED", f"{name!r} not in {g}", None, expected=f"{name} is the builtin")
        out.guard_id(ItemSource(ObjectSource(Ref(f.__builtins__, "B")), name), f.__builtins__[name])


def _exception_only(f: Any, insts: list, i: int, read: list) -> bool:
    """The except clauses from `insts[i]` on catch only `Exception` subclasses and re-raise the rest. A finally
    or with-block is not an except clause: its code runs on the normal path too, where the run ahead sees it."""
    while insts[i].name != "RERAISE":
        j = i
        while insts[j].name in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_NAME", "LOAD_DEREF", "LOAD_FAST", "BUILD_TUPLE"):
            j += 1
        if insts[i].name != "POP_TOP" and insts[j].name != "CHECK_EXC_MATCH":
            return True  # a finally or with-block
        names = [a[1] if isinstance(a, tuple) else a for a in (x.arg for x in insts[i:j] if x.name == "LOAD_GLOBAL")]
        if insts[i].name == "POP_TOP" or len(names) != j - i - (insts[j - 1].name == "BUILD_TUPLE"):
            return False  # a bare except, or a match not read from global names
        for name in names:
            cls = f.__globals__[name] if name in f.__globals__ else f.__builtins__.get(name)
            read.append(name)
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                return False
        i = insts[j + 1].arg  # POP_JUMP_IF_FALSE: the next clause
    return True


# NOTE [Handlers that see the exception on close]: a finally or with-block of a run-ahead generator runs the same
# code when the generator ends normally and when a suspended one is closed, except code that reads the exception
# being handled: `sys.exc_info()` / `sys.exception()` in the finally or in a function it calls, an `__exit__`
# written in Python that reads its exception arguments (a context manager that logs only when given one), a
# @contextmanager whose body has handlers (close() throws GeneratorExit into it). Run ahead, that code saw no
# exception and changed nothing; eager, dropping the generator suspended (the frame returns, `del g`, a `break`,
# a zip that stops early), passes GeneratorExit in. Such a read marks every frame of the trace above it
# (`reads_exception`); a generator with handlers (or one delegating to such) whose run ahead read one is traced
# again lazily (`seen_on_close`), where NOTE [Generators with finalizers traced lazily] applies: closed where
# eager closes it, or the frame runs eagerly. torch's own blocks (grad mode, autocast, device) ignore it.
def note_exception_read(tx) -> None:
    frame = tx
    while frame is not None:
        frame.reads_exception = True
        frame = frame.parent


def note_with(tx, ctx: Value) -> None:
    """BEFORE_WITH over `ctx` (NOTE [Handlers that see the exception on close])."""
    from .generator_ctx import GenCtxValue
    from .normalize import has_handlers
    if isinstance(ctx, GenCtxValue):
        fn = getattr(ctx.func, "fn", None)
        reads = not isinstance(fn, types.FunctionType) or has_handlers(fn.__code__)
    elif isinstance(ctx, (ObjectValue, NewObjectValue)):
        found = (k.__dict__["__exit__"] for k in ctx.python_type().__mro__ if "__exit__" in k.__dict__)
        exit_fn = next(found, None)
        reads = exit_fn is not None and (not isinstance(exit_fn, types.FunctionType) or _reads_exc_args(exit_fn))
    else:
        reads = False
    if reads:
        note_exception_read(tx)


def _reads_exc_args(fn: types.FunctionType) -> bool:
    import dis
    import inspect
    code = fn.__code__
    params = set(code.co_varnames[1:code.co_argcount])
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) or params & set(code.co_cellvars):
        return True
    for inst in dis.get_instructions(code):
        if inst.opname.startswith(("LOAD_FAST", "STORE_FAST_LOAD_FAST")):
            if params & set(inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)):
                return True
    return False


def seen_on_close(returned: Any, child: Any, f: Any) -> Any:
    """`returned` by a run-ahead generator's body; raises when its handlers read the exception (NOTE [Handlers
    that see the exception on close])."""
    from .normalize import has_handlers
    if getattr(child, "reads_exception", False) and (has_handlers(f.__code__) or child.delegates_finalizers):
        raise lazy_from_now(Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} has a handler that "
                                        "reads the exception it is closed with: it runs lazily"), f.__code__)
    return returned


# NOTE [Lazy generators decided per frame]: a generator with finalizers runs ahead of its consumer (NOTE [Eager
# generators]) until a run ahead changes state; the frame is then traced again with it lazy (NOTE [Generators
# with finalizers traced lazily]). That finding is remembered for the frame being compiled (its code) only, not
# for the generator's code everywhere: another frame drawing the same generator through enumerate/zip/any (which
# a lazy generator with finalizers cannot serve: remaining()) with arguments under which it changes nothing ran
# wholly eagerly once any frame had seen it change state (review revT T4). Within one frame the finding is a
# hint: a trace that took a remembered lazy generator and then could only run the frame eagerly is traced once
# more with that generator run ahead; if that run ahead changes state, it is lazy for this conversion for certain
# (`LazyDecisions.proven`) and the frame runs eagerly as before.
class LazyDecisions:
    """The lazy choices of one conversion of a frame, kept across its retraces (convert.convert_frame)."""

    def __init__(self, root_code: Any) -> None:
        self.root_code = root_code
        self.proven: set = set()  # generator codes whose run ahead changed state in this conversion
        self.run_ahead: set = set()  # remembered ones to run ahead anyway in this conversion
        self.used: set = set()  # remembered (not proven) ones the current trace made lazy

    def retry(self, e: Unsupported) -> bool:
        """Whether to trace the frame again after `e`, with a changed choice."""
        code = getattr(e, "retry_lazy", None)
        if code is not None:
            if code in self.proven:
                return False
            self.proven.add(code)
            self.run_ahead.discard(code)
            LAZY_CODES.add((self.root_code, code))
            return True
        unproven = self.used - self.proven
        if getattr(e, "frame_eager", False) and unproven:
            self.run_ahead |= unproven
            return True
        return False


def _lazy_for_frame(out, code: Any) -> bool:
    decisions = getattr(out, "lazy_decisions", None)
    if decisions is None or code in decisions.run_ahead:
        return False
    if code in decisions.proven:
        return True
    if (decisions.root_code, code) not in LAZY_CODES:
        return False
    decisions.used.add(code)
    return True


def lazy_from_now(e: Unsupported, code: Any) -> Unsupported:
    """Mark a break of a run-ahead generator with finalizers (or one over such a generator) that changed
    state or raised: the frame is traced again with `code` lazy (convert.py), else runs eagerly."""
    e.retry_lazy = code
    e.frame_eager = True
    return e


class LazyGeneratorValue(IteratorValue):
    """A generator made in the trace, resumed one step at a time (NOTE [Generators driven by send])."""

    def __init__(self, frame: Any, name: str, made_at: int | None) -> None:
        super().__init__([])
        self.frame = frame
        self.name = name
        self.made_at = made_at  # the root instruction that called the generator function
        self.root_index = made_at  # read by break_before_generator_cms while it is live
        self.started = False
        self.finished = False  # it returned, raised or was closed: later steps give StopIteration
        self.done = False  # ... and nothing of it is left that plain Python would need (not live)
        self.finalizes = False  # NOTE [Generators with finalizers traced lazily]
        frame.yielded, frame.suspend_at_yield = [], True
        frame.lazy_generator = self

    def python_type(self) -> type:
        return types.GeneratorType

    def describe(self) -> str:
        return f"generator {self.name} driven by send"

    def next(self) -> Value | None:
        if self.lent_at is not None:
            from .values.containers import lent_error
            raise lent_error(self)
        return self.resume(ConstantValue(None))

    def remaining(self, whole: bool = False) -> list[Value]:
        out = self.frame.output
        steps = out.__dict__.get("finalizer_steps", 0)
        if self.finalizes and not whole:  # NOTE [Generators with finalizers traced lazily]
            raise self.made_here(finalizer_break(f"the generator {self.name} has finalizers and is drawn by a "
                                                 "consumer that may stop early or interleave: it runs as Python"))
        from .values.containers import _effects
        from .values.iterator_claims import Claim, claim, collecting
        before, rest = _effects(out), []
        with collecting() as stepped:
            while (item := self.next()) is not None:
                rest.append(item)
        if not whole:  # a consumer that may stop early: NOTE [Iterators claimed by a run ahead]
            claim(list(stepped.values()), Claim(None, self.made_at))
        if not whole and (self.finalizes or out.__dict__.get("finalizer_steps", 0) != steps):
            raise self.made_here(finalizer_break(f"the generator {self.name} drives one with finalizers and is "
                                                 "drawn all at once where eager may stop early: it runs as Python"))
        if not whole and _effects(out) != before:  # NOTE [Generators that mutate state]
            raise self.made_here(Unsupported(BreakKind.SIDE_EFFECT, f"the generator {self.name} has effects and is "
                                             "drawn all at once where eager may stop early or interleave: it runs "
                                             "as Python"))
        return rest

    def send(self, sent: Value) -> Value:
        if not self.started and not (sent.is_constant() and sent.as_constant() is None):
            raise UserException(TypeError("can't send non-None value to a just-started generator"))
        ended_now = not self.finished
        return self._answer(self.resume(sent), ended_now)

    def _answer(self, item: Value | None, ended_now: bool) -> Value:
        """What send() or throw() gives for a step: the item yielded, else StopIteration(return value)."""
        if item is not None:
            return item
        returned = self.frame.return_value if ended_now else None
        if returned is None or (returned.is_constant() and returned.as_constant() is None):
            raise UserException(StopIteration())
        if not returned.is_constant():
            raise self.made_here(Unsupported(BreakKind.UNSUPPORTED_VALUE, f"the generator {self.name} returns "
                                             f"{returned.describe()} to send(): it runs as Python"))
        raise UserException(StopIteration(returned.as_constant()))

    def resume(self, sent: Value) -> Value | None:
        """One step: the next value yielded, or None once the body has returned."""
        from .values.iterator_claims import note_claimed_step
        note_claimed_step(self)  # NOTE [Iterators claimed by a run ahead]
        if self.finished:
            self.exhausted = True
            return None
        frame = self.frame
        if self.started:
            frame.stack[-1] = sent  # the result of the `yield` it is suspended at (YIELD_VALUE pushed None)
        self.started = True
        frame.suspended = False
        if self.finalizes:
            self._check_consumer()
        from .unstarted_generators import watched_step
        return watched_step(self, self._run_frame)  # NOTE [Unstarted generators rebuilt by their call]

    def _run_frame(self) -> Value | None:
        frame = self.frame
        try:
            frame.run()
        except UserException as raised:
            self.finished = True  # `done` stays False: a break after this moves before the call that made it
            if isinstance(raised.exc, StopIteration):  # NOTE [StopIteration leaving a generator body]
                raise pep479_error(raised.exc) from None
            raise
        if frame.suspended:
            return frame.yielded.pop()
        self.finished = self.done = self.exhausted = True
        return None

    def throw(self, exc: BaseException) -> Value:
        """`g.throw(exc)`: NOTE [Exceptions thrown into suspended generators]."""
        return self._answer(self._thrown(exc), True)

    def _thrown(self, exc: BaseException) -> Value | None:
        """Resume the body with `exc` raised at the `yield` it is suspended at: the next item, or None."""
        if not self.started or self.finished:  # CPython runs none of the body: the exception leaves at once
            self.started = self.finished = self.exhausted = True
            raise thrown_error(exc)
        frame = self.frame
        if not frame.suspended:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"throw() of the running {self.describe()}")
        if not self.finalizes:  # no handler: the exception leaves the frame at once
            self.finished = self.done = self.exhausted = True
            raise thrown_error(exc)
        if delegating(frame) and isinstance(exc, GeneratorExit) and closes_quietly(self):
            end_delegate(frame)  # close() closes the delegate first, then GeneratorExit leaves this frame
            self.finished = self.done = self.exhausted = True
            raise thrown_error(exc)
        if delegating(frame):  # CPython throws into the delegate of its `yield from`
            raise self.made_here(finalizer_break(f"throw() or close() of the generator {self.name} while it "
                                                 "delegates with `yield from`: it runs as Python"))
        from .caught_exceptions import caught_in_frame, follow_handler
        raised = thrown_error(exc)
        raised.thrown_in = True
        frame.suspended = False
        self._check_consumer()
        frame.thrown = exc
        try:
            if not follow_handler(frame, frame.current, raised):
                if caught_in_frame(frame.program.insts, frame.current):
                    raise self.made_here(finalizer_break(f"{type(exc).__name__} thrown into the generator "
                                                         f"{self.name} reaches a handler the trace cannot follow: it "
                                                         "runs as Python"))
                self.finished = True
                raise raised
            return self._run_frame()
        finally:
            frame.thrown = None

    def _check_consumer(self) -> None:
        """NOTE [Generators with finalizers traced lazily]: each step is counted (a drain that drove one is
        seen); a generator run ahead of its consumer (NOTE [Eager generators]) must not step it."""
        out = self.frame.output
        out.finalizer_steps = out.__dict__.get("finalizer_steps", 0) + 1
        if any(t.yielded is not None and not t.suspend_at_yield for t in out.tx_stack):
            raise self.made_here(finalizer_break(f"the generator {self.name}, which has finalizers, is drawn by a "
                                                 "generator run ahead of its consumer: the frame runs as Python"))

    def made_here(self, e: Unsupported) -> Unsupported:
        """A break for a generator that has ended: where it was made, as while it is live."""
        e.root_index = self.made_at
        return e

    def close(self) -> Value:
        """`g.close()`: GeneratorExit thrown in (NOTE [Exceptions thrown into suspended generators])."""
        if not self.finalizes or not self.started or self.finished:
            self.finished = self.done = True  # GeneratorExit ends it and runs nothing (not started, or no handlers)
            return ConstantValue(None)
        try:
            item = self._thrown(GeneratorExit())
        except UserException as raised:
            if not isinstance(raised.exc, GeneratorExit):
                raise
            self.done = True
            return ConstantValue(None)
        if item is not None:
            raise thrown_error(RuntimeError("generator ignored GeneratorExit"))
        returned = self.frame.return_value  # 3.13 gives the value returned on close; before, None
        return returned if sys.version_info >= (3, 13) and returned is not None else ConstantValue(None)


class LazyGenMethodValue(Value):
    """`g.send`, `g.__next__`, `g.close` or `g.throw` of a LazyGeneratorValue; `g.close`/`g.throw` of a generator
    run ahead (NOTE [Generators ended by close or throw] in generator_ends.py)."""

    def __init__(self, gen: LazyGeneratorValue, name: str) -> None:
        self.gen = gen
        self.name = name

    def describe(self) -> str:
        return f"{self.name} of {self.gen.describe()}"


def lazy_gen_attr(gen: LazyGeneratorValue, name: str) -> Value:
    from .generator_ends import ends_quietly
    if name in ("send", "__next__", "close") or name == "throw" and ends_quietly(gen):
        return LazyGenMethodValue(gen, name)  # throw: NOTE [Generators ended by close or throw]
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a {gen.describe()}")


def call_lazy_gen_method(tx, method: LazyGenMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from .generator_ends import close_generator, throw_into  # NOTE [Generators ended by close or throw]
    if method.name == "throw":
        return throw_into(tx, method.gen, args, kwargs)
    want = 1 if method.name == "send" else 0
    if kwargs or len(args) != want:
        raise UserException(TypeError(f"{method.name}() takes exactly {want} argument{'s' * (want != 1)} "
                                      f"({len(args) + len(kwargs)} given)"))
    gen = method.gen
    if method.name == "close":
        return close_generator(gen)
    if method.name == "send":
        return gen.send(args[0])
    return gen.send(ConstantValue(None))  # `__next__`: as send(None), StopIteration carries the return value


def make_lazy_generator(tx, child: Any, f: Any) -> LazyGeneratorValue:
    """The generator `f(...)` returns, its body `child` not yet run (NOTE [Generators driven by send])."""
    root = tx
    while root.parent is not None:
        root = root.parent
    gen = LazyGeneratorValue(child, f.__qualname__, root.current.index if root.current is not None else None)
    tx.output.__dict__.setdefault("live_lazy_generators", []).append(gen)
    from .normalize import has_handlers
    if has_handlers(f.__code__):  # NOTE [Generators with finalizers traced lazily]
        gen.finalizes = gen.frame_eager = True
        frame = tx
        while frame is not None:  # a generator that made it may drop it: it finalizes too
            frame.delegates_finalizers = True  # (a run-ahead one: NOTE [Generators with finalizers])
            outer = getattr(frame, "lazy_generator", None)
            if outer is not None:
                outer.finalizes = outer.frame_eager = True
            frame = frame.parent
    return gen


# NOTE [Generators with finalizers traced lazily]: a generator function whose body has a try/finally, an
# except or a with-block of its own (normalize.has_handlers) is a LazyGeneratorValue too (`finalizes`),
# stepped in its consumer's order, so what its body does (a log, a flag set and reset in `finally`, a
# stack push, `with torch.no_grad()` around its yields) is traced where eager does it, and its normal end
# (the step that returns: the `finally` runs then, in eager as here) too. What eager does when such a
# generator is dropped while suspended at a yield (close(): GeneratorExit thrown in, its handlers run, at
# CPython's point of release: a loop's `break`, `del g`, a list of them cleared, a traceback released) is
# not modelled. Instead, the trace keeps a generator only while that cannot happen unseen, and otherwise
# makes the frame run wholly eagerly (`frame_eager`: what it did before for any such generator that
# changes state), never a graph break, since a resume function's arguments would keep the real generator
# alive past the point where eager closes it:
# - the root frame returns while one is started and not ended (it was dropped, or is returned or kept
#   suspended): check_finalizers_at_return;
# - a user exception is raised while one is suspended (an exception leaving a loop over it closes it during
#   unwinding, before the handler; a traceback holding a callee's frame closes it after): raised_with_
#   suspended_finalizers, also for exceptions the trace would follow into a handler;
# - any graph break while one is made and not ended normally (`done`): the break would move before its
#   call (break_before_generator_cms) and hand the real generator to the resume function;
# - it escapes (returned, stored, live at a break: codegen.escaped_generator reads `frame_eager`);
# - close() while suspended; a consumer other than a for loop, next(), send() or a whole drain (list(),
#   tuple(), `[*g]`, f(*g): remaining(whole=True)), e.g. zip/enumerate/any/map, which drain it at once
#   where eager interleaves or stops early (remaining()).
# A lazy generator whose body made one finalizes too (it may drop it, and closing it closes a `yield from`
# delegate), and a run-ahead generator that made one runs its frame eagerly at a break (delegates_finalizers).
# Unstarted generators dropped run nothing (CPython's close() of a generator not started runs no code).


def finalizer_break(message: str) -> Unsupported:
    e = Unsupported(BreakKind.SIDE_EFFECT, message)
    e.frame_eager = True
    return e


# NOTE [Exceptions thrown into suspended generators]: `g.throw(exc)` and `g.close()` of a lazy generator whose
# body has handlers (`finalizes`) were graph breaks that ran the whole frame eagerly. CPython raises the
# exception inside the frame at the `yield` it is suspended at (close(): GeneratorExit), so its try/except and
# finally run there, and throw() answers what the body does next: the next item yielded, StopIteration(value)
# when it returns, or the exception that leaves it. The trace does the same: the exception is raised at the
# suspended YIELD_VALUE and the frame's handler is followed (NOTE [Exceptions caught while tracing]; a thrown
# GeneratorExit or RuntimeError is followed too: it is raised by CPython for real, not by a fake kernel), then
# the body runs on to its next yield or its end. close() answers None when GeneratorExit (or nothing) leaves
# the body, raises "generator ignored GeneratorExit" when it yields, and from 3.13 on gives back the value it
# returns. The thrown exception re-raised out of the body by a `finally` or an `except` that does not match
# (RERAISE of the same object) leaves it as traced, not given up (thrown_out). Kept as they were: a handler the
# trace cannot follow, or another exception raised inside one (given up: the frame runs as Python), a body
# suspended in a `yield from` (CPython throws into the delegate: delegating; close() is traced only where the
# delegate closes quietly and no handler covers the yield from: closes_quietly), a generator that is running,
# StopIteration thrown into one not ended (PEP 479). A generator not started, ended or with no handler runs
# none of its body: the exception leaves at once.
# NOTE [StopIteration leaving a generator body]: PEP 479: a StopIteration that leaves a generator's body (`raise
# StopIteration`, a `next(it)` of an exhausted iterator inside it) reaches the consumer as RuntimeError("generator
# raised StopIteration"), with the StopIteration as its `__cause__` and `__context__` (CPython's
# _PyErr_FormatFromCause). It was a graph break before the call that made the generator. The trace raises that
# RuntimeError at the step, as eager does; its per-call rebuild makes the cause too (mappings_runtime.
# fresh_exception), so a caught one returned or read (`e.__cause__`) is eager's.
def pep479_error(stop: StopIteration) -> UserException:
    error = RuntimeError("generator raised StopIteration")
    error.__cause__ = error.__context__ = stop
    return thrown_error(error)


def thrown_error(exc: BaseException) -> UserException:
    """The UserException of an exception CPython raises itself (a thrown one, close()'s RuntimeError)."""
    raised = UserException(exc)
    raised.user_raised = True  # NOTE [RuntimeErrors raised by the user]: not a fake kernel's
    return raised


def delegating(frame: Any) -> bool:
    """The frame is suspended at the yield of a `yield from` loop (SEND right before it)."""
    insts, at = frame.program.insts, frame.current.index if frame.current is not None else 0
    return at > 0 and insts[at - 1].name in ("SEND", "SEND_THEN_END")


def thrown_out(tx: Any, raised: Any) -> bool:
    """`raised` re-raises, out of a generator frame, the exception thrown into it (NOTE [Exceptions thrown into
    suspended generators]), and no handler of the frame that the trace did not follow covers it."""
    thrown = getattr(tx, "thrown", None)
    return thrown is not None and isinstance(raised, UserException) and raised.exc is thrown and \
        not tx._handles(raised)


def _finalizing(out) -> list:
    return [g for g in out.__dict__.get("live_lazy_generators", ()) if g.finalizes]


def finalizers_pending(out) -> bool:
    """A generator with finalizers was made by the trace and has not ended normally."""
    return any(not g.done for g in _finalizing(out))


def closes_quietly(g: LazyGeneratorValue) -> bool:
    """Closing `g` runs none of its code: it is suspended at a yield that no handler of its own covers (one in an
    `except` block with no finally around it), or in a `yield from` none covers whose delegate closes quietly
    too (NOTE [Exceptions thrown into suspended generators]). Dropping it then is unobservable, as for a
    generator without handlers."""
    from .caught_exceptions import caught_in_frame
    frame = g.frame
    if not frame.suspended or frame.current is None:
        return False
    insts, at = frame.program.insts, frame.current
    if not delegating(frame):
        return not caught_in_frame(insts, at)
    # 3.12+: the yield of a `yield from` is covered by the compiler's CLEANUP_THROW block, which the source's
    # own handler covers: the SEND, the yield and that block must all be outside the source's handlers
    region = [insts[at.index - 1], at] + ([insts[at.handler]] if at.handler is not None else [])
    return quiet_delegate(frame) and not any(caught_in_frame(insts, i) for i in region)


def _delegate(frame: Any) -> Value | None:
    """The iterator a frame suspended in a `yield from` delegates to (below the yield's result)."""
    return frame.stack[-2] if len(frame.stack) >= 2 else None


def quiet_delegate(frame: Any) -> bool:
    """Closing the delegate runs no code: a plain iterator, a generator whose body has no handler and no `yield
    from`, or a lazy one without finalizers."""
    from .generator_ends import _plain_body
    d = _delegate(frame)
    if isinstance(d, LazyGeneratorValue):
        return not d.finalizes and d.lent_at is None
    if not isinstance(d, IteratorValue) or d.lent_at is not None:
        return False
    code = getattr(d, "gen_code", None)
    return code is None or _plain_body(code)


def end_delegate(frame: Any) -> None:
    from .generator_ends import close_generator
    d = _delegate(frame)
    if isinstance(d, LazyGeneratorValue) or getattr(d, "gen_code", None) is not None:
        close_generator(d)


def suspended_finalizers(out) -> list:
    return [g for g in _finalizing(out) if g.started and not g.finished and g.frame.suspended and
            not closes_quietly(g)]


def raised_with_suspended_finalizers(out, exc: UserException) -> None:
    """NOTE [Generators with finalizers traced lazily]: a user exception raised while one is suspended."""
    for g in suspended_finalizers(out):
        raise g.made_here(finalizer_break(f"{type(exc.exc).__name__} raised while the generator {g.name}, which "
                                          "has finalizers, is suspended: the frame runs as Python"))


def check_finalizers_at_return(out) -> None:
    pending = [g for g in _finalizing(out) if g.started and not g.finished and not closes_quietly(g)]
    if len(pending) == 1 and dropped_at_return(out, pending[0]):
        return close_at_return(pending[0])
    for g in pending:
        raise g.made_here(finalizer_break(f"the generator {g.name}, which has finalizers, is still suspended "
                                          "when the frame returns: the frame runs as Python"))


# NOTE [Generators closed when the frame returns]: a suspended generator with handlers that only the root
# frame's locals hold is released when the frame returns: CPython clears the frame's locals after the return
# value is made, the generator's refcount drops to zero and its close() runs there (GeneratorExit at its yield:
# its `finally` and `except GeneratorExit` code), before the caller goes on. That frame ran wholly eagerly; the
# trace now closes it there too (close_at_return), after everything else the frame did, when that is certainly
# the point eager closes it (dropped_at_return): it was made by the root frame and a local of it still holds it;
# it is the only generator of the trace still suspended; nothing that outlives the frame reaches it (the return
# value, the values the replay stores: only containers, objects made here, functions, cells, tensors and
# constants are walked, anything else is taken to hold it); its own frame does not hold it (a cycle is freed
# later, by the collector). A close() that raises or yields (CPython prints "Exception ignored" and goes on)
# or cannot be traced runs the frame eagerly, as before.
_WALKED = (SequenceValue, DictValue, NewObjectValue, BoundMethodValue, UserFunctionValue, CellValue, ConstantValue,
           TensorValue, SymFloatValue, SymNodeValue, BuiltinValue, ObjectValue)


def _holds(roots: list, g: LazyGeneratorValue) -> bool:
    from .generator_reach import reachable_value_map
    reached = reachable_value_map(roots)
    return id(g) in reached or not all(isinstance(v, _WALKED) for v in reached.values())


def dropped_at_return(out, g: LazyGeneratorValue) -> bool:
    root = g.frame.parent
    if root is None or root.parent is not None or root.return_value is None or \
            not any(v is g for v in root.locals.values()):
        return False
    if any(o is not g and o.started and not o.finished for o in out.__dict__.get("live_lazy_generators", ())):
        return False
    own = [*g.frame.locals.values(), *g.frame.cells.values(), *g.frame.stack]
    return not _holds([root.return_value, *out.side_effects.values()], g) and not _holds(own, g)


def close_at_return(g: LazyGeneratorValue) -> None:
    """NOTE [Generators closed when the frame returns]."""
    try:
        g.close()
    except (Unsupported, UserException) as e:
        raise g.made_here(finalizer_break(f"closing the generator {g.name} when the frame returns ({e}) is not "
                                          "traced: the frame runs as Python")) from None
    if not g.finished:
        raise g.made_here(finalizer_break(f"the generator {g.name} yields when it is closed: the frame runs as "
                                          "Python"))


def drain_whole(tx, value: Value) -> list[Value]:
    """The items of `value` drawn at once by a consumer that draws them all with no code of its own between
    (list(), tuple(), `[*g]`, f(*g)): a lazy generator is stepped to its end (NOTE [Generators with
    finalizers traced lazily])."""
    if isinstance(value, LazyGeneratorValue):
        return value.remaining(whole=True)
    from .protocol import iterate
    from .torch_function_inline import length_hint_gated
    items = length_hint_gated(tx, value, iterate(tx, value))
    if isinstance(value, IteratorValue):
        from .values.iterator_claims import mark_ended_in_order
        mark_ended_in_order(value)  # drawn to its end (NOTE [Iterators claimed by a run ahead])
    return items


__all__ = ["LazyGenMethodValue", "LazyGeneratorValue", "call_lazy_gen_method", "check_finalizers_at_return",
           "drain_whole", "drives_with_send", "finalizer_break", "finalizers_pending", "lazy_gen_attr",
           "lazy_from_now", "make_lazy_generator", "raised_with_suspended_finalizers", "LazyDecisions",
           "suspended_finalizers", "thrown_error", "thrown_out", "wants_lazy", "LAZY_CODES", "note_exception_read",
           "note_with", "seen_on_close"]
