"""What a generator run ahead of its consumer can see (NOTE [Eager generators] in translator.py).

`reachable_values` walks the abstract values a generator is called with (its arguments and closure
cells) through containers, objects made while tracing, bound methods, iterators and closures, and
returns their ids: a mutation of one of them by the consumer could change what the generator yields.
Values read from outside are not followed: mutations of outside state are counted on their own
(`SideEffects.version`).
"""
from __future__ import annotations

from typing import Any

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
        elif isinstance(v, UserFunctionValue):
            todo.extend(closure_cells(v))
            todo.extend(v.defaults or ())
            todo.extend(v.attr_values())
        elif isinstance(v, CellValue):
            todo.append(v.contents)
    return seen


__all__ = ["closure_cells", "reachable_value_map", "reachable_values"]
