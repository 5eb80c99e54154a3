"""`itertools` building blocks over abstract values, evaluated at once into an iterator of known items
(the same model as zip/map/enumerate in builtins.py): `chain.from_iterable`, `islice`, `combinations`,
`permutations`, `zip_longest`, `accumulate` of constants. Arguments that would make the iterable
unbounded (`islice` without a stop over an iterator that never ends) cannot occur: the items being
sliced are already a finite list. Handlers register in builtins.BUILTIN_HANDLERS on import.
"""
from __future__ import annotations

import itertools

from .breaks import BreakKind, Unsupported, UserException
from .builtins import handles
from .protocol import iterate
from .values import ConstantValue, IteratorValue, TupleValue, Value
from . import lazy_combinators
from .values.containers import drain_lent


def _const(v: Value, what: str):
    if not v.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{what} of a non-constant argument")
    return v.as_constant()


@handles(itertools.chain.from_iterable)
def _chain_from_iterable(tx, args, kwargs):
    groups, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    watch = lazy_combinators.watch(tx, [*args[:1], *groups])  # NOTE [Lazy combinators]
    rows = IteratorValue([item for group in groups for item in drain_lent(tx, [group])[0]])
    return watch.finish(rows, "chain.from_iterable", per_row=False)


@handles(itertools.islice)
def _islice(tx, args, kwargs):
    if kwargs or not 2 <= len(args) <= 4:
        raise UserException(TypeError("islice expected 2 to 4 arguments"))
    bounds = [_const(a, "islice") for a in args[1:]]
    watch = lazy_combinators.watch(tx, args[:1])  # NOTE [Lazy combinators]
    items, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    try:
        chosen = list(itertools.islice(range(len(items)), *bounds))
    except (ValueError, TypeError) as e:
        raise UserException(e) from None
    return watch.finish(IteratorValue([items[i] for i in chosen]), "islice", per_row=False)


@handles(itertools.pairwise)
def _pairwise(tx, args, kwargs):
    """`pairwise(xs)`: the overlapping pairs of xs's items, with islice's rules (NOTE [Lazy combinators])."""
    if kwargs or len(args) != 1:
        raise UserException(TypeError(f"pairwise expected 1 argument, got {len(args) + len(kwargs)}"))
    watch = lazy_combinators.watch(tx, args[:1])
    items, = drain_lent(tx, args[:1])  # NOTE [Lent iterators]
    rows = IteratorValue([TupleValue([a, b]) for a, b in zip(items, items[1:])])
    return watch.finish(rows, "pairwise", per_row=False)


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
    return watch.finish(rows, "zip_longest", per_row=True)


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
    return watch.finish(IteratorValue(made), "starmap", per_row=True, fn=fn, columns=[column])


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
