"""Generators with finalizers, traced lazily and closed where eager closes them.

NOTE [Generators closed when dropped]: a generator function whose body has a try/finally, try/except or
with-block of its own (has_handlers; NOTE [Handlers the compiler adds]) runs code when it is dropped before
its end: a loop's `break` or
`return` drops the loop's iterator, `del g`, a reassigned local or the frame's return drops a local, and
CPython then closes the generator (GeneratorExit is raised at the `yield` it is suspended at, so its
`finally:` runs there and then). Run ahead of its consumer (NOTE [Eager generators] in translator.py) such
a generator's effects happen at the wrong time, so each one that changed visible state made the whole
frame run eagerly (NOTE [Generators with finalizers]). Such generators are now LazyGeneratorValues
(`finalizes`, NOTE [Generators driven by send] in lazy_generators.py; a lazy generator whose `yield from`
delegates to one finalizes from then on: delegates_finalizers): their steps interleave with the
consumer's as in eager, their normal end runs the `finally:` code in order, and:
- after each traced instruction, while one of them is started and not ended, `close_dropped` finds those
  no longer reachable from any frame of the trace (stacks, locals, cells, a returned frame's return value,
  the effects to replay, a reachable suspended generator's frame) and closes them: the trace raises
  GeneratorExit at the `yield` (follow_exit: the frame's try/finally handlers and their cleanup blocks are
  followed as CPython's exception table says; 3.12's CLEANUP_THROW of a `yield from` passes it on to the
  enclosing handler; a delegate of `yield from` is closed first, as gen_close does). Checking after the
  instruction is CPython's order: the reference goes at the end of POP_TOP, STORE_FAST, DELETE_FAST, a
  CALL's argument release or RETURN_VALUE, and nothing observable runs between that and the next
  instruction. An explicit `g.close()` does the same.
- what cannot be modelled stays a graph break, moved before the root instruction that made the generator
  (a suspended generator cannot be rebuilt in Python; break_before_generator_cms), never an eager frame:
  a `yield` while closing (CPython's RuntimeError), an exception other than GeneratorExit leaving the
  `finally:`, a with-block whose `__exit__` the trace cannot follow (a generator-based manager's), an
  exception raised while it is live (NOTE [Exceptions in generator context manager blocks]), a consumer
  that would not draw every item right there (zip, enumerate, map, any, `in`: they are evaluated when made;
  only list(), tuple(), unpacking and `*g` drain it, which is what CPython does there: remaining(whole)).
"""
from __future__ import annotations

from .breaks import BreakKind, Unsupported, UserException
from .caught_exceptions import CaughtException, Handling, traced_exit
from .normalize import is_user_handler
from .values import ConstantValue

_CLEANUP = ["COPY", "POP_EXCEPT", "RERAISE"]


def follow_exit(tx, inst, e: UserException) -> bool:
    """GeneratorExit raised at `inst` of a generator being closed: continue at the handler CPython's exception
    table names (a try's or with-block's, or its cleanup block); False when it leaves the frame."""
    insts = tx.program.insts
    handler = inst.handler
    if handler is None:
        return False
    if insts[handler].name == "CLEANUP_THROW":  # 3.12+ `yield from`: re-raised to the enclosing handler
        return follow_exit(tx, insts[handler], e)
    if is_user_handler(insts, handler):
        if insts[handler + 1].name == "WITH_EXCEPT_START" and not traced_exit(tx, inst):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"closing the generator {tx.code.co_qualname} exits a "
                              "with-block whose __exit__ is not traced: it runs as Python")
        effects = tx.output.side_effects
        tx.handling.append(Handling(e, inst.index, effects.version, len(effects.touched)))
    elif [i.name for i in insts[handler:handler + 3]] != _CLEANUP:
        return False  # the compiler's StopIteration -> RuntimeError wrapper: GeneratorExit passes through
    del tx.stack[inst.handler_depth:]
    tx.kw_names = ()
    if inst.handler_lasti:
        tx.push(ConstantValue(inst.position))
    tx.push(CaughtException(e.exc, None, ()))
    tx.jump(handler)
    return True


def throw_exit(gen) -> None:
    """Close a started, suspended generator with finalizers: its handlers run now, traced."""
    frame = gen.frame
    at = frame.current  # the YIELD_VALUE it is suspended at
    insts = frame.program.insts
    before = insts[at.index - 1] if at.index > 0 else None
    if before is not None and before.name in ("SEND", "SEND_THEN_END") and len(frame.stack) >= 2:
        delegate = frame.stack[-2]  # suspended in `yield from`: gen_close closes the delegate first
        if getattr(delegate, "finalizes", False):
            delegate.close()
    gen.finished = True
    error = UserException(GeneratorExit())
    frame.closing, frame.suspended = True, False
    try:
        if not follow_exit(frame, at, error):
            gen.done = True
            return
        frame.run()
    except UserException as raised:
        if not isinstance(raised.exc, GeneratorExit):
            raise gen.made_here(Unsupported(BreakKind.EXCEPTION_RAISED, f"closing the generator {gen.name} raised "
                                            f"{type(raised.exc).__name__}: it runs as Python")) from None
        gen.done = True
        return
    finally:
        frame.closing = False
    if frame.suspended:
        raise gen.made_here(Unsupported(BreakKind.EXCEPTION_RAISED, f"the generator {gen.name} yields while it "
                                        "is closed (RuntimeError): it runs as Python"))
    gen.done = True


# NOTE [Finalizing generators run ahead]: a generator without handlers of its own is still run ahead of its
# consumer (NOTE [Eager generators] in translator.py); one whose body made (or made finalize) a generator
# with finalizers holds it in its frame (`for c in chunks(x): yield c`), so dropping it drops that one,
# whose `finally:` then runs: passed on to a resume function it would run late, as for NOTE [Generators with
# finalizers]. Such a run-ahead generator is marked frame_eager, as one with handlers of its own was.
def finalizers_made(out) -> int:
    """How many generators with finalizers the trace has made so far (a count that only grows)."""
    return out.__dict__.get("finalizers_made", 0)


def note_finalizing(out, gen) -> None:
    out.__dict__.setdefault("finalizing_generators", []).append(gen)
    out.finalizers_made = finalizers_made(out) + 1


def delegates_finalizers(out, gen) -> None:
    """A lazy generator (one driven by send, or one with `yield from`) that delegates to a generator with
    finalizers finalizes from now on: closing it closes the delegate, so it is closed where eager closes it."""
    if not gen.finalizes:
        gen.finalizes = True
        note_finalizing(out, gen)


def _frame_roots(t) -> list:
    if t.return_value is not None:
        return [t.return_value]  # it returned: its locals are being released
    return [*t.stack, *t.locals.values(), *t.cells.values()]


def close_dropped(out) -> None:
    """Close the started generators with finalizers that nothing in the trace refers to any more."""
    from .generator_reach import reachable_value_map
    gens = out.finalizing_generators
    gens[:] = [g for g in gens if not g.finished]
    if not any(g.started for g in gens) or out.__dict__.get("closing_dropped"):
        return
    running = {id(t) for t in out.tx_stack}
    roots = [v for t in out.tx_stack for v in _frame_roots(t)] + list(out.side_effects.values())
    seen = reachable_value_map(roots)
    walked: set[int] = set()
    while True:  # a suspended generator that is reachable keeps what its frame holds reachable
        more = [g for g in gens if id(g) in seen and id(g) not in walked and id(g.frame) not in running]
        if not more:
            break
        walked.update(id(g) for g in more)
        seen.update(reachable_value_map([v for g in more for v in _frame_roots(g.frame)]))
    dropped = [g for g in gens if g.started and id(g) not in seen and id(g.frame) not in running]
    out.closing_dropped = True
    try:
        for g in dropped:
            if not g.finished:
                throw_exit(g)
    finally:
        out.closing_dropped = False


# NOTE [Finalizing generators at breaks]: a break while a generator with finalizers is live moves before the
# root instruction that made it (break_before_generator_cms); that instruction then runs as Python and hands
# the real generator to the resume function as an argument, which the calling code keeps referenced until
# the resume function returns: a `break` out of a loop over it inside the resume function then finalizes
# it after code eager runs after the finalizer (NOTE [Generators with finalizers] in translator.py). Such
# a frame still runs eagerly, as before; a break anywhere else does not hand it on (it is made again by the
# resume function's own trace, or was never made, or was made and ended inside a callee that instruction
# calls). A generator the root frame's own call made is handed on even when it has ended in the trace (a
# value live at the break that cannot be rebuilt moves the break there: NOTE [Breaks moved earlier]).
def hands_on_finalizing(out, index: int | None) -> bool:
    """A break at root instruction `index` would pass a live generator with finalizers to the resume function."""
    return index is not None and any(
        getattr(g, "finalizes", False) and g.made_at == index and (g.made_by_root or not g.done)
        for g in out.__dict__.get("live_lazy_generators", ()))


__all__ = ["close_dropped", "delegates_finalizers", "finalizers_made", "follow_exit", "hands_on_finalizing",
           "note_finalizing", "throw_exit"]
