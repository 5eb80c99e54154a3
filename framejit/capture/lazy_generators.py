"""Generators driven with `send()`, traced step by step in the consumer's order.

NOTE [Generators driven by send]: a generator run ahead to completion (NOTE [Eager generators] in
translator.py) cannot take values sent in: `g = acc(); next(g); for t in xs: y = g.send(t)` (a
coroutine-style accumulator, often an endless `while True: t = yield total`) broke at every `send`
(run ahead, `total + None` raised, or the endless loop hit the trace limit). A generator function called
by a frame that drives generators with `send` (the name `send` is among the `co_names` of the calling
frame or of a frame above it in the trace) and whose body has no try/with block of its own becomes a
LazyGeneratorValue: a translator for its body, bound and not yet run, that `next(g)`, `g.send(v)`,
`g.__next__()`, `g.close()`, `for x in g`, `list(g)` resume up to the next `yield` (YIELD_VALUE
suspends it, Translator.suspend_at_yield, as for a generator context manager) with the value sent in
as the result of that `yield`. The body's steps thus interleave with the consumer's exactly as in
eager, so its side effects and the consumer's are recorded in eager's order (no run-ahead checks).

CPython's own rules are kept: a non-None value sent to a generator not started raises TypeError; a
generator that returns raises StopIteration(value) at the step that ends it and StopIteration() at any
later step; an exception its body raises ends it and reaches the consumer; close() of a generator
without handlers ends it and runs nothing. A StopIteration raised by the body (PEP 479's RuntimeError),
a return value that is not a constant, and `throw()` are graph breaks.

A suspended generator cannot be rebuilt in Python, so such a value is live from its call until it ends:
a graph break while it is live moves before the root frame's instruction that called the generator
function (break_before_generator_cms, as for a live generator context manager), so plain Python makes the
real generator and the resume function goes on from there; returning or storing it is a break there too
(`made_at`, codegen.escaped_generator). A suspended generator simply dropped when the frame returns is
unobservable: its body has no handler that close() would run. A generator from outside (an argument, a
global) is a real suspended frame: its `send` stays a graph break.
"""
from __future__ import annotations

import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, IteratorValue, Value


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


def wants_lazy(tx, f: Any) -> bool:
    from .normalize import has_handlers
    return (drives_with_send(tx) or uses_sent_values(f.__code__)) and not has_handlers(f.__code__)


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
        frame.yielded, frame.suspend_at_yield = [], True

    def python_type(self) -> type:
        return types.GeneratorType

    def describe(self) -> str:
        return f"generator {self.name} driven by send"

    def next(self) -> Value | None:
        if self.lent_at is not None:
            from .values.containers import lent_error
            raise lent_error(self)
        return self.resume(ConstantValue(None))

    def remaining(self) -> list[Value]:
        rest = []
        while (item := self.next()) is not None:
            rest.append(item)
        return rest

    def send(self, sent: Value) -> Value:
        if not self.started and not (sent.is_constant() and sent.as_constant() is None):
            raise UserException(TypeError("can't send non-None value to a just-started generator"))
        ended_now = not self.finished
        item = self.resume(sent)
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
        if self.finished:
            self.exhausted = True
            return None
        frame = self.frame
        if self.started:
            frame.stack[-1] = sent  # the result of the `yield` it is suspended at (YIELD_VALUE pushed None)
        self.started = True
        frame.suspended = False
        try:
            frame.run()
        except UserException as raised:
            self.finished = True  # `done` stays False: a break after this moves before the call that made it
            if isinstance(raised.exc, StopIteration):  # PEP 479: a RuntimeError, chained
                raise self.made_here(Unsupported(BreakKind.EXCEPTION_RAISED, "StopIteration raised inside the "
                                                 f"generator {self.name}: it runs as Python")) from None
            raise
        if frame.suspended:
            return frame.yielded.pop()
        self.finished = self.done = self.exhausted = True
        return None

    def made_here(self, e: Unsupported) -> Unsupported:
        """A break for a generator that has ended: where it was made, as while it is live."""
        e.root_index = self.made_at
        return e

    def close(self) -> Value:
        self.finished = self.done = True  # no handler of its own runs (wants_lazy): GeneratorExit ends it
        return ConstantValue(None)


class LazyGenMethodValue(Value):
    """`g.send`, `g.__next__` or `g.close` of a LazyGeneratorValue."""

    def __init__(self, gen: LazyGeneratorValue, name: str) -> None:
        self.gen = gen
        self.name = name

    def describe(self) -> str:
        return f"{self.name} of {self.gen.describe()}"


def lazy_gen_attr(gen: LazyGeneratorValue, name: str) -> Value:
    if name in ("send", "__next__", "close"):
        return LazyGenMethodValue(gen, name)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a {gen.describe()}")


def call_lazy_gen_method(tx, method: LazyGenMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    want = 1 if method.name == "send" else 0
    if kwargs or len(args) != want:
        raise UserException(TypeError(f"{method.name}() takes exactly {want} argument{'s' * (want != 1)} "
                                      f"({len(args) + len(kwargs)} given)"))
    gen = method.gen
    if method.name == "close":
        return gen.close()
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
    return gen


__all__ = ["LazyGenMethodValue", "LazyGeneratorValue", "call_lazy_gen_method", "drives_with_send",
           "lazy_gen_attr", "make_lazy_generator", "wants_lazy"]
