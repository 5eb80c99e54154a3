"""CPython's old sequence protocol, written as Python the translator inlines.

NOTE [Iteration by __getitem__]: `iter(obj)` of an object whose class defines `__getitem__` but no
`__iter__` is CPython's sequence iterator: it calls `type(obj).__getitem__(obj, 0)`, `(obj, 1)`, ... and
stops at the first IndexError or StopIteration (the exception is swallowed; any other one propagates). It
is lazy: each item is read when the consumer asks for it. `sequence_iterator` below is that iterator as a
generator function; protocol.iterate traces a call of it, so it is an eager generator (NOTE [Eager
generators] in translator.py): run ahead of its consumer only when nothing can tell the order apart (the
item reads mutate nothing outside, nothing they reach is mutated while the loop draws, the iterator does
not escape), otherwise a graph break where the iteration began, which then runs as Python. The try block
lives in `_item`, a plain function, so the generator itself has no handler (a generator with one is made
to run eagerly: NOTE [Generators with finalizers]). The absence of `__iter__` on the class is guarded by the
caller.

NOTE [Membership by iteration]: `item in obj` where the class defines no `__contains__` is CPython's
_PySequence_IterSearch: iterate obj (its `__iter__`, or the sequence protocol above) and answer True at the
first element with `element is item or element == item`. `contains_by_iteration` is that loop as Python; the
caller (protocol.contains) guards that `__contains__` stays absent from the class.

NOTE [isdisjoint over an iterator]: `s.isdisjoint(other)` with an `other` that is not a set, frozenset or dict
is CPython's set_isdisjoint loop: iterate `other`, hash each key (an unhashable one is a TypeError, also a set:
no frozenset fallback here, unlike `in`) and answer False at the first key the set holds, leaving the iterator
after it. `isdisjoint_by_iteration` is that loop as Python; container_methods inlines it for an iterator (a
generator, map/zip objects) so a lazy generator's body runs at each draw, in eager's order, and stops where
eager stops: drawing it whole was a graph break for a generator with effects. The lookup is the base's
(`set.__contains__`), as CPython's, not a subclass's own `__contains__`.
"""
from __future__ import annotations


def _item(obj, index):
    try:
        return True, obj[index]
    except (IndexError, StopIteration):
        return False, None


def sequence_iterator(obj):
    index = 0
    while True:
        found, item = _item(obj, index)
        if not found:
            return
        yield item
        index += 1


def contains_by_iteration(obj, item):
    for element in obj:
        if element is item or element == item:
            return True
    return False


def isdisjoint_by_iteration(s, other, contains):
    for key in other:
        hash(key)
        if contains(s, key):  # the set's own lookup, not a subclass's __contains__
            return False
    return True



_MISSING = object()


def check_reversible(value) -> None:
    """reversed() of an iterator (a generator, list_iterator, map, ...) raises as CPython's does: its type has no
    __reversed__ and is no sequence (revBF PRE-2: the trace drew it and reversed the items); so does reversed() of
    a set or frozenset, and of a class whose __reversed__ is None (revBO HIGH-1)."""
    from .breaks import UserException
    from .carried_loops import CarriedIteratorValue
    from .values import IteratorValue
    from .values import ListValue, NewObjectValue, SetValue, TupleValue
    kinds = (IteratorValue, CarriedIteratorValue, SetValue, ListValue, TupleValue, NewObjectValue)
    cls = value.python_type() if isinstance(value, kinds) else None
    rev = getattr(cls, "__reversed__", _MISSING)  # None: declared not reversible (revBO HIGH-1)
    if isinstance(cls, type) and (rev is None or rev is _MISSING and
                                  not (hasattr(cls, "__getitem__") and hasattr(cls, "__len__"))):
        heap = cls.__flags__ & (1 << 9)  # Py_TPFLAGS_HEAPTYPE: a class statement's tp_name is its bare name
        name = cls.__name__ if heap or cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        raise UserException(TypeError(f"'{name}' object is not reversible"))


__all__ = ["check_reversible", "contains_by_iteration", "isdisjoint_by_iteration", "sequence_iterator"]
