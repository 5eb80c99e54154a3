"""Generators made in the compiled region and never started, rebuilt after the graph by calling their function.

NOTE [Unstarted generators rebuilt by their call]: a generator made in the trace is run ahead (NOTE [Eager
generators] in translator.py) or traced lazily (NOTE [Generators driven by send]); one that outlives the graph
(returned, stored, inside a returned `zip`) broke where it was made (codegen.escaped_generator), as a suspended
generator cannot be rebuilt in Python. So `return whoo(t)`, `return (whoo(t), whoo(t + 1)), y` and `return
zip(range(3), whoo(t))` ran as Python from the call on, and raised under fullgraph=True where stock Dynamo
captures them (PyTorch's test_generator.py test_return_generator, test_return_tuple_generator, test_zip_generator,
test_zip_subgenerator). A generator nothing has drawn from is no suspended frame: CPython's object only holds the
function's bound arguments, and its body runs at the first draw, after the graph, in the state of that moment, as
in eager. Such a one is rebuilt by calling its function again with the same argument values
(`inline_noting_generators` keeps the call; `call_spec` is the recipe lazy_combinators.combinator_at calls after
the graph; the arguments are graph outputs: break_sites.live_tensors); the run ahead's yields stay unused graph
values. That holds only if the run ahead left what the call reaches as it was: its mutations of containers,
objects, cells and globals already make it lazy (NOTE [Generators that mutate state]), but it also steps
iterators, and a generator expression's argument is one: a run ahead that stepped an iterator made before the call
or one from outside (NOTE [Iterators stepped by a generator's run ahead] in values/containers.py) keeps the break,
as does a lazy one whose steps (a zip's draws) did. Kept as before too: a generator drawn from by the consumer (a
suspended frame; `next(g)` then `return g`), exhausted, closed, lent to a consumer other than a combinator at its
first row (`lent_at`), one whose body has handlers (NOTE [Generators with finalizers]) or whose run ahead drew
random numbers (RandomRunAhead decides), and generators called through anything but a plain call of the function
(bound methods, `functools.partial`, ...).
"""
from __future__ import annotations

import inspect
from typing import Any

from .breaks import BreakKind, Unsupported
from .lazy_generators import LazyGeneratorValue
from .values import ConstantValue, DictValue, IteratorValue, TupleValue, UserFunctionValue, Value
from .values.containers import _effects, next_serial, watch_all_steps, watch_steps


def inline_noting_generators(tx: Any, fn: UserFunctionValue, args: list, kwargs: dict) -> Value:
    """`fn(*args, **kwargs)` inlined; a generator it makes keeps the call, when its run ahead stepped no iterator
    made before the call or from outside (NOTE [Iterators stepped by a generator's run ahead])."""
    if not fn.fn.__code__.co_flags & inspect.CO_GENERATOR:
        return tx.inline(fn, args, kwargs)
    start = next_serial()
    result, stepped = watch_steps(lambda: tx.inline(fn, args, kwargs))
    code = result.frame.code if isinstance(result, LazyGeneratorValue) else getattr(result, "gen_code", None)
    if stepped == -1 and code is fn.fn.__code__ and not isinstance(result, LazyGeneratorValue) and \
            getattr(result, "made_at", None) is not None:  # NOTE [Run aheads that step an iterator from outside]
        e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {fn.fn.__qualname__} draws from an iterator from "
                        "outside: it runs lazily")
        e.retry_lazy, e.root_index = code, result.made_at
        raise e
    if isinstance(result, IteratorValue) and code is fn.fn.__code__ and "gen_call" not in result.__dict__ \
            and getattr(result, "made_at", None) is not None and result.index == 0 and not result.exhausted \
            and stepped >= start:
        result.gen_call, result.gen_out, result.call_serial = (fn, list(args), dict(kwargs)), tx.output, start
        result.own_serials = [(start, next_serial())]  # NOTE [Iterators a lazy step may draw]
    return result


# NOTE [Run aheads that step an iterator from outside]: how far the trace advanced an iterator from outside is
# replayed on the caller's object (NOTE [Iterators from outside]). A generator run ahead at its call drew all of
# such an iterator then, so one dropped unstarted (`g = gen(); return x + 1` with gen reading a global iterator)
# left it drained where eager leaves it untouched, and one drawn partly left it further on than eager. A run ahead
# that stepped an iterator from outside is traced again lazily (`retry_lazy`, as NOTE [Generators that mutate
# state]): its steps, and so the iterator's, follow the consumer's draws as in eager.
def watched_step(gen: LazyGeneratorValue, run: Any) -> Value | None:
    """One step of a lazy generator; one that stepped an older iterator or had effects is no longer rebuilt by
    its call as an argument of a combinator (`drawn_ok`)."""
    before = _effects(gen.frame.output)
    start = next_serial()
    item, stepped = watch_all_steps(run)
    own = gen.__dict__.setdefault("own_serials", [])
    own.append((start, next_serial()))
    if any(not any(lo <= s < hi for lo, hi in own) for s in stepped) or _effects(gen.frame.output) != before:
        gen.steps_changed = True
    return item


# NOTE [Iterators a lazy step may draw]: a lazy generator's step may step only iterators its own runs made (the
# serials made during its call and its steps): one the frame made after the call (`g = gen(box); it =
# iter(xs); box[0] = it; return zip(range(2), g), it`) is advanced by the step, and the generator rebuilt by
# its call would draw from it again after the graph (revAQ HIGH-0: eager list(it) [1, 2, 3], framejit [3]).


def _rebuildable(value: IteratorValue, drawn_ok: bool) -> bool:
    """`value` has a recorded call and eager's generator was never started: nothing was drawn from it, or (with
    `drawn_ok`, for an argument of a combinator at its first row) only the combinator's own run ahead drew."""
    if getattr(value, "gen_call", None) is None or value.ended_at is not None or value.looped:
        return False
    if not drawn_ok and (value.index != 0 or value.exhausted or value.lent_at is not None):
        return False
    if getattr(value, "frame_eager", False) or getattr(value, "finalizes", False):
        return False
    if isinstance(value, LazyGeneratorValue) and (value.started or value.finished) and \
            (not drawn_ok or getattr(value, "steps_changed", False)):
        return False  # a lazy one whose steps ran in the trace (a combinator's: only steps that changed nothing)
    if _made_defaults(value.gen_call[0]):
        return False
    records = value.gen_out.__dict__.get("random_run_aheads", ())
    return not any(getattr(r, "iterator", None) is value for r in records)


def _made_defaults(fn: Value) -> bool:
    """NOTE [Defaults made in the frame]: a default the trace made (`def gen(t, out=acc)` over a list made in the
    frame) is no outside object, so a run ahead's write through it is no recorded effect: rebuilding the generator
    by its call would run that write again after the graph (revAQ HIGH-1). Only constant defaults are rebuilt."""
    defaults = list(getattr(fn, "defaults", None) or ()) + list((getattr(fn, "kwdefaults", None) or {}).values())
    return any(not isinstance(d, ConstantValue) for d in defaults)


def call_parts(value: Value, drawn_ok: bool = False) -> list[Value]:
    """The function and arguments an unstarted generator is rebuilt from ([] when it is not rebuilt)."""
    if not isinstance(value, IteratorValue) or not _rebuildable(value, drawn_ok):
        return []
    fn, args, kwargs = value.gen_call
    return [fn, *args, *kwargs.values()]


def call_spec(value: Value, drawn_ok: bool = False) -> Value | None:
    """The recipe combinator_at rebuilds an unstarted generator from, or None."""
    if not call_parts(value, drawn_ok):
        return None
    fn, args, kwargs = value.gen_call
    return TupleValue([ConstantValue("call"), fn, TupleValue(list(args)), DictValue(dict(kwargs))])


def first_row_part(arg: Value, position: int) -> Value | None:
    """A combinator's argument that is a generator it has drawn no row from, rebuilt by its call, or None."""
    if isinstance(arg, IteratorValue) and arg.made_at is not None and position == 0:
        return call_spec(arg, drawn_ok=True)
    return None


def live_parts(value: IteratorValue) -> list[Value]:
    """What a generator's recorded call and a combinator's arguments hold (graph outputs they may need)."""
    call = getattr(value, "gen_call", None)
    recipe = getattr(value, "lazy", None)
    return ([call[0], *call[1], *call[2].values()] if call is not None else []) + \
        ([arg for arg, _ in recipe.parts] if recipe is not None else [])


__all__ = ["call_parts", "call_spec", "first_row_part", "inline_noting_generators", "live_parts", "watched_step"]
