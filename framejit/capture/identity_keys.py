"""Set elements over abstract values, tensors included.

NOTE [Sets of tensors]: CPython hashes a tensor by its identity, so `{x, y}`, `s.add(y)` and `y in s`
depend only on which tensors are the same object. A tensor element is an IdentityKey whose token is the
identity of its fake tensor: values made by an in-place op (or an op returning its input) share their
input's fake, as the real results are the input object. Two different graph inputs were different
objects when traced; that is guarded (`a is not b`) as soon as both are used as elements, so a later
call that passes one tensor twice recompiles. A set holding tensors iterates in an order CPython
derives from addresses: iterating or popping one with more than one element is a graph break, and it
is never folded as a constant. Dict keys use the same elements (`state[param]`); a dict keeps insertion
order, so iterating one keyed by tensors is exact.
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import SetValue, TensorValue, Value
from .values.mappings import IdentityKey, key_value


def set_element(tx, value: Value) -> Any:
    """The hashable element `value` is in a set (a constant, or an IdentityKey for a tensor)."""
    if isinstance(value, TensorValue):
        _guard_distinct_inputs(tx, value)
        return IdentityKey(value, ("tensor", id(value.fake)))
    if not value.is_constant() or (isinstance(value, SetValue) and value.cls is set):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{value.describe()} as a set element or dict key (only "
                                                       "constants and tensors are modelled)")
    try:
        constant = value.as_constant()
        hash(constant)
    except TypeError as e:
        raise UserException(e) from None
    return constant


dict_key = set_element  # a dict key hashes as a set element does; dicts keep insertion order


def set_items(s: SetValue) -> list[Value]:
    """The elements of a set, in iteration order (NOTE [Sets of tensors] for sets holding tensors)."""
    if len(s.items) > 1 and any(isinstance(k, IdentityKey) for k in s.items):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "iteration over a set of tensors (its order follows addresses)")
    return [key_value(k) for k in s.items]


def _guard_distinct_inputs(tx, value: TensorValue) -> None:
    out = tx.output
    mine = _input_of(out, value)
    if mine is None:
        return
    keyed = out.__dict__.setdefault("identity_keyed_inputs", [])
    if any(entry is mine for entry in keyed):
        return
    for other in keyed:
        if other.value.fake is not mine.value.fake:
            a, b = mine.source.expr(out.names), other.source.expr(out.names)
            out.add_guard("OBJECT_ALIASING", f"{a} is not {b}", mine.source,
                          expected=f"{mine.source.describe()} and {other.source.describe()} are different tensors",
                          actual=f"{a} is {b}")
    keyed.append(mine)


def _input_of(out, value: TensorValue):
    return next((i for i in out.inputs if isinstance(i.value, TensorValue) and i.value.fake is value.fake), None)


__all__ = ["dict_key", "set_element", "set_items"]
