"""Whether a referent made while tracing is still alive when its weak reference is called.

NOTE [Referents made in the frame that nothing holds]: `o = O(); r = weakref.ref(o); del o; r() is None` is True
in eager: CPython frees an object when its last reference goes (`del o`, `o = None`, `l.pop()`). The trace
answered the referent, alive, on every call (framejit and stock torch.compile: False; hhuntG9,
/tmp/hhuntG9/m_weakref_cases.py). A call of a weak reference to an object, list or dict made while tracing now
walks what the trace holds (the slots, stack and cells of this frame and its callers, and the values the
effects replay) through containers, objects, closures, bound methods and iterators: a referent reached is
alive; one not reached, where every value walked is of a kind the walk knows to be complete and the referent
is in no reference cycle (which CPython frees only at a collection), is dead: the call answers None. Anything
else (a value of another kind that might hold it, a cycle) is a break, as before. Objects with a `__del__` and
refs with callbacks are breaks already (no finalizer runs here).
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported
from .values import (BoundMethodValue, BuiltinValue, CellValue, ClassValue, ConstantValue, DictValue, IteratorValue,
                     NewObjectValue, SequenceValue, SetValue, TensorValue, UserFunctionValue, Value)


def _children(v: Value) -> list[Any] | None:
    """The values `v` holds, or None where the walk cannot tell (a kind it does not model)."""
    if isinstance(v, SequenceValue):
        return list(v.items)
    if isinstance(v, DictValue):
        return list(v.items.values())
    if isinstance(v, NewObjectValue):
        return list(v.attrs.values())
    if isinstance(v, BoundMethodValue):
        return [v.func, v.self_value]
    if isinstance(v, IteratorValue):
        return ([v.owner] if v.owner is not None else list(v.items)) + list(v.__dict__.get("reach_roots", ()))
    if isinstance(v, UserFunctionValue):
        cells = [c for c in getattr(v, "closure", None) or () if isinstance(c, CellValue)]
        return [*cells, *(v.defaults or ()), *(v.kwdefaults or {}).values(), *v.attr_values()]
    if isinstance(v, CellValue):
        return [v.contents]
    if type(v).__name__ == "WeakRefValue" or isinstance(v, (ConstantValue, TensorValue, SetValue, ClassValue,
                                                                BuiltinValue)):
        return []  # a weak reference holds nothing; the others hold no object made while tracing
    if v.source is not None:
        return []  # from outside: it holds a made object only through a replayed effect (a root)
    return None


def _walk(roots: list[Any]) -> tuple[set[int], bool]:
    """(ids of the values reached, whether every value reached was of a kind `_children` models)."""
    seen: set[int] = set()
    todo, complete = list(roots), True
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen.add(id(v))
        kids = _children(v)
        if kids is None:
            complete = False
        else:
            todo.extend(kids)
    return seen, complete


def referent_alive(tx, referent: Value) -> bool:
    """NOTE [Referents made in the frame that nothing holds]: True (answer the referent), False (answer None),
    or a break where the walk cannot tell."""
    if referent.source is not None:
        return True
    roots = list(tx.output.side_effects.values())
    frame = tx
    while frame is not None:
        roots += [*frame.stack, *(getattr(frame, "operands", None) or ()), *frame.locals.values(),
                  *frame.cells.values()]
        frame = frame.parent
    reached, complete = _walk(roots)
    if id(referent) in reached:
        return True
    own = _children(referent)
    in_cycle = own is None or id(referent) in _walk(own)[0]
    if complete and not in_cycle:
        return False
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a weak reference to an object made in the frame that may have "
                                                  "died: the call runs as Python")
