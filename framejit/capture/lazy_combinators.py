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
break where it was made: eager code holds a lazy object there (codegen.escaped_generator).
"""
from __future__ import annotations

import types

from .breaks import BreakKind, Unsupported
from .generator_reach import closure_contents, reachable_values
from .values import ConstantValue, DictValue, IteratorValue, ListValue, SetValue, Value


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
    return None, 0


def _reads_nothing_else(fn: Value | None, items: list[list[Value]]) -> bool:
    if fn is None:
        return True
    if not fn.is_constant() and not hasattr(fn, "fn"):
        return False
    target = fn.as_constant() if fn.is_constant() else getattr(fn, "fn", None)
    builtin = target is None or isinstance(target, (types.BuiltinFunctionType, type))
    return builtin and all(isinstance(v, ConstantValue) for column in items for v in column)


class Watch:
    """The state before draining a combinator's arguments (see `watch`)."""

    def __init__(self, tx, iterables: list[Value]) -> None:
        self.tx = tx
        self.lists: list[tuple[Value, list[Value], int]] = []
        self.mappings: list[Value] = []
        self.checks = [v.check for v in iterables if isinstance(v, IteratorValue) and v.check is not None]
        for value in iterables:
            container, start = _container(value)
            if isinstance(container, ListValue):
                self.lists.append((container, list(container.items), start))
            elif container is not None:
                self.mappings.append(container)
        side_effects = tx.output.side_effects
        self.made = (side_effects.version, len(side_effects.ops), len(side_effects.touched))

    def needed(self, fn_reads_state: bool) -> bool:
        return bool(self.lists or self.mappings or self.checks or fn_reads_state)

    def finish(self, result: IteratorValue, what: str, per_row: bool, fn: Value | None = None,
               columns: list[list[Value]] = ()) -> IteratorValue:
        """`result` (the rows, already computed) checked as NOTE [Lazy combinators] says."""
        reads_state = not _reads_nothing_else(fn, list(columns))
        if not self.needed(reads_state):
            return result
        made_at = _root_index(self.tx)
        if made_at is None:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what}() over a mutable container: it runs lazily, as Python")
        side_effects = self.tx.output.side_effects
        version, n_ops, n_touched = self.made
        mapping_ids = {id(m) for m in self.mappings}
        reachable = reachable_values([*closure_contents(fn), *(v for c in columns for v in c)]) if reads_state \
            else set()

        def changed() -> bool:
            for container, items, start in self.lists:
                now = container.items
                low = start + result.index if per_row else 0
                if len(now) != len(items) or any(now[i] is not items[i] for i in range(low, len(now))):
                    return True
            if mapping_ids and (any(id(op[0]) in mapping_ids for op in side_effects.ops[n_ops:])
                                or any(id(v) in mapping_ids for v in side_effects.touched[n_touched:])):
                return True
            return reads_state and (side_effects.version != version or any(
                id(v) in reachable for v in side_effects.touched[n_touched:]))

        def check() -> None:
            for inner in self.checks:
                inner()
            if changed():
                e = Unsupported(BreakKind.SIDE_EFFECT, f"what {what}() reads changed while it is consumed: it "
                                "runs lazily, as Python")
                e.root_index = made_at
                raise e
        result.check = check
        result.made_at = made_at
        return result


def watch(tx, iterables: list[Value]) -> Watch:
    """Call before draining the combinator's arguments; then `.finish(result, ...)` (NOTE [Lazy combinators])."""
    return Watch(tx, list(iterables))


__all__ = ["Watch", "watch"]
