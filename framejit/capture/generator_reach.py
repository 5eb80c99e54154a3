"""What a generator run ahead of its consumer can see (NOTE [Eager generators] in translator.py).

`reachable_values` walks the abstract values a generator is called with (its arguments and closure
cells) through containers, objects made while tracing, bound methods, iterators and closures, and
returns their ids: a mutation of one of them by the consumer could change what the generator yields.
Values read from outside are not followed: mutations of outside state are counted on their own
(`SideEffects.version`).
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported
from .values import (BoundMethodValue, CellValue, DictValue, IteratorValue, NewObjectValue, SequenceValue,
                     SetValue, UserFunctionValue, Value)


def closure_cells(fn: Any) -> list[Value]:
    """A function value's cells made while tracing, themselves (NOTE [Cells generators close over])."""
    return [c for c in getattr(fn, "closure", None) or () if isinstance(c, CellValue)]


# NOTE [Cells generators close over]: a generator run ahead of its consumer read its closure's cells when it
# ran, at creation; eager's reads them as it is iterated. A cell rebound (STORE_DEREF) or emptied (DELETE_DEREF)
# between the two (`t = x; g = gen(); t = x * 3; list(g)`) gave the old value (eager: the new one; a `del t`
# lost eager's NameError; review revA F4/F5). The cells themselves are reachable values, and a store into or
# delete of a cell made while tracing marks it touched (SideEffects.bump), so the generator's per-step check
# breaks where it was made and it runs lazily, as Python.
# NOTE [Defaults a run ahead reaches]: a generator function made in the frame with a default the frame made (`def
# gen(t, out=acc)` over `acc = []`) reads and writes that container through the default, which was not among the
# values its run ahead reaches: a write through it was no effect (the run ahead's append replayed when the
# generator was dropped unstarted, revAQ HIGH-2: eager acc [], framejit [1]), and the consumer's writes to it went
# unseen (HIGH-3: `y.extend(gen())` with `def gen(out=y): ... yield out[-1] + z` gave [1, 1, 2, 3] where eager
# gives [1, 1, 2, 4]). Its defaults are reached as its arguments are, so such a generator is traced lazily (NOTE
# [Generators that mutate state], [Containers grown while drawing]). A generator that draws another run-ahead
# one reaches what that one reaches (`reach_roots`: HIGH-6, `y.extend(v * 2 for v in inner())` with inner
# reading y).
def generator_roots(out, fn: Any, args: list, kwargs: dict) -> list[Any]:
    """What a generator called as `fn(*args, **kwargs)` reaches directly (NOTE [Eager generators])."""
    return [*args, *kwargs.values(), *closure_cells(fn), *function_defaults(fn), *out.side_effects.values()]


def function_defaults(fn: Any) -> list[Value]:
    """The defaults of a function value made while tracing (NOTE [Defaults a run ahead reaches]); map's function
    and filter's predicate read them too (`map(lambda v, src=y: src[-1] + v, xs)`)."""
    return [*(getattr(fn, "defaults", None) or ()), *(getattr(fn, "kwdefaults", None) or {}).values()]


def reachable_values(roots: list[Any]) -> set[int]:
    return set(reachable_value_map(roots))


def reachable_value_map(roots: list[Any]) -> dict[int, Value]:
    """The values reachable from `roots`, by id."""
    seen: dict[int, Value] = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen[id(v)] = v
        if isinstance(v, SequenceValue):
            todo.extend(v.items)
        elif isinstance(v, DictValue):
            todo.extend(v.items.values())
        elif isinstance(v, SetValue):
            continue
        elif isinstance(v, NewObjectValue):
            todo.extend(v.attrs.values())
        elif isinstance(v, BoundMethodValue):
            todo.extend([v.func, v.self_value])
        elif isinstance(v, IteratorValue):
            todo.extend([v.owner] if v.owner is not None else v.items)
            todo.extend(v.__dict__.get("reach_roots", ()))  # NOTE [Defaults a run ahead reaches]
        elif isinstance(v, UserFunctionValue):
            todo.extend(closure_cells(v))
            todo.extend([*(v.defaults or ()), *(v.kwdefaults or {}).values()])
            todo.extend(v.attr_values())
        elif isinstance(v, CellValue):
            todo.append(v.contents)
    return seen


def torch_state(out) -> tuple:
    """The global torch state traced code can change and computations read (NOTE [Torch state across yields]
    in handlers/blocks.py, NOTE [Torch state at each draw])."""
    return (out.grad_enabled, out.inference_mode, tuple(out.autocast_stack), out.__dict__.get("default_dtype"),
            out.__dict__.get("default_device"))


# NOTE [Torch state at each draw]: a generator run ahead of its consumer (NOTE [Eager generators] in translator.py)
# ran its body when it was made, and a lazy combinator (NOTE [Lazy combinators]) called map's function or a lazy
# generator argument's body when it was made, under the torch state of that moment; eager runs them at each draw,
# under the consumer's state. `with torch.no_grad(): g = (x * i for i in r)` then `list(g)` gave tensors without
# grad where eager's require it (review revR HIGH-1; also inference mode, autocast, `torch.set_default_dtype` or a
# `with torch.device(d)` block before `torch.ones(2)` in the body). Such an iterator keeps the state it computed
# under, and its per-step check compares it with the state at each draw (the draw that ends it too: eager runs the
# code after the last yield then): a different state breaks where it was made. A generator function's is first
# traced again lazily (`retry_lazy`: NOTE [Generators driven by send] in lazy_generators.py), its body stepped at
# each draw under the state then in force; a combinator (and a generator whose lazy trace is not taken) runs as
# Python from where it was made. Drawn under the state it was made under, nothing changes: it is captured as
# before.
def drawn_under_other_state(out, made: tuple, what: str, made_at: int | None) -> Unsupported | None:
    """The break for an iterator computed under torch state `made` drawn now (NOTE [Torch state at each
    draw]), or None when the state is the same."""
    if torch_state(out) == made:
        return None
    e = Unsupported(BreakKind.SIDE_EFFECT, f"{what} is drawn under other torch state (grad mode, inference mode, "
                    "autocast, default dtype or device) than it computed its items under: it runs lazily")
    e.root_index = made_at  # break where it was made
    return e


def run_ahead_effects(out) -> tuple[int, int]:
    """What a generator's run ahead is checked not to have done (see check_run_ahead_effects)."""
    return out.__dict__.get("effects_recorded", 0), out.__dict__.get("random_draws", 0)


# NOTE [Random draws of run-ahead generators]: a generator run ahead of its consumer (NOTE [Eager generators] in
# translator.py) that draws from torch's random generator (`torch.rand`, a training dropout: every op
# requests.draws_random counts, OutputGraph.random_draws) drew all its numbers when made; eager draws each
# item's at its draw. The consumer's own draws in between (`g = (torch.rand(2) for _ in r); a = torch.rand(2);
# list(g)`), or items never drawn (`next(g)` then `torch.rand(2)`), gave other numbers than eager's. Such a
# generator (only such a one: see the end of this note) is traced again lazily, stepped at each draw (NOTE [Generators driven by send] in
# lazy_generators.py), so its draws and the consumer's interleave as in eager; when that retrace is not taken
# it is a break at the call that made it. A lazy combinator whose function (or lazy generator argument) drew
# random numbers when it was made breaks where it was made when any other draw happened before one of its steps
# (lazy_combinators.Watch): it then runs as Python. Such a combinator left with rows eager never computes when
# the frame returns or breaks (`m = map(drop, xs); return next(m)`, a loop over it left by `break`, `islice` of
# it: review revV MED-1, the RNG state after the call differed) breaks where it was made too (RandomCombinator).
# A generator whose draws nothing can tell apart from eager's keeps its run ahead, one graph as before f0db2b4
# (review revV HIGH-1/2: `for i, h in enumerate(self.blocks(x))` over training dropouts, `zip(<dropout
# genexpr>, layers)` had become 3 graphs and raised under fullgraph=True, and each such genexpr cost a retrace):
# `RandomRunAhead` keeps the draw count at each of its yields and at its end; it is traced lazily only when
# (1) another random draw came after its run ahead and before one of its draws (its per-draw check, also run
# by each step of a combinator over it), or (2) when the frame returns or breaks, eager would have drawn fewer
# numbers from it than the run ahead did (`eager_draws`: its own position, or the rows of the zip, enumerate,
# map or starmap that drew it; a filter, chain, accumulate, ... that ended; anything else counts as unknown).
# A close() or throw() before its end counts the items drawn up to it (`IteratorValue.ended_at`), and a user
# exception that leaves the frame is checked as a return (review revA2 HIGH-1/HIGH-4: `g.close()` after one
# `next`, `contextlib.closing`, a `raise` inside a for over a dropout genexpr left eager's RNG state behind).
class RandomRunAhead:
    """The random draws of a run-ahead generator (NOTE [Random draws of run-ahead generators])."""

    def __init__(self, out, f: Any, iterator: Any, start: int, at_yields: list[int], end: int) -> None:
        self.out, self.f, self.iterator = out, f, iterator
        self.start, self.at_yields, self.end = start, at_yields, end

    def error(self) -> Unsupported:
        e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {self.f.__qualname__} draws random numbers in "
                        "another order or number than eager's: it runs lazily")
        e.retry_lazy, e.root_index = self.f.__code__, self.iterator.made_at
        return e

    def check(self) -> None:
        """Before each draw: no other random draw since the run ahead."""
        if self.out.__dict__.get("random_draws", 0) != self.end:
            raise self.error()

    def finished(self) -> bool:
        """Eager drew all of the run ahead's numbers by now."""
        k = eager_draws(self.iterator)
        if k is None or len(self.at_yields) != len(self.iterator.items):
            return False
        return (self.start if k == 0 else self.at_yields[k - 1] if k <= len(self.at_yields) else self.end) == self.end


_ENDS_ITS_ARGUMENTS = ("filter", "chain", "accumulate", "groupby", "pairwise", "zip_longest", "chain.from_iterable")


def eager_draws(it: Any) -> int | None:
    """How many times eager's code called next() on iterator `it` (the one that ended it counted), or None
    when unknown (NOTE [Random draws of run-ahead generators])."""
    consumer = getattr(it, "consumer", None)
    if consumer is None:
        if it.ended_at is not None:  # closed or thrown into: eager's next() calls stop there (generator_ends._end)
            return it.ended_at
        return it.index + (1 if it.exhausted else 0)
    result, what, position, start, lengths = consumer
    rows = eager_draws(result)
    if rows is None:
        return None
    ended = rows > len(result.items)
    if what in ("zip", "enumerate", "map", "starmap"):  # CPython's zip order: one item per argument per row
        full = min(rows, len(result.items))
        if not ended:
            return start + full
        if lengths is None and position:
            return None
        first_ended = position if lengths is None else min((i for i, n in enumerate(lengths) if n == full), default=position)
        return start + full + (1 if first_ended >= position else 0)
    return len(it.items) + 1 if what in _ENDS_ITS_ARGUMENTS and ended else None


def keep_random_run_ahead(out, f: Any, iterator: Any, start: int, at_yields: list[int]) -> RandomRunAhead:
    """Keep the random draws of generator `f`'s run ahead, checked at return and breaks."""
    record = RandomRunAhead(out, f, iterator, start, at_yields, out.__dict__.get("random_draws", 0))
    out.__dict__.setdefault("random_run_aheads", []).append(record)
    return record


class RandomCombinator:
    """A map, filter, starmap, ... whose making drew random numbers (NOTE [Random draws of run-ahead
    generators]): left with rows eager never computes when the frame returns or breaks, it breaks where made."""

    def __init__(self, result: Any, what: str) -> None:
        self.result, self.what = result, what

    def error(self) -> Unsupported:
        e = Unsupported(BreakKind.SIDE_EFFECT, f"{self.what}() drew random numbers for rows eager does not "
                        "compute: it runs as Python")
        e.root_index = self.result.made_at
        return e

    def finished(self) -> bool:
        k, n = eager_draws(self.result), len(self.result.items)  # map's function is called once per row drawn
        return k is not None and (k >= n if self.what in ("map", "starmap", "accumulate") else k > n)


def check_random_run_aheads(out, before: int | None = None) -> None:
    """When the frame returns, or breaks at root instruction `before`: eager drew every number a run-ahead
    generator or a combinator made before it drew."""
    for record in out.__dict__.get("random_run_aheads", ()):
        made_at = record.error().root_index
        if (before is None or made_at is None or made_at < before) and not record.finished():
            raise record.error()


def check_run_ahead_effects(out, before: tuple[int, int], f: Any, frame_eager: bool, child: Any) -> bool:
    """Whether the run ahead of generator `f` (translator `child`) drew random numbers (kept: RandomRunAhead);
    raises when it set torch state, drew with finalizers, or wrote a cell a closure it yielded reads (NOTE [Cells
    written after a yield])."""
    from .lazy_generators import lazy_from_now
    effects, draws = run_ahead_effects(out)
    if effects != before[0]:  # its grad-mode sets run where eager runs them
        raise lazy_from_now(Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} sets torch state: "
                                        "it runs lazily"), f.__code__)
    if draws != before[1] and frame_eager:
        e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} draws random numbers: it runs lazily")
        e.retry_lazy, e.frame_eager = f.__code__, frame_eager
        raise lazy_from_now(e, f.__code__)
    check_cells_written_after_yield(out, child, f, frame_eager)
    return draws != before[1]


# NOTE [Cells written after a yield]: a generator run ahead (NOTE [Eager generators] in translator.py) ran its whole
# body before its consumer drew; a closure it yields over one of its cells (`s = 1.5; yield lambda t: t * s; s = 3.0`),
# called by the consumer while eager's generator is still suspended at that yield, read the cell's value at the end of
# the run (3.0; eager 1.5: issue 12). A cell made while tracing that the run wrote (SideEffects.bump) after a yield
# whose value reaches it makes the generator traced again lazily (`retry_lazy`), stepped in the consumer's order.
def check_cells_written_after_yield(out, child: Any, f: Any, frame_eager: bool) -> None:
    from .lazy_generators import lazy_from_now
    touched = out.side_effects.touched
    for value, at in zip(child.yielded, child.yield_touched):
        later = {id(c) for c in touched[at:] if isinstance(c, CellValue)}
        if later and later & reachable_values([value]):
            e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} yields a closure over a cell "
                            "it writes later: it runs lazily")
            e.retry_lazy, e.frame_eager = f.__code__, frame_eager
            raise lazy_from_now(e, f.__code__) if frame_eager else e


__all__ = ["RandomCombinator", "RandomRunAhead", "check_cells_written_after_yield", "check_random_run_aheads",
           "check_run_ahead_effects", "closure_cells",
           "drawn_under_other_state", "eager_draws", "function_defaults", "generator_roots", "keep_random_run_ahead", "reachable_value_map", "reachable_values", "run_ahead_effects",
           "torch_state"]
