"""The operands of replayed set mutations, as CPython saw them.

NOTE [Set operands in the replay]: a set from outside mutated by the traced code is replayed after the
graph as the method calls the code made (NOTE [Mutation log] in side_effects.py), so that it ends up laid
out as eager leaves it and iterates, after the call, in eager's order (NOTE [Set order]). The layout a
call produces depends on the *kind* of its operand, not only on its elements: `s |= t` and
`s.update(t)` with a set or dict `t` resize `s` once for all of `t` before inserting (`set_merge`, the
dict fast path), an iterable inserts one by one (resizing on the way); `intersection_update` and
`symmetric_difference_update` walk a set operand's table but first build a set from any other iterable.
So the replayed call passes an operand of the same kind with the same iteration order:
- a set or frozenset of constants: a frozenset copy whose iteration order (and, when the target is empty
  at that point, table size, `sys.getsizeof`) is checked equal to the trace's operand; a copy that differs
  is not replayed (a graph break runs the call in Python);
- the target itself (`s |= s`, `s ^= s`): the target, so the replay makes the same self-call;
- a dict: a dict of the same keys in the same order; anything else: a tuple of its elements in order.
Sets of tensors (IdentityKey elements, ordered by address: NOTE [Sets of tensors]) keep a tuple.
"""
from __future__ import annotations

import sys
from typing import Any

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, TupleValue, Value
from .values.mappings import IdentityKey, key_value


def replay_operand(target, real: Any, target_empty: bool) -> Value:
    """The argument the replay passes for the operand `real` (what the traced call got, from
    identity_keys.set_operand) of a mutation of the set value `target`."""
    if real is target.items:
        return target
    if any(isinstance(k, IdentityKey) for k in real):
        return TupleValue([key_value(k) for k in real])
    if isinstance(real, (set, frozenset)):
        return ConstantValue(_layout_copy(real, target_empty))
    if isinstance(real, dict):
        return ConstantValue(dict.fromkeys(real))
    return TupleValue([key_value(k) for k in real])


def _layout_copy(real: set | frozenset, target_empty: bool) -> frozenset:
    if type(real) is frozenset:
        return real  # immutable: it stays as the trace saw it
    copy = frozenset(real)
    if list(copy) != list(real) or target_empty and sys.getsizeof(copy) != sys.getsizeof(real):
        raise Unsupported(BreakKind.SIDE_EFFECT, "a set operand whose hash-table layout a copy does not reproduce "
                                                 "(NOTE [Set operands in the replay])")
    return copy


def unknown_operand_layout(target, operands: list) -> None:
    """A set from outside (replayed) mutated with a set operand whose layout the trace does not know:
    eager's resulting layout is unknown too, so the call is not replayed but run in Python (a break)."""
    from .identity_keys import known_layout
    from .values import SetValue
    if target.source is not None and any(isinstance(o, SetValue) and not known_layout(o) for o in operands):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"a mutation of {target.source.describe()} by a set whose "
                                                 "hash-table layout the trace cannot reproduce")
