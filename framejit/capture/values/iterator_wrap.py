"""Iterators from outside (list, tuple, range and reversed-list iterators): arguments of a frame, or the
iterators a frame held at a graph break, passed to its resume function. Split from builder.py, whose `wrap`
dispatches here; each is rebuilt as an IteratorValue over its guarded sequence and position.
"""
from __future__ import annotations

from typing import Any

from ..breaks import BreakKind, Unsupported
from ..sources import Source
from .base import ConstantValue, Value
from .containers import IteratorValue, TupleValue
from .objects import ObjectValue

_LIST_ITERATOR = type(iter([]))


def _wrap_list_iterator(out, obj: Any, source: Source) -> Value:
    """A list iterator from outside: an argument, or a for loop's iterator passed to a resume function
    (NOTE [Live iteration]): the list (guarded and deduplicated like any list) and the position, read
    through the iterator's state.

    NOTE [Iterators from outside]: the iterator is the caller's object (its source is reloaded when it is
    rebuilt), and how far the trace advanced it is a side effect, replayed on it after the graph
    (`SideEffects.iterators`): `next(it)` in compiled code moves the caller's iterator as in eager."""
    from ..codegen_runtime import iterated_list, iterator_index
    from ..sources import CallSource, Ref
    out.guard_type(source, _LIST_ITERATOR)
    index_source = CallSource(Ref(iterator_index, "iterator_index"), source)
    index = iterator_index(obj)
    out.guard_constant(index_source, index)
    if index < 0:
        iterator = IteratorValue([])
        iterator.exhausted = True
    else:
        items = _wrap(out, iterated_list(obj), CallSource(Ref(iterated_list, "iterated_list"), source))
        from ..list_objects import is_list_object, list_contents
        if is_list_object(items) and items.source is not None:  # NOTE [List subclasses]: its contents
            items = list_contents(out, items)
        if isinstance(items, ObjectValue):  # a list subclass's instance kept as an object: no items to step
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"an iterator over a {type(iterated_list(obj)).__name__} "
                              "object from outside")
        iterator = IteratorValue([], owner=items)
        iterator.index = iterator.start = index
        out.side_effects.iterators[id(iterator)] = iterator
    iterator.source = source
    return iterator


_SEQUENCE_ITERATORS = (type(iter(())), type(iter(range(0))))


def _wrap_sequence_iterator(out, obj: Any, source: Source) -> Value:
    """A tuple or range iterator from outside: an argument, or one a frame held at a graph break, rebuilt
    as its own type (NOTE [Iterators of their own type] in containers.py) for the resume function.
    As a list iterator from outside (NOTE [Iterators from outside]): the tuple or range (wrapped and
    guarded as any) and the position are read through the iterator's state, and how far the trace
    advanced it is replayed on the caller's object. The iterator keeps its type (`type(it)`)."""
    from ..codegen_runtime import iterated_list, iterator_index, remaining_range
    from ..sources import CallSource, Ref
    out.guard_type(source, type(obj))
    if type(obj) is _SEQUENCE_ITERATORS[1]:  # what is left of the range, by its bounds (at position 0)
        bounds = remaining_range(obj)
        out.guard_constant(CallSource(Ref(remaining_range, "remaining_range"), source), bounds)
        iterator = IteratorValue([ConstantValue(v) for v in range(*bounds)])
        iterator.constant, index = range(*bounds), 0
    else:
        index = iterator_index(obj)
        out.guard_constant(CallSource(Ref(iterator_index, "iterator_index"), source), index)
        seq = _wrap(out, iterated_list(obj), CallSource(Ref(iterated_list, "iterated_list"), source))
        if isinstance(seq, ConstantValue) and type(seq.value) is tuple:
            seq = TupleValue([ConstantValue(v) for v in seq.value])
        if not isinstance(seq, TupleValue):
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a tuple iterator over {seq.describe()}")
        iterator = IteratorValue(seq.items)
    iterator.iter_type = type(obj)
    if index < 0:
        iterator.exhausted = True
    else:
        iterator.index = iterator.start = index
        out.side_effects.iterators[id(iterator)] = iterator
    iterator.source = source
    return iterator


_LIST_REVERSE_ITERATOR = type(reversed([]))


def _wrap_list_reverse_iterator(out, obj: Any, source: Source) -> Value:
    """`reversed(a_list)` from outside (a resume function's input when a frame broke while holding one).

    NOTE [Reversed iterators from outside]: like a list iterator from outside (NOTE [Iterators from
    outside]): the list and the position (CPython's index, counting down; -1 once exhausted) are guarded
    and how far the trace advanced it is replayed on the caller's object (`move_reverse_iterator`). The
    trace walks a copy of the items from the position down to 0, which holds while nothing is mutated:
    each step checks that no side effect was recorded since the iterator was read, else it breaks."""
    from ..codegen_runtime import iterated_list, iterator_index
    from ..sources import CallSource, Ref
    out.guard_type(source, _LIST_REVERSE_ITERATOR)
    index = iterator_index(obj)
    out.guard_constant(CallSource(Ref(iterator_index, "iterator_index"), source), index)
    if index < 0:
        iterator = IteratorValue([])
        iterator.exhausted = True
    else:
        items = _wrap(out, iterated_list(obj), CallSource(Ref(iterated_list, "iterated_list"), source))
        iterator = IteratorValue(items.items[index::-1] if index < len(items.items) else [])
        iterator.start, iterator.reverse_from = 0, index
        version = out.side_effects.version

        def unchanged() -> None:
            if out.side_effects.version != version:
                raise Unsupported(BreakKind.SIDE_EFFECT, "a reversed list iterator from outside after a mutation")
        iterator.check = unchanged
        out.side_effects.iterators[id(iterator)] = iterator
    iterator.source, iterator.iter_type = source, _LIST_REVERSE_ITERATOR
    return iterator


def _wrap(out, obj: Any, source: Source) -> Value:
    from .builder import wrap  # builder imports this module
    return wrap(out, obj, source)
