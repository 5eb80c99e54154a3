"""What zip, enumerate, map, filter, reversed and the lazy itertools read while they are consumed.

NOTE [Lazy combinators]: these combinators are evaluated when they are made (builtins.py,
itertools_support.py): the result is an iterator over rows computed from the items their arguments held
then. CPython computes each row when it is drawn, from the list, dict or set as it is *then*, and calls
map's function or filter's predicate then. The two agree only while what the rows are made of does not
change before they are drawn. `watch` records, for each argument, the container it reads lazily (a list,
a dict or set, a dict view's dict, the container of a list/dict/set iterator) and, for a list, the item
values it held; the combinator's iterator gets a `check`, run before each step (NOTE [Eager generators]),
and `made_at`, the root instruction that made it. The check fails, and the frame breaks where the
combinator was made (it then runs lazily, as Python), when:
- a list's items from the first position not yet drawn on (or the whole list, for combinators that do not
  draw one item per row) are not the same values any more, or its length changed;
- a dict or set was mutated at all (CPython raises or sees the new values);
- map's function or filter's predicate may read state that changed: any outside mutation, or one of a
  value made while tracing that its closure or items reach (as for generators); a builtin function over
  constant items reads nothing else;
- a generator or lazy combinator among its arguments fails its own check.
`made_at` also makes a combinator that outlives the graph (returned, stored, live at a graph break) a
break where it was made: eager code holds a lazy object there (codegen.escaped_generator), unless it can
be rebuilt lazily (NOTE [Combinators rebuilt at breaks]).

NOTE [Combinators rebuilt at breaks]: a for loop over `enumerate(...)` or `zip(...)` of a list whose body
breaks (a print, a data-dependent `if`) has the combinator live at the break. Breaking where it was made
instead ran the whole loop, and through it the rest of the frame, as Python (the break inside the loop
could not be taken, so the frame ran eagerly). Both combinators hold nothing but iterators over their
arguments and a count, so after `r` rows CPython's object is `enumerate(<argument's iterator advanced r
times>, start + r)` or `zip(<each argument's iterator advanced r times>, strict=...)`. `Recipe` keeps the
arguments and the positions the combinator started them at; `rebuild_spec` turns it into the plain data
`combinator_at` rebuilds a real, lazy CPython object from after the graph (an iterator over a list is the
list's own iterator at that index: it sees what the rest of the loop does to the list, as CPython's does).
Arguments it rebuilds: builtin lists, tuples, ranges, strings, dicts and dict views (only while the dict
was not mutated since the combinator was made: a changed dict breaks where it was made, as before),
tensors, nn.ModuleList/Sequential, list iterators, iterators over fixed items and nested enumerate/zip;
anything else (a generator, a user iterable) keeps the break where the combinator was made. The resume
function gets that object as its loop iterator and steps it in Python (carried_loops.step_value).
"""
from __future__ import annotations

import collections
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .generator_reach import RandomCombinator, closure_cells, drawn_under_other_state, function_defaults, reachable_values, \
    torch_state
from .lazy_generators import LazyGeneratorValue
from .unstarted_generators import call_parts, call_spec, first_row_part
from .values import ConstantValue, DictValue, IteratorValue, ListValue, SetValue, Value
from .values.base import MADE_ORDER
from .values.containers import deque_state
from .values.iterator_claims import Claim, claim, collect_steps


def _root_index(tx) -> int | None:
    root = tx
    while root.parent is not None:
        root = root.parent
    return root.current.index if root.current is not None else None


def _container(value: Value) -> tuple[Value | None, int]:
    """The container `value` is read from lazily, and the position it starts at."""
    from .values.mappings import DictViewValue
    if isinstance(value, DictViewValue):
        return value.mapping, 0
    if isinstance(value, (ListValue, DictValue, SetValue)):
        return value, 0
    if isinstance(value, IteratorValue) and value.owner is not None:
        return value.owner, value.index
    if isinstance(value, IteratorValue) and value.deque_of is not None:
        return value.deque_of, value.index  # NOTE [Deque iterators]
    return None, 0


def _reads_nothing_else(fn: Value | None, items: list[list[Value]]) -> bool:
    if fn is None:
        return True
    if not fn.is_constant() and not hasattr(fn, "fn"):
        return False
    target = fn.as_constant() if fn.is_constant() else getattr(fn, "fn", None)
    builtin = target is None or isinstance(target, types.BuiltinFunctionType) or isinstance(target, type) and \
        not isinstance(getattr(target, "__init__", None), types.FunctionType)  # NOTE [Objects map makes]
    return builtin and all(isinstance(v, ConstantValue) for column in items for v in column)


def _computes_under_torch_state(fn: Value | None, iterables: list[Value], columns: list[list[Value]]) -> bool:
    """The rows were computed by code that may read torch's global state: map's function (other than a
    builtin of the `builtins` module over constant items) or a lazy generator's body (NOTE [Torch state at
    each draw]). A builtin over a tensor or an object computes with it (`map(abs, [x])`, `starmap(pow, [(x,
    2)])`, `map(sum, [[x, x]])`: review revV HIGH-3, their rows had no grad where eager's have)."""
    if any(isinstance(v, LazyGeneratorValue) for v in iterables):
        return True
    if fn is None:
        return False
    if not (fn.is_constant() and getattr(fn.as_constant(), "__module__", None) == "builtins"):
        return True
    return not all(_constant_item(v) for column in columns for v in column)


def _constant_item(value: Value) -> bool:
    """A constant, or a tuple or list of them (a starmap row, map(sum, ...)'s lists)."""
    from .values import TupleValue
    if isinstance(value, ConstantValue):
        return True
    return type(value) in (TupleValue, ListValue) and value.python_type() in (tuple, list) and \
        all(_constant_item(v) for v in value.items)


def calls_made_early(tx, what: str, run):
    """`run()`: the calls of map's function or filter's predicate for every item, made when the combinator is
    made, where CPython makes them one by one as it is consumed. Only calls without effect may run early:
    one that mutates anything or raises is a graph break here (the combinator then runs in Python)."""
    side_effects = tx.output.side_effects
    version, n_touched = side_effects.version, len(side_effects.touched)
    first_new = next(MADE_ORDER)  # NOTE [Objects map makes]
    try:
        result, stepped = collect_steps(run)  # NOTE [Iterators claimed by a run ahead]: a function stepping one
    except UserException as e:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"the function of {what}() raises {type(e.exc).__name__} for some "
                          "item: it runs lazily, as Python") from None
    if side_effects.version != version or any(getattr(v, "serial", -1) < first_new
                                              for v in side_effects.touched[n_touched:]):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"the function of {what}() has side effects: it runs lazily, as Python")
    claim(stepped, Claim(None, _root_index(tx)))
    return result


_NO_RECIPE = object()


class Watch:
    """The state before draining a combinator's arguments (see `watch`)."""

    def __init__(self, tx, iterables: list[Value]) -> None:
        self.tx = tx
        self.lists: list[tuple[Value, list[Value], int]] = []
        self.mappings: list[Value] = []
        self.deques: list[tuple[Value, tuple]] = []
        self.checks = [v.check for v in iterables if isinstance(v, IteratorValue) and v.check is not None]
        for value in iterables:
            container, start = _container(value)
            if isinstance(container, ListValue):
                self.lists.append((container, list(container.items), start))
                if container.cls is collections.deque:  # NOTE [Deque iterators]
                    self.deques.append((container, deque_state(container)))
            elif container is not None:
                self.mappings.append(container)
        side_effects = tx.output.side_effects
        self.made = (side_effects.version, len(side_effects.ops), len(side_effects.touched))
        # each argument and the position its iterator starts at (NOTE [Combinators rebuilt at breaks])
        self.parts = [(v, v.index if isinstance(v, IteratorValue) else 0) for v in iterables]
        self.state = torch_state(tx.output)  # NOTE [Torch state at each draw] in generator_reach.py
        self.draws = tx.output.__dict__.get("random_draws", 0)  # NOTE [Random draws of run-ahead generators]

    def deques_changed(self) -> bool:
        return any(deque_state(d) != state for d, state in self.deques)

    def note_consumer(self, result: IteratorValue, what: str, columns: list[list[Value]], drew: bool) -> None:
        """Each iterator argument is drawn by `result` (generator_reach.eager_draws: NOTE [Random draws of
        run-ahead generators]); `drew`: making it drew random numbers, so it must be drawn as far as eager's
        computes its rows (RandomCombinator: review revV MED-1, `for t in map(drop, xs): break`)."""
        if drew:
            self.tx.output.__dict__.setdefault("random_run_aheads", []).append(RandomCombinator(result, what))
        lengths = [len(c) for c in columns] if columns else None
        for position, (value, start) in enumerate(self.parts):
            if isinstance(value, IteratorValue):
                value.consumer = (result, what, position, start, lengths)

    def needed(self, fn_reads_state: bool) -> bool:
        return bool(self.lists or self.mappings or self.checks or fn_reads_state)

    def finish(self, result: IteratorValue, what: str, per_row: bool, fn: Value | None = None,
               columns: list[list[Value]] = (), extra: Any = _NO_RECIPE, from_end: bool = False) -> IteratorValue:
        """`result` (the rows, already computed) checked as NOTE [Lazy combinators] says; `from_end`: the rows
        are a list's items from its end (NOTE [reversed over a list])."""
        out = self.tx.output
        drew = out.__dict__.get("random_draws", 0)  # NOTE [Random draws of run-ahead generators]
        self.note_consumer(result, what, columns, drew != self.draws)
        reads_state = not _reads_nothing_else(fn, list(columns))
        computes = _computes_under_torch_state(fn, [v for v, _ in self.parts], list(columns))
        if not self.needed(reads_state or computes or drew != self.draws):
            return result
        made_at = _root_index(self.tx)
        if made_at is None:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what}() over a mutable container: it runs lazily, as Python")
        side_effects = self.tx.output.side_effects
        version, n_ops, n_touched = self.made
        mapping_ids = {id(m) for m in self.mappings}
        # with values stored into outside state, read through globals and outside objects (review revY HIGH-2)
        held = [*closure_cells(fn), *function_defaults(fn), *(v for c in columns for v in c), *side_effects.values()]
        reachable = reachable_values(held) if reads_state else set()

        def mappings_changed() -> bool:
            return bool(mapping_ids) and (any(id(op[0]) in mapping_ids for op in side_effects.ops[n_ops:])
                                          or any(id(v) in mapping_ids for v in side_effects.touched[n_touched:]))

        def changed() -> bool:
            for container, items, start in self.lists:
                now = container.items
                if from_end and container.cls is list:  # NOTE [reversed over a list]
                    if len(now) < len(items) or any(now[i] is not items[i] for i in range(len(items))):
                        return True
                    continue
                low = start + result.index if per_row else 0
                if len(now) != len(items) or any(now[i] is not items[i] for i in range(low, len(now))):
                    return True
            if mappings_changed() or self.deques_changed():
                return True
            return reads_state and (side_effects.version != version or any(
                id(v) in reachable for v in side_effects.touched[n_touched:]))

        def check() -> None:
            for inner in self.checks:
                inner()
            other_state = drawn_under_other_state(out, self.state, f"{what}()", made_at) if computes else None
            if other_state is None and drew != self.draws and out.__dict__.get("random_draws", 0) != drew:
                other_state = Unsupported(BreakKind.SIDE_EFFECT, f"{what}() drew random numbers when made and more "
                                          "were drawn before this draw: it runs as Python")
                other_state.root_index = made_at  # NOTE [Random draws of run-ahead generators]
            if other_state is not None:  # NOTE [Torch state at each draw]
                raise other_state
            if changed():
                e = Unsupported(BreakKind.SIDE_EFFECT, f"what {what}() reads changed while it is consumed: it "
                                "runs lazily, as Python")
                e.root_index = made_at
                raise e
        result.check = check
        result.made_at = made_at
        if extra is not _NO_RECIPE and not reads_state:
            result.lazy = Recipe(what, extra, self.parts, mappings_changed)
        return result


# NOTE [reversed over a list]: CPython's list_reverseiterator keeps an index, from len - 1 down to 0, and
# reads `lst[index]` while the index is below the list's length *then*. Items appended while it is consumed
# (a loop over `reversed(tape)` whose body records onto the tape: a Python autograd's backward pass) are never
# read: the rows stay right while the items it held when made are the same values at the same positions (the
# list may only have grown). Not only the rows still to draw: an enumerate or zip over it drains it when made,
# so its own position says nothing. Any other change breaks where it was made, as for the other combinators.
class Recipe:
    """How to rebuild a combinator lazily (NOTE [Combinators rebuilt at breaks]): `kind` ("enumerate" or
    "zip"), `extra` (enumerate's start, zip's strict), the arguments with the positions their iterators
    started at, and whether a dict it reads was mutated since it was made."""

    def __init__(self, kind: str, extra: Any, parts: list[tuple[Value, int]], mappings_changed) -> None:
        self.kind, self.extra, self.parts, self.mappings_changed = kind, extra, parts, mappings_changed


_REBUILT_TYPES = (list, tuple, range, str, dict, type({}.keys()), type({}.values()), type({}.items()))


def _plain_iterable(value: Value) -> bool:
    """An argument whose `iter()` is its builtin one, made anew without effect (NOTE [Combinators rebuilt
    at breaks])."""
    import torch
    from .values import TensorValue
    if isinstance(value, TensorValue):
        return True
    cls = value.python_type()
    if cls in _REBUILT_TYPES:
        return True
    return cls in (torch.nn.ModuleList, torch.nn.Sequential) and getattr(value, "source", None) is not None


def _part_spec(value: Value, position: int) -> Value | None:
    from .values import TupleValue
    if isinstance(value, IteratorValue):
        if value.source is not None:
            return None  # an iterator from outside: its own position is the caller's (NOTE [Lent iterators])
        if getattr(value, "lazy", None) is not None:
            return _spec(value, position, exhausted=False)
        if first_row_part(value, position) is not None:  # NOTE [Unstarted generators rebuilt by their call]
            return first_row_part(value, position)
        if value.made_at is not None or value.deque_of is not None:
            return None  # a generator's; a deque's (NOTE [Deque iterators])
        if isinstance(value.owner, ListValue) and value.owner.python_type() is list:
            return TupleValue([ConstantValue("at"), value.owner, ConstantValue(position)])
        if value.owner is None:  # fixed items (a tuple's, a range's iterator)
            return TupleValue([ConstantValue("at"), TupleValue(list(value.items[position:])), ConstantValue(0)])
        return None
    if not _plain_iterable(value):
        return None
    return TupleValue([ConstantValue("at"), value, ConstantValue(position)])


def _spec(value: IteratorValue, rows: int, exhausted: bool) -> Value | None:
    from .values import TupleValue
    recipe = value.lazy
    if recipe.mappings_changed():
        return None
    extra = recipe.extra + rows if recipe.kind == "enumerate" else recipe.extra
    parts = []
    for arg, start in recipe.parts if not exhausted else ():
        part = _part_spec(arg, start + rows)
        if part is None:
            return None
        parts.append(part)
    return TupleValue([ConstantValue("combinator"), ConstantValue(recipe.kind), ConstantValue(extra),
                       ConstantValue(exhausted), TupleValue(parts)])


def rebuild_spec(value: IteratorValue) -> Value | None:
    """What `combinator_at` rebuilds `value` from after the graph, or None when it cannot be rebuilt
    lazily (then it breaks where it was made: NOTE [Combinators rebuilt at breaks])."""
    if getattr(value, "lazy", None) is None:
        return call_spec(value)  # NOTE [Unstarted generators rebuilt by their call]
    return _spec(value, value.index, value.exhausted)


def spec_children(value: IteratorValue) -> list[Value]:
    """The arguments a rebuildable combinator reads (loaded before it: NOTE [One object per value])."""
    recipe = getattr(value, "lazy", None)
    if recipe is None:
        return call_parts(value)  # NOTE [Unstarted generators rebuilt by their call]
    rows = 0 if value.exhausted else value.index  # a generator drawn from by no row: its call's parts instead
    return [part for arg, start in recipe.parts
            for part in (call_parts(arg, True) if first_row_part(arg, start + rows) is not None else [arg])]


_END = object()
_SETSTATE_ITERATORS = (type(iter([])), type(iter(())), type(iter(range(0))), type(iter("")))


def combinator_at(spec: tuple) -> Any:
    """Runtime: the lazy CPython object `spec` (from rebuild_spec) describes."""
    tag = spec[0]
    if tag == "call":  # NOTE [Unstarted generators rebuilt by their call]
        _, fn, args, kwargs = spec
        return fn(*args, **kwargs)
    if tag == "at":
        _, iterable, position = spec
        iterator = iter(iterable)
        if position and type(iterator) in _SETSTATE_ITERATORS:
            iterator.__setstate__(position)
        else:
            for _ in range(position):
                if next(iterator, _END) is _END:
                    break
        return iterator
    _, kind, extra, exhausted, parts = spec
    # an exhausted one stays exhausted whatever its arguments do later, as CPython's does
    iterators = [combinator_at(part) for part in parts] if not exhausted else [iter(())]
    if kind == "enumerate":
        return enumerate(iterators[0], extra)
    return zip(*iterators, strict=extra)


def watch(tx, iterables: list[Value]) -> Watch:
    """Call before draining the combinator's arguments; then `.finish(result, ...)` (NOTE [Lazy combinators])."""
    return Watch(tx, list(iterables))


__all__ = ["Recipe", "Watch", "combinator_at", "rebuild_spec", "spec_children", "watch"]
