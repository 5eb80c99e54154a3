"""Containers: tuples, lists, dicts, slices and iterators over abstract values.

Lists, dicts and iterators are mutated in place by the handlers. A list or dict that came from outside
(it has a Source) is reported to SideEffects first (`tx.output.side_effects.mutate_container`), which
replays its final contents after the graph.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import math
import types
from typing import Any

from ..breaks import BreakKind, Unsupported, UserException
from ..sources import Source
from .base import MADE_ORDER, ConstantValue, Value
from .iterator_claims import Claim, check_claims, claim, collecting, mark_ended_in_order, note_claimed_step


class SequenceValue(Value):
    kind: type = tuple

    def __init__(self, items: list[Value], source: Source | None = None, cls: type | None = None) -> None:
        self.items = list(items)
        self.source = source
        self.cls = cls or self.kind
        self.serial = next(MADE_ORDER)  # NOTE [Values made in order]

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        return all(i.is_constant() for i in self.items)

    def as_constant(self) -> Any:
        values = [i.as_constant() for i in self.items]
        if self.cls in (tuple, list):
            return self.cls(values)
        if hasattr(self.cls, "_fields"):
            return self.cls(*values)
        if getattr(self, "maxlen", None) is not None:  # NOTE [Deques with a maxlen] (mappings.py)
            return self.cls(values, self.maxlen)
        return self.cls(values)

    def describe(self) -> str:
        return f"{self.cls.__name__}({', '.join(i.describe() for i in self.items)})"


class TupleValue(SequenceValue):
    kind = tuple


class ListValue(SequenceValue):
    kind = list


class DictValue(Value):
    """A dict with constant keys (str, int, ...), in insertion order."""

    def __init__(self, items: dict[Any, Value], source: Source | None = None, cls: type = dict) -> None:
        self.items = dict(items)
        self.source = source
        self.cls = cls
        self.serial = next(MADE_ORDER)  # NOTE [Values made in order]

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        from .mappings import IdentityKey
        return all(v.is_constant() for v in self.items.values()) and \
            not any(isinstance(k, IdentityKey) for k in self.items)  # NOTE [Sets of tensors]

    def as_constant(self) -> Any:
        from .mappings import note_key_read  # NOTE [Hook ids that never leave the trace]
        for k in self.items:
            note_key_read(k)
        items = ((k, v.as_constant()) for k, v in self.items.items())
        if type(self.items) is collections.OrderedDict:  # NOTE [Reordered OrderedDicts made in the trace]
            from ..mappings_runtime import make_reordered
            underlying = {k: self.items[k].as_constant() for k in dict.keys(self.items)}
            return make_reordered(self.cls, underlying, tuple(self.items))
        return self.cls(dict(items)) if self.cls is types.MappingProxyType else self.cls(items)

    def describe(self) -> str:
        return f"dict({', '.join(f'{k!r}: {v.describe()}' for k, v in self.items.items())})"


class SetValue(Value):
    """A set of hashable Python constants (sets of tensors or objects are not modelled: identity
    hashing would make their behaviour depend on object ids). Sets made while tracing are mutable;
    a set from outside is guarded by value and may not be mutated (that is a graph break).

    NOTE [Set order]: CPython iterates a set in the order of its hash table, which depends on the set's
    history (table size, insertions, deletions), not only on its elements: `set(s)` may iterate
    differently from `s`. `exact` means `items` is a set the trace built by the same CPython operations,
    in the same order, as the program does (BUILD_SET, SET_ADD, set(iterable), operators and copies of
    exact sets), so its order is the program's; such a set is kept, not copied. Otherwise `order` is the
    order the real set had when it was read (a set from outside, guarded by that order), valid until the
    trace changes it; with neither, iterating a set of more than one element is a graph break
    (identity_keys.set_items)."""

    def __init__(self, items: set, source: Source | None = None, cls: type = set, *, exact: bool = False) -> None:
        # a plain set subclass made in the frame holds a real instance of it (NOTE [Plain set subclasses])
        self.items = items if exact and type(items) in (set, cls) and isinstance(items, set) else set(items)
        self.source = source
        self.cls = cls
        self.exact = exact
        self.order: list | None = None  # NOTE [Set order]
        self.frozen: frozenset | None = None  # the real frozenset from outside, when it is one
        self.serial = next(MADE_ORDER)  # NOTE [Values made in order]

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        from .mappings import IdentityKey
        if len(self.items) > 1 and self.frozen is None and not (self.exact and issubclass(self.cls, set)):
            return False  # NOTE [Set order]: no real set with the program's order to fold with
        return not any(isinstance(k, IdentityKey) for k in self.items)  # NOTE [Sets of tensors]

    def as_constant(self) -> Any:
        if self.frozen is not None:
            return self.frozen
        if self.exact and issubclass(self.cls, set):
            return self.cls(self.items) if len(self.items) < 2 else self.items
        return self.cls(self.items)

    def describe(self) -> str:
        return f"{self.cls.__name__}({sorted(map(repr, self.items))})"


class SliceValue(Value):
    def __init__(self, start: Value, stop: Value, step: Value) -> None:
        self.parts = (start, stop, step)

    def python_type(self) -> type:
        return slice

    def is_constant(self) -> bool:
        return all(p.is_constant() for p in self.parts)

    def as_constant(self) -> Any:
        return slice(*(p.as_constant() for p in self.parts))

    def rebuild_call(self) -> tuple:
        """NOTE [Slices rebuilt at breaks]: `slice(start, stop, step)` from its parts after the graph (codegen's
        `emit`). A slice bounded by a tensor (`x[:n]`, `n = (x > 0).sum()`) live at the data-dependent break
        its getitem takes (on the stack for BINARY_SUBSCR) could not be rebuilt, and the frame ran wholly
        eagerly; its parts are rebuilt like any value (a graph output, a symbolic int, a constant)."""
        return slice, list(self.parts)


# NOTE [Slices from outside]: a slice is immutable; one passed in (`x[sl]` with `sl` an argument or an
# attribute, a slice live at a break) is a SliceValue whose parts are read through `.start`, `.stop`, `.step`
# like any int (guarded, or dynamic ints once they change). It was "L['sl'] is a slice" and the frame ran
# wholly eagerly. Slices of other objects (tensors, floats) stay as they were.
def outside_slice(out, obj: slice, source) -> SliceValue:
    from ..sources import AttrSource
    from .builder import wrap
    out.guard_type(source, slice)
    return SliceValue(*(wrap(out, getattr(obj, p), AttrSource(source, p)) for p in ("start", "stop", "step")))


# NOTE [Iterators stepped by a generator's run ahead]: a generator made in the trace can be rebuilt after the graph by
# calling its function again only if its run ahead (or its steps) left what it was called with as it was: a
# generator expression's argument is an iterator, which the run ahead drains (NOTE [Unstarted generators rebuilt by
# their call] in unstarted_generators.py). Each IteratorValue has a `serial` (the order in which they were made);
# `watch_steps` runs a part of the trace and answers the smallest serial of an iterator stepped meanwhile (-1 for
# an iterator from outside, whose position is the caller's), so that an iterator older than the call is seen.
_SERIALS = itertools.count()
_STEPPED = [math.inf]


_STEPPED_ALL: list = []  # the serials stepped under each watch_all_steps, innermost last


def note_step(iterator: Any) -> None:
    note_claimed_step(iterator)  # NOTE [Iterators claimed by a run ahead]
    serial = -1 if getattr(iterator, "source", None) is not None else getattr(iterator, "serial", -1)
    if serial < _STEPPED[0]:
        _STEPPED[0] = serial
    for stepped in _STEPPED_ALL:
        stepped.add(serial)


def watch_all_steps(run: Any) -> tuple[Any, set]:
    """`run()`, and the serials of every iterator stepped while it ran."""
    stepped: set = set()
    _STEPPED_ALL.append(stepped)
    try:
        return run(), stepped
    finally:
        _STEPPED_ALL.remove(stepped)


def next_serial() -> int:
    return next(_SERIALS)


def watch_steps(run: Any) -> tuple[Any, float]:
    """`run()`, and the smallest serial of an iterator stepped while it ran (math.inf: none)."""
    outer, _STEPPED[0] = _STEPPED[0], math.inf
    try:
        result = run()
    finally:
        stepped, _STEPPED[0] = _STEPPED[0], min(outer, _STEPPED[0])
    return result, stepped


class IteratorValue(Value):
    """An iterator over a known list of values (range, list, tuple, dict keys, zip, enumerate, ...).

    NOTE [Live iteration]: an iterator over a list, dict or set made by `iter()`/GET_ITER keeps its
    container as `owner`, as CPython's iterators do. Over a list it shares the list's items, so items
    appended or removed by the loop body are seen (or skipped) exactly as CPython sees them; over a dict
    or a set, a change of size raises CPython's RuntimeError at the next step, and other key changes are
    a graph break."""

    def __init__(self, items: list[Value], owner: Value | None = None) -> None:
        self.owner = owner
        self.items = owner.items if isinstance(owner, ListValue) else list(items)
        self.index = 0
        self.serial = next(_SERIALS)  # NOTE [Iterators stepped by a generator's run ahead]
        if owner is not None and not isinstance(owner, ListValue):
            self.keys = list(owner.items)

    made_at: int | None = None  # made by a generator function: the root instruction that called it
    check: Any = None  # a generator's iterator: called before each step (NOTE [Eager generators])
    gen_code: Any = None  # a generator's iterator: the generator function's code (NOTE [Generators ended by close or throw])
    exhausted = False  # CPython's iterators stay exhausted once they stop (items appended later are not seen)
    ended_at: int | None = None  # ended by close() or throw() before it stopped: how many items eager drew
    start: int | None = None  # a list iterator from outside: its position at entry (NOTE [Iterators from outside])
    reverse_from: int | None = None  # a reversed list iterator from outside: CPython's index at entry
    lent_at: int | None = None  # drained by a combinator made at this root instruction (NOTE [Lent iterators])
    iter_type: type = type(iter([]))  # NOTE [Iterators of their own type]
    constant: Any = None  # iter(<a constant range, str, bytes or tuple>): that constant
    looped = False  # stepped by a for loop (FOR_ITER): rebuilt as a list iterator (NOTE [Iterators of their own type])
    walk: Any = None  # a module walk: (module value, method name, options) (NOTE [Lazy module walks] in modules.py)
    view: str | None = None  # over a dict's "keys", "values" or "items" view (NOTE [Dict iterators read live])
    reverse = False  # reversed() of a dict or of its view: its keys from the last
    deque_of: Value | None = None  # iter() of a deque: that deque (NOTE [Deque iterators])
    deque_state: tuple = ()  # the deque's (state, length) when this iterator was made

    def next(self) -> Value | None:
        if self.lent_at is not None:
            raise lent_error(self)
        self.check_deque()
        note_step(self)
        if self.exhausted:
            return None
        if self.owner is not None and not isinstance(self.owner, ListValue):
            self._check_unchanged()
        if self.check is not None:
            self.check()
        if self.index >= len(self.items):
            self.exhausted = True
            mark_ended_in_order(self)  # NOTE [Iterators claimed by a run ahead]
            return None
        if self.view in ("values", "items"):
            self.items[self.index] = self._live_item(self.index)
        item = self.items[self.index]
        self.index += 1
        return item

    # NOTE [Dict iterators read live]: CPython's iterators over a dict's values or items (and reversed() of a
    # dict or its views) read the dict at each step: `for k, v in d.items(): d["b"] = v + 10` yields b's new
    # value, and a change of the dict's size raises RuntimeError at the next step, as for iter(d). They keep
    # the dict as `owner` (NOTE [Live iteration]), step through the keys it had when made (`keys`, checked
    # unchanged at each step) and read each value when it is drawn; type() answers CPython's iterator type,
    # and one that outlives the graph is rebuilt as the real dict's iterator, advanced (codegen).
    def _live_item(self, index: int) -> Value:
        from .mappings import key_value
        key = self.keys[len(self.keys) - 1 - index if self.reverse else index]
        value = self.owner.items[key]
        return value if self.view == "values" else TupleValue([key_value(key), value])

    def deque_mutated(self) -> bool:
        return self.deque_of is not None and deque_state(self.deque_of) != self.deque_state

    def check_deque(self) -> None:
        """NOTE [Deque iterators]: CPython's deque iterator raises at every step once its deque changed."""
        if self.deque_mutated():
            raise UserException(RuntimeError("deque mutated during iteration"))

    def changed(self) -> str:
        """CPython's error message when the dict or set this iterates over changed size, else ""."""
        if len(self.owner.items) == len(self.keys):
            return ""
        return f"{'dictionary' if isinstance(self.owner, DictValue) else 'Set'} changed size during iteration"

    def _check_unchanged(self) -> None:
        if self.owner.python_type() is collections.OrderedDict and list(self.owner.items) != self.keys:
            # CPython's odict iterator checks the dict's state (any insertion, deletion or move_to_end)
            raise UserException(RuntimeError("OrderedDict mutated during iteration"))
        if self.changed():
            raise UserException(RuntimeError(self.changed()))
        if list(self.owner.items) != self.keys:
            raise Unsupported(BreakKind.SIDE_EFFECT, "the keys of a dict or set changed while iterating over it")

    def remaining(self) -> list[Value]:
        if self.lent_at is not None:
            raise lent_error(self)
        self.check_deque()
        note_step(self)
        if self.exhausted:
            return []
        if self.owner is not None and not isinstance(self.owner, ListValue):
            self._check_unchanged()  # CPython checks the size at each step, the step that ends too
        if self.check is not None:  # NOTE [Eager generators], [Lazy combinators]: drawn now, checked now
            self.check()
        if self.view in ("values", "items"):  # NOTE [Dict iterators read live]
            self.items[self.index:] = [self._live_item(i) for i in range(self.index, len(self.items))]
        rest = self.items[self.index:]
        self.index = len(self.items)
        self.exhausted = True
        return rest

    def python_type(self) -> type:
        if self.gen_code is not None:  # a generator run ahead (NOTE [Eager generators]): CPython's generator
            return types.GeneratorType  # (revBB HIGH-2: type(g) and isinstance answered list_iterator)
        if self.owner is not None and not isinstance(self.owner, ListValue):
            return owned_iterator_type(self.owner.python_type(), self.view, self.reverse)
        return self.iter_type


def owned_iterator_type(cls: type, view: str | None, reverse: bool) -> type:
    """The type of CPython's iterator over a set, or over a dict (or one of its views), reversed or not."""
    if issubclass(cls, (set, frozenset)):
        return type(iter(set()))
    iterable = (collections.OrderedDict if issubclass(cls, collections.OrderedDict) else dict)()
    iterable = getattr(iterable, view)() if view else iterable
    return type(reversed(iterable) if reverse else iter(iterable))


def dict_iterator(mapping: DictValue, view: str | None, reverse: bool) -> IteratorValue:
    """iter() or reversed() of a dict value or of its `view` (NOTE [Dict iterators read live])."""
    iterator = IteratorValue([], owner=mapping)
    iterator.view, iterator.reverse = view, reverse
    iterator.items = [iterator._live_item(i) if view in ("values", "items") else
                      _key_value(iterator.keys[len(iterator.keys) - 1 - i if reverse else i])
                      for i in range(len(iterator.keys))]
    return iterator


def _key_value(key: Any) -> Value:
    from .mappings import key_value
    return key_value(key)


def lent_error(iterator: IteratorValue) -> Unsupported:
    """NOTE [Lent iterators]: zip, map, filter, enumerate and the itertools combinators are evaluated at once
    (builtins.py): an iterator given to one is drained when the combinator is made, where CPython draws
    from it only as the combinator is consumed. That is the same only while nothing else reads the
    iterator: the same iterator twice (`zip(it, it)`), reading it after a loop over the combinator stopped
    early, its position at a graph break, or an iterator from outside (the caller sees its position). Any
    such read is a graph break at the instruction that made the combinator, which then runs in Python."""
    e = Unsupported(BreakKind.SIDE_EFFECT, "an iterator drawn by zip/map/filter/enumerate/itertools is read "
                    "elsewhere too: the combinator runs lazily, as Python")
    e.root_index = iterator.lent_at
    return e


def position_read(iterator: IteratorValue) -> None:
    """`iterator`'s position is read (rebuilt after the graph, moved on the caller's object): a break when eager's
    position is unknown (NOTE [Lent iterators], [Iterators claimed by a run ahead] in iterator_claims.py)."""
    if iterator.lent_at is not None:
        raise lent_error(iterator)
    check_claims(iterator)


def drain_lent(tx, iterables: list[Value], count: int | None = None) -> list[list[Value]]:
    """The items of each argument of a lazy combinator, all at once (at most `count` of a lazy generator: NOTE
    [Combinators over endless generators]); iterator arguments are marked lent to it (NOTE [Lent iterators]).
    A combinator made where no root instruction is known breaks now."""
    from ..protocol import iterate
    root = tx
    while root.parent is not None:
        root = root.parent
    made_at = root.current.index if root.current is not None else None
    columns = []
    for value in iterables:
        columns.append(_drain(tx, value, iterate, count))
        if isinstance(value, IteratorValue):
            if made_at is None:
                raise Unsupported(BreakKind.SIDE_EFFECT, "an iterator drawn by a combinator: it runs as Python")
            value.lent_at = made_at
    return columns


def _drain(tx, value: Value, iterate, count: int | None = None) -> list[Value]:
    """All items of `value` (at most `count` of a lazy generator: NOTE [Combinators over endless generators]);
    a lazy generator is drawn ahead of its consumer only as NOTE [Lazy generators drawn ahead] allows."""
    from ..lazy_generators import LazyGeneratorValue
    if not isinstance(value, LazyGeneratorValue):
        return iterate(tx, value)
    with _drawing_ahead(tx, [value]):
        if count is None or value.finalizes:  # NOTE [Generators with finalizers traced lazily]: drawn whole
            return iterate(tx, value)
        items = []
        while len(items) < count and (item := value.next()) is not None:
            items.append(item)
        return items


# NOTE [Lazy generators drawn ahead]: zip, enumerate, map, filter and the itertools are evaluated when they are
# made (NOTE [Lent iterators]), so a lazy generator among their arguments (NOTE [Generators driven by send] in
# lazy_generators.py: stepped in its consumer's order, with none of the run-ahead checks of NOTE [Eager
# generators]) has its body run for every row before the loop body runs once. CPython draws one row before each
# iteration. The two agree only when nothing can tell the order apart, the conditions of a run-ahead generator:
# - the drawing changes nothing (SideEffects version, ops and touched values, grad-mode sets and random draws
#   as before it) and raises nothing (an exception at a row the loop may never reach, or reach after effects of
#   its own): else a graph break before the call that made the generator, which then runs as Python. A log the
#   generator appends to, read by the loop body or cut short by a `break` (review revT HIGH-1: eager's
#   [0, 1], the trace's [0, 1, 2, 3]) thus runs as Python;
# - nothing the generator reads changes while the combinator is consumed: `drawn_check`, run before each of
#   the combinator's steps (drawn_ahead_checked; the step that ends it too, when CPython's zip draws the
#   generator once more), breaks there when outside state changed (SideEffects.version: stores to globals,
#   outside objects, cells, in-place tensor ops) or a value its frame reaches (its locals, cells, stack, and
#   those of lazy generators it holds, and the values stored into outside state, which it reads through
#   globals and outside objects: SideEffects.values()) was mutated: `st[0] += 1` in the body of `for i, t in
#   zip(reader(st), rows)` where `reader` yields `st[0]`; `CFG.cur.append(r)` after `CFG.cur = []` where it
#   yields `len(CFG.cur)` (review revY HIGH-2; a run-ahead generator's reach has them too: translator.py);
# - nothing else draws it (NOTE [Lent iterators]: next(g), g.send(), g.__next__(), close() and throw() of a lent
#   lazy generator break at the combinator too, as its `next()` did).
# Rows drawn ahead and never used (a loop left by break, return or an exception) then changed nothing.
# Under these conditions the drain has DRAIN_STEPS (a bounded one, zip's and islice's, draws only what
# CPython's can draw, so an endless generator does not reach it), past which it is a break before the call
# that made the generator (NOTE [Run-ahead step budget] in translator.py).
DRAIN_STEPS = 100_000


@contextlib.contextmanager
def _drawing_ahead(tx, gens: list[Value]):
    """Draw the lazy generators `gens` ahead of their consumer (NOTE [Lazy generators drawn ahead])."""
    from ..lazy_generators import finalizer_break
    from ..translator import MAX_TRACE_STEPS
    out = tx.output
    before, steps = _effects(out), out.__dict__.get("finalizer_steps", 0)
    outer = out.__dict__.get("step_limit", MAX_TRACE_STEPS)
    out.step_limit = min(outer, out.steps + DRAIN_STEPS)
    try:
        with collecting() as stepped:
            yield
    except UserException as e:
        raise gens[0].made_here(Unsupported(
            BreakKind.SIDE_EFFECT, f"the {gens[0].describe()} raises {type(e.exc).__name__} when drawn ahead by a "
            "combinator: it runs as Python")) from None
    finally:
        out.step_limit = outer
    if out.__dict__.get("finalizer_steps", 0) != steps:  # NOTE [Generators with finalizers traced lazily]
        raise gens[0].made_here(finalizer_break(f"the {gens[0].describe()} drives one with finalizers and is drawn "
                                                "ahead by a combinator: it runs as Python"))
    if _effects(out) != before:
        raise gens[0].made_here(Unsupported(BreakKind.SIDE_EFFECT, f"the {gens[0].describe()} has effects when "
                                            "drawn ahead by a combinator: it runs as Python"))
    for gen in gens:
        gen.drawn_check = _drawn_check(out, gen)
    claim(list(stepped.values()), Claim(None, _root_index(tx)))  # NOTE [Iterators claimed by a run ahead]


def _effects(out) -> tuple:
    side_effects = out.side_effects
    return (side_effects.version, len(side_effects.ops), len(side_effects.touched),
            out.__dict__.get("effects_recorded", 0), out.__dict__.get("random_draws", 0))


def _drawn_check(out, gen) -> Any:
    """Before each step of a combinator that drew `gen` ahead: nothing it reads changed since."""
    from ..generator_reach import reachable_values
    side_effects = out.side_effects
    version, touched = side_effects.version, len(side_effects.touched)
    # values stored into outside state (globals, attributes and items of outside objects, cells) are read by
    # the generator through them (`yield len(CFG.cur)` after `CFG.cur = []`: review revY HIGH-2); a store made
    # later bumps `version`
    reach = reachable_values([*_frame_roots(gen), *side_effects.values()])

    def check() -> None:
        if side_effects.version != version or any(id(v) in reach for v in side_effects.touched[touched:]):
            raise gen.made_here(Unsupported(BreakKind.SIDE_EFFECT, f"what the {gen.describe()} reads changed while "
                                            "a combinator that drew it ahead is consumed: it runs as Python"))
    return check


def _frame_roots(gen) -> list[Any]:
    """The values the frames of lazy generator `gen` (and of the lazy generators they hold) reach directly."""
    from ..lazy_generators import LazyGeneratorValue
    roots, todo, seen = [], [gen], set()
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        frame = g.frame
        held = [*frame.locals.values(), *frame.cells.values(), *frame.stack]
        roots.extend(held)
        todo.extend(v for v in held if isinstance(v, LazyGeneratorValue))
    return roots


def drawn_ahead_checked(result: IteratorValue, iterables: list[Value]) -> IteratorValue:
    """`result`, a combinator over `iterables`, with the `drawn_check` of each lazy generator among them run
    before each of its steps (NOTE [Lazy generators drawn ahead])."""
    checks = [c for v in iterables if (c := getattr(v, "drawn_check", None)) is not None]
    if not checks:
        return result
    inner = result.check

    def check() -> None:
        for drawn in checks:
            drawn()
        if inner is not None:
            inner()
    result.check = check
    return result


# NOTE [Combinators over endless generators]: an endless lazy generator (`while True: yield i; i += 1`, made
# lazy when its run ahead overflowed: NOTE [Run-ahead step budget] in translator.py) under `zip(gen(), rows)`
# was drained to its end with the budget of DRAIN_STEPS, then broke before its call and stepped as Python (105,000
# instructions traced, 6 frames). zip and islice draw only what CPython's can draw (NOTE [Lazy generators drawn
# ahead] says when drawing ahead is allowed at all): `zip` steps its arguments row by row, in argument order, as
# CPython's does, so a generator zipped with a list, tuple, range, string or tensor stops where the shortest of
# those ends (drawn once more only where it comes before that argument: the row CPython starts and abandons),
# and the loop is unrolled into the graph as over two lists; `islice(gen, [start,] stop[, step])` draws at most
# max(start, stop) items (CPython's islice draws up to `start` before it compares with `stop`). A combinator
# with no such bound (`enumerate(gen())`, `map(f, gen())`, `zip` of generators only) drains it whole, as before.
# A generator with finalizers is drawn whole as before (a partial drain of it breaks: NOTE [Generators with
# finalizers traced lazily]).
_BOUNDED_ITEMS = (list, tuple)


def drain_zipped(tx, iterables: list[Value], strict: bool) -> list[list[Value]]:
    """zip's columns (NOTE [Combinators over endless generators]): lazy generators drawn row by row up to the
    shortest argument of known length; drain_lent's where there is none, or under strict=True (CPython's checks
    draw past the shortest)."""
    from ..lazy_generators import LazyGeneratorValue
    from ..protocol import iterate
    lazy = [isinstance(v, LazyGeneratorValue) and not v.finalizes and v.lent_at is None for v in iterables]
    if strict or all(lazy) or not any(lazy) or not all(z or _known_length(v) for z, v in zip(lazy, iterables)):
        return drain_lent(tx, iterables)
    made_at = _root_index(tx)
    if made_at is None:
        raise Unsupported(BreakKind.SIDE_EFFECT, "an iterator drawn by a combinator: it runs as Python")
    columns = [[] if z else iterate(tx, v) for z, v in zip(lazy, iterables)]
    shortest = min(len(c) for z, c in zip(lazy, columns) if not z)
    with _drawing_ahead(tx, [v for z, v in zip(lazy, iterables) if z]):
        _draw_rows(lazy, iterables, columns, shortest)
    for v in iterables:
        if isinstance(v, IteratorValue):
            v.lent_at = made_at
    return columns


def _draw_rows(lazy: list[bool], iterables: list[Value], columns: list[list[Value]], shortest: int) -> None:
    """Append to the lazy generators' columns what CPython's zip draws from them, row by row."""
    for row in range(shortest + 1):
        for z, v, column in zip(lazy, iterables, columns):
            if not z and row == len(column):
                return  # CPython's zip stops at the first argument that ends, in argument order
            if z:
                item = v.next()
                if item is None:
                    return
                column.append(item)


def _known_length(value: Value) -> bool:
    """`value` is iterated without running code: a list, tuple, range, string or tensor."""
    from .tensor import TensorValue
    if isinstance(value, SequenceValue) and value.python_type() in _BOUNDED_ITEMS:
        return True
    if isinstance(value, ConstantValue) and type(value.value) in (range, tuple, str, bytes):
        return True
    return isinstance(value, TensorValue) and value.fake.dim() > 0


def _root_index(tx) -> int | None:
    root = tx
    while root.parent is not None:
        root = root.parent
    return root.current.index if root.current is not None else None


# NOTE [Deque iterators]: a deque is a ListValue of class deque (capture/mappings.py). CPython's deque
# iterator reads the deque's items live (`d[0] = v` is seen) and raises RuntimeError("deque mutated during
# iteration") at every step, the one after the end too, once the deque's mutation counter moved: any append,
# appendleft, pop, popleft, a non-empty extend/extendleft, insert, remove, rotate of more than one item, the
# clear of a non-empty deque, `+=`/`*=` that change it (not `d[i] = v`, reverse, count, index, copy). Iterated
# like a list (one step per item, no check) a loop appending to the deque it walks ran to the end where eager
# raises (review A, F1). `bump_deque` moves a counter the trace keeps on the value (mappings._deque_method);
# `+=`/`*=` (protocol.py) always change the length when they change the state, so the iterator compares
# (counter, length). Escaping, it is rebuilt as CPython's own deque iterator at its position
# (codegen_runtime.deque_iterator_at, over the deque as the program leaves it) or, once mutated, as one that
# raises (mutated_deque_iterator). zip/enumerate/reversed over a deque watch the same pair (lazy_combinators).
def deque_state(d: Value) -> tuple:
    return getattr(d, "mutations", 0), len(d.items)


def bump_deque(d: Value) -> None:
    """One change of deque `d`'s mutation counter (NOTE [Deque iterators])."""
    d.mutations = getattr(d, "mutations", 0) + 1


def deque_iterator(d: ListValue) -> IteratorValue:
    iterator = IteratorValue([])
    iterator.items = d.items  # shared: `d[i] = v` is seen, and anything else makes the next step raise
    iterator.deque_of, iterator.deque_state, iterator.iter_type = d, deque_state(d), type(iter(collections.deque()))
    return iterator


def _viewed_dict(value: Value) -> tuple[Any, str | None]:
    """The dict a dict view or a mappingproxy (values/mappings.py) reads, and the view's kind (None: the keys
    of the dict itself). NOTE [Proxies iterate their dict]: `iter(proxy)` is the dict's own key iterator and
    `proxy.items()` is a view whose `mapping` is the proxy; both read the dict under the proxy, so a write to
    that dict while iterating raises "dictionary changed size during iteration" as in CPython."""
    from .mappings import MappingProxyValue
    view = getattr(value, "kind", None) if not isinstance(value, MappingProxyValue) else None
    mapping = value if isinstance(value, MappingProxyValue) else getattr(value, "mapping", None)
    while isinstance(mapping, MappingProxyValue):
        mapping = mapping.mapping
    return mapping, view


def iterator_over(value: Value, items: list[Value]) -> IteratorValue:
    """The iterator `iter(value)` gives, `items` being what it yields (NOTE [Live iteration])."""
    if isinstance(value, ListValue) and value.cls is collections.deque:
        return deque_iterator(value)  # NOTE [Deque iterators]
    if isinstance(value, (ListValue, DictValue, SetValue)) and \
            value.python_type() in (list, dict, set, frozenset, collections.OrderedDict, collections.defaultdict):
        return IteratorValue(items, owner=value)
    mapping, view = _viewed_dict(value)
    if isinstance(mapping, DictValue) and mapping.python_type() in (dict, collections.OrderedDict, collections.defaultdict):
        return dict_iterator(mapping, view, reverse=False)  # NOTE [Dict iterators read live]
    iterator = IteratorValue(items)
    # NOTE [Iterators of their own type]: `iter(t)` of a tuple is a tuple_iterator, of a range a
    # range_iterator, of a str a str_ascii_iterator/str_iterator, ...; the trace answers `type(it)` with that
    # type and rebuilds such an iterator that outlives the graph (returned, stored, live at a break) as one
    # of the same type at the same position (codegen.Reconstructor._iterator), not as a list_iterator.
    # Except one a for loop has stepped: at a break inside the loop, the resume function carries the loop
    # on a list iterator (NOTE [Loops carried across breaks]), which must be the very object the frame's
    # other references see (`it = iter(t); for v in it: ...` then `next(it)`); it stays a list iterator.
    # At a graph break the resume function reads a range or tuple iterator from outside as such
    # (iterator_wrap._wrap_sequence_iterator), so `type(it)` after the break answers as eager.
    if getattr(value, "lazy_range", False):  # NOTE [Ranges of one step] in capture/sym_arith.py
        return LazyRangeIterator(items, value)
    if isinstance(value, ConstantValue) and type(value.value) in (range, str, bytes, tuple):
        iterator.constant, iterator.iter_type = value.value, type(iter(value.value))
    elif isinstance(value, TupleValue) and iterates_as_tuple(value.python_type()):  # a namedtuple's too
        iterator.iter_type = type(iter(()))
    return iterator


class LazyRangeIterator(IteratorValue):
    """iter() of a range whose bounds stay symbolic (NOTE [Ranges of one step] in capture/sym_arith.py): the
    constant range, read only to rebuild the iterator outside the graph, specialises them then."""

    iter_type = type(iter(range(0)))

    def __init__(self, items: list[Value], range_value: Value) -> None:
        super().__init__(items)
        self.range_value = range_value

    @property
    def constant(self) -> range:  # type: ignore[override]
        return self.range_value.value


def iterates_as_tuple(cls: type) -> bool:
    """A tuple or a tuple subclass (a namedtuple) that iterates, indexes and reverses as tuple does."""
    return issubclass(cls, tuple) and not hasattr(cls, "__reversed__") and all(
        getattr(cls, name) is getattr(tuple, name) for name in ("__iter__", "__len__", "__getitem__"))
