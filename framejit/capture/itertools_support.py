"""`itertools` building blocks over abstract values, evaluated at once into an iterator of known items
(the same model as zip/map/enumerate in builtins.py): `chain.from_iterable`, `islice`, `combinations`,
`permutations`, `zip_longest`, `accumulate` of constants. Arguments that would make the iterable
unbounded (`islice` without a stop over an iterator that never ends) cannot occur: the items being
sliced are already a finite list. Handlers register in builtins.BUILTIN_HANDLERS on import.
"""
from __future__ import annotations

import itertools
import operator

from .breaks import BreakKind, Unsupported, UserException
from .builtins import BUILTIN_HANDLERS, handles
from .protocol import iterate
from .values import ConstantValue, IteratorValue, TupleValue, Value
from . import lazy_combinators
from .values.containers import drain_lent, drawn_ahead_checked


def _const(v: Value, what: str):
    if not v.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{what} of a non-constant argument")
    return v.as_constant()


@handles(itertools.chain.from_iterable)
def _chain_from_iterable(tx, args, kwargs):
    groups, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    watch = lazy_combinators.watch(tx, [*args[:1], *groups])  # NOTE [Lazy combinators]
    rows = IteratorValue([item for group in groups for item in drain_lent(tx, [group])[0]])
    return drawn_ahead_checked(watch.finish(rows, "chain.from_iterable", per_row=False), [*args[:1], *groups])


@handles(itertools.islice)
def _islice(tx, args, kwargs):
    if kwargs or not 2 <= len(args) <= 4:
        raise UserException(TypeError("islice expected 2 to 4 arguments"))
    bounds = [_const(a, "islice") for a in args[1:]]
    watch = lazy_combinators.watch(tx, args[:1])  # NOTE [Lazy combinators]
    try:
        itertools.islice((), *bounds)  # CPython checks the bounds before it draws anything
    except (ValueError, TypeError) as e:
        raise UserException(e) from None
    items, = drain_lent(tx, args[:1], _islice_draws(bounds))  # NOTE [Lent iterators]
    chosen = list(itertools.islice(range(len(items)), *bounds))
    rows = watch.finish(IteratorValue([items[i] for i in chosen]), "islice", per_row=False)
    return drawn_ahead_checked(rows, args[:1])  # NOTE [Lazy generators drawn ahead]


def _islice_draws(bounds: list) -> int | None:
    """How many items CPython's islice may draw, at most (NOTE [Combinators over endless generators]): up to
    `start` before it compares with `stop`; None: no bound."""
    start, stop = (0, bounds[0]) if len(bounds) == 1 else (bounds[0] or 0, bounds[1])
    return None if stop is None else max(operator.index(start), operator.index(stop))


@handles(itertools.pairwise)
def _pairwise(tx, args, kwargs):
    """`pairwise(xs)`: the overlapping pairs of xs's items, with islice's rules (NOTE [Lazy combinators])."""
    if kwargs or len(args) != 1:
        raise UserException(TypeError(f"pairwise expected 1 argument, got {len(args) + len(kwargs)}"))
    watch = lazy_combinators.watch(tx, args[:1])
    items, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    rows = IteratorValue([TupleValue([a, b]) for a, b in zip(items, items[1:])])
    return drawn_ahead_checked(watch.finish(rows, "pairwise", per_row=False), args[:1])


def _index_tuples(fn):
    def handler(tx, args, kwargs):
        items = iterate(tx, args[0])
        rest = [_const(a, fn.__name__) for a in args[1:]]
        extra = {k: _const(v, fn.__name__) for k, v in kwargs.items()}
        try:
            rows = list(fn(range(len(items)), *rest, **extra))
        except (ValueError, TypeError) as e:
            raise UserException(e) from None
        return IteratorValue([TupleValue([items[i] for i in row]) for row in rows])
    return handler


handles(itertools.combinations)(_index_tuples(itertools.combinations))
handles(itertools.permutations)(_index_tuples(itertools.permutations))


@handles(itertools.zip_longest)
def _zip_longest(tx, args, kwargs):
    if kwargs.keys() - {"fillvalue"}:
        raise UserException(TypeError("zip_longest() got an unexpected keyword argument"))
    fill = kwargs.get("fillvalue", ConstantValue(None))
    watch = lazy_combinators.watch(tx, args)  # NOTE [Lazy combinators]
    columns = drain_lent(tx, list(args))  # NOTE [Lent iterators]
    width = max((len(c) for c in columns), default=0)
    rows = IteratorValue([TupleValue([c[i] if i < len(c) else fill for c in columns]) for i in range(width)])
    return drawn_ahead_checked(watch.finish(rows, "zip_longest", per_row=True), args)


__all__: list[str] = []


# `itertools.starmap(f, rows)` is map over unpacked rows, with map's rules (builtins._map: calls made at
# once must have no effects, NOTE [Lazy combinators]); `itertools.repeat(obj, times)` with a constant
# count is that many references to obj (Counter.elements() is chain.from_iterable(starmap(repeat, items))).
@handles(itertools.starmap)
def _starmap(tx, args, kwargs):
    from .builtins import _calls_made_early
    if kwargs or len(args) != 2:
        raise UserException(TypeError(f"starmap expected 2 arguments, got {len(args) + len(kwargs)}"))
    fn, rows = args
    watch = lazy_combinators.watch(tx, [rows])  # NOTE [Lazy combinators]
    column, = drain_lent(tx, [rows])  # NOTE [Lent iterators]
    made = _calls_made_early(tx, "starmap", lambda: [tx.call(fn, iterate(tx, row), {}) for row in column])
    return drawn_ahead_checked(watch.finish(IteratorValue(made), "starmap", per_row=True, fn=fn, columns=[column]),
                               [rows])


# `itertools.accumulate(xs, func=operator.add, *, initial=None)`: the running totals, each `func(total, x)`
# called as the program calls it (an operator on tensors is a graph op), with map's rules for calls made at
# once (builtins._calls_made_early, NOTE [Lazy combinators]). timm-style `list(accumulate(depths))` and
# cumulative offsets were "creating an instance of accumulate", a break.
@handles(itertools.accumulate)
def _accumulate(tx, args, kwargs):
    from .builtins import _calls_made_early
    from .values import BuiltinValue
    if not 1 <= len(args) <= 2 or kwargs.keys() - {"func", "initial"} or (len(args) == 2 and "func" in kwargs):
        raise UserException(TypeError("accumulate() takes at most 2 positional arguments and keywords func, "
                                      "initial"))
    fn = args[1] if len(args) == 2 else kwargs.get("func", ConstantValue(None))
    if fn.is_constant() and fn.as_constant() is None:
        fn = BuiltinValue(operator.add)
    initial = kwargs.get("initial", ConstantValue(None))
    watch = lazy_combinators.watch(tx, args[:1])  # NOTE [Lazy combinators]
    column, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]

    def totals() -> list[Value]:
        out = [] if initial.is_constant() and initial.as_constant() is None else [initial]
        for item in column:
            out.append(item if not out else tx.call(fn, [out[-1], item], {}))
        return out
    made = _calls_made_early(tx, "accumulate", totals)
    return drawn_ahead_checked(watch.finish(IteratorValue(made), "accumulate", per_row=False, fn=fn,
                                            columns=[column]), args[:1])


@handles(itertools.repeat)
def _repeat(tx, args, kwargs):
    if len(args) + len(kwargs) != 2 or len(args) < 1 or kwargs.keys() - {"times"}:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "itertools.repeat without a count (unbounded)")
    times = _const(args[1] if len(args) > 1 else kwargs["times"], "repeat")
    try:
        itertools.repeat(None, times)  # the count's type errors, as eager raises them
    except (TypeError, OverflowError) as e:
        raise UserException(e) from None
    return IteratorValue([args[0]] * max(times, 0))


# NOTE [groupby evaluated when made]: `itertools.groupby(xs, key)` is evaluated at once, like the
# combinators above: the key of every item (calls made early: no effect allowed, builtins._calls_made_early)
# and runs of equal keys. Only constant keys are grouped here (== on a traced value is not a fact the trace
# may assume). CPython's groups share the groupby's own iterator: once the groupby has moved past a group
# (or stopped), that group yields nothing more. Each group therefore gets a check, run before each of its
# steps: the groupby has drawn exactly that group's row and is not exhausted; otherwise the frame breaks
# where the groupby was made and it runs lazily, as Python. The groupby and its groups carry `made_at`, so
# one that outlives the graph (returned, stored, live at a break) is also that break (codegen.escaped_generator).
_GROUPER = type(next(itertools.groupby("a"))[1])


@handles(itertools.groupby)
def _groupby(tx, args, kwargs):
    from .builtins import _calls_made_early
    if len(args) + len(kwargs) > 2 or kwargs.keys() - {"iterable", "key"} or len(args) + len(kwargs) == 0:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "itertools.groupby with these arguments")
    iterable = args[0] if args else kwargs["iterable"]
    key = args[1] if len(args) > 1 else kwargs.get("key", ConstantValue(None))
    keyed = not (key.is_constant() and key.as_constant() is None)
    made_at = lazy_combinators._root_index(tx)
    if made_at is None:
        raise Unsupported(BreakKind.SIDE_EFFECT, "groupby() where no instruction made it: it runs as Python")
    watch = lazy_combinators.watch(tx, [iterable])  # NOTE [Lazy combinators]
    column, = drain_lent(tx, [iterable])  # NOTE [Lent iterators]
    keys = _calls_made_early(tx, "groupby", lambda: [tx.call(key, [item], {}) for item in column]) if keyed \
        else column
    if not all(k.is_constant() for k in keys):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "itertools.groupby of keys that are not constants")
    runs: list[tuple[Value, list[Value]]] = []
    for k, item in zip(keys, column):
        if runs and runs[-1][0].as_constant() == k.as_constant():
            runs[-1][1].append(item)
        else:
            runs.append((k, [item]))
    outer = IteratorValue([])
    outer.items = [TupleValue([k, _group(outer, row + 1, items, made_at)]) for row, (k, items) in enumerate(runs)]
    outer.iter_type = itertools.groupby
    result = drawn_ahead_checked(watch.finish(outer, "groupby", per_row=False, fn=key if keyed else None,
                                              columns=[column]), [iterable])
    result.made_at = made_at  # NOTE [groupby evaluated when made]
    return result


def _group(outer: IteratorValue, drawn: int, items: list[Value], made_at: int) -> IteratorValue:
    group = IteratorValue(items)
    group.iter_type = _GROUPER
    group.made_at = made_at

    def check() -> None:
        if outer.check is not None:
            outer.check()
        if outer.index != drawn or outer.exhausted:
            e = Unsupported(BreakKind.SIDE_EFFECT, "a group of groupby() drawn after the groupby moved on: "
                            "it runs lazily, as Python")
            e.root_index = made_at
            raise e
    group.check = check
    return group


# NOTE [tee evaluated when made]: `a, b = itertools.tee(it, n)` was a break (PyTorch's test_generator.py
# test_deep_tee_buffer_no_recursion_error). As the other combinators (NOTE [Lazy combinators]) it is evaluated when
# made: the argument is drained at once (an iterator is lent to it: NOTE [Lent iterators]) and each of the n copies
# is an iterator over those items with a position of its own, as CPython's copies share one buffer. The copies get
# the combinator's checks (what it read changed before a draw: the break where it was made) and `made_at`, so a
# copy that outlives the graph is that break too (CPython's _tee objects cannot be rebuilt over given items).
@handles(itertools.tee)
def _tee(tx, args, kwargs):
    if kwargs or not 1 <= len(args) <= 2:
        raise UserException(TypeError(f"tee expected 1 or 2 arguments, got {len(args) + len(kwargs)}"))
    n = _const(args[1], "tee") if len(args) == 2 else 2
    if type(n) is not int:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"itertools.tee with n of type {type(n).__name__}")
    if n < 0:
        raise UserException(ValueError("n must be >= 0"))
    made_at = lazy_combinators._root_index(tx)
    if made_at is None:
        raise Unsupported(BreakKind.SIDE_EFFECT, "tee() where no instruction made it: it runs as Python")
    watch = lazy_combinators.watch(tx, args[:1])
    items, = drain_lent(tx, args[:1])
    first = drawn_ahead_checked(watch.finish(IteratorValue(list(items)), "tee", per_row=False), args[:1])
    copies = [first] + [IteratorValue(list(items)) for _ in range(n - 1)]
    for copy in copies:
        copy.iter_type, copy.made_at, copy.check = _TEE, made_at, first.check
    return TupleValue(copies[:n])


_TEE = type(itertools.tee(())[0])


# NOTE [itertools objects of their own type]: the handlers above (and builtins.py's chain and product) evaluate
# the combinator at once into an IteratorValue, which answered type() and isinstance() as a list_iterator
# (`type(itertools.chain(a, b))` was list_iterator in a graph without a break, chain with one). Each result now
# answers its CPython type. One that outlives the graph (returned, held in a local at a break) is rebuilt as an
# object of that type over its remaining rows (codegen_runtime.rows_as) where one can be made to yield any
# given rows; a product, combinations or permutations object cannot, and is a graph break at the instruction
# that made it (or, when none is known, at the one that needs it rebuilt), never a list_iterator
# (codegen.Reconstructor._own_type_iterator).
def _typed_as(handler, kind: type):
    def typed(tx, args, kwargs):
        result = handler(tx, args, kwargs)
        if type(result) is IteratorValue and result.iter_type is type(iter([])):
            result.iter_type = kind
            result.escape_at = lazy_combinators._root_index(tx)  # a break there if it cannot be rebuilt
        return result
    typed.__name__ = getattr(handler, "__name__", "typed")
    return typed


for _fn, _kind in ((itertools.chain, itertools.chain), (itertools.chain.from_iterable, itertools.chain),
                   (itertools.islice, itertools.islice), (itertools.repeat, itertools.repeat),
                   (itertools.starmap, itertools.starmap), (itertools.zip_longest, itertools.zip_longest),
                   (itertools.pairwise, itertools.pairwise), (itertools.product, itertools.product),
                   (itertools.accumulate, itertools.accumulate),
                   (itertools.combinations, itertools.combinations),
                   (itertools.permutations, itertools.permutations)):
    if _fn in BUILTIN_HANDLERS:
        BUILTIN_HANDLERS[_fn] = _typed_as(BUILTIN_HANDLERS[_fn], _kind)
