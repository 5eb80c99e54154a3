"""Jumps, conditional branches and for-loops. Every condition is decided while tracing."""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported
from ..carried_loops import CarriedIteratorValue, step_value
from ..protocol import iterate, truth
from ..values import ConstantValue, IteratorValue
from ..values.containers import iterator_over
from . import op


@op("JUMP")
def jump(tx, inst):
    tx.jump(inst.arg)


def _truth_at_jump(tx, value, inst, jumps_if: bool) -> bool:
    """The value's truth; for a tensor whose data decides it, the side of a check that does not raise
    (NOTE [Speculated checks]), else a data-dependent break."""
    try:
        return truth(tx, value)
    except Unsupported as e:
        if e.graph_break.kind is not BreakKind.DATA_DEPENDENT:
            raise
        from ..speculated_checks import assumed_truth
        assumed = assumed_truth(tx, value, inst.arg, jumps_if)
        if assumed is None:
            raise
        return assumed


@op("POP_JUMP_IF_FALSE")
def pop_jump_if_false(tx, inst):
    if not _truth_at_jump(tx, tx.pop(), inst, False):
        tx.jump(inst.arg)


@op("POP_JUMP_IF_TRUE")
def pop_jump_if_true(tx, inst):
    if _truth_at_jump(tx, tx.pop(), inst, True):
        tx.jump(inst.arg)


@op("TO_BOOL")
def to_bool(tx, inst):
    """3.13: the truth of the value, as a bool (before a truth test normalize.py merges it into the test)."""
    tx.push(ConstantValue(truth(tx, tx.pop())))


def _is_none(value) -> bool:
    return isinstance(value, ConstantValue) and value.value is None


@op("POP_JUMP_IF_NONE")
def pop_jump_if_none(tx, inst):
    if _is_none(tx.pop()):
        tx.jump(inst.arg)


@op("POP_JUMP_IF_NOT_NONE")
def pop_jump_if_not_none(tx, inst):
    if not _is_none(tx.pop()):
        tx.jump(inst.arg)


@op("JUMP_IF_FALSE_OR_POP")
def jump_if_false_or_pop(tx, inst):
    if not truth(tx, tx.peek()):
        tx.jump(inst.arg)
    else:
        tx.pop()


@op("JUMP_IF_TRUE_OR_POP")
def jump_if_true_or_pop(tx, inst):
    if truth(tx, tx.peek()):
        tx.jump(inst.arg)
    else:
        tx.pop()


@op("GET_ITER")
def get_iter(tx, inst):
    if _symbolic_rows(tx.peek()):
        raise Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, "a loop over the rows of a tensor whose length is "
                          "symbolic: it steps in Python instead of specialising the length (NOTE [Loops over "
                          "symbolic rows])")
    from ..python_loops import symbolic_range_loop  # NOTE [Loops over symbolic ranges] in python_loops.py
    loop_break = symbolic_range_loop(tx, inst, tx.peek())
    if loop_break is not None:
        raise loop_break
    value = tx.pop()
    if isinstance(value, (IteratorValue, CarriedIteratorValue)):
        tx.push(value)
    else:
        from ..protocol import object_iterator  # NOTE [Iterators of objects]
        tx.push(object_iterator(tx, value) or iterator_over(value, iterate(tx, value)))


# NOTE [Loops over symbolic rows]: `for row in t` unrolls one step per row, which needs t's length: for a
# length that is symbolic (it changed between calls, e.g. the rows of nonzero() in an MoE expert loop) that
# specialised it again (a guard `size == k`), so the frame compiled once per length. Instead the iterator is
# made in Python at a break (GET_ITER) and the loop steps in Python (NOTE [Iterators stepped as Python] in
# carried_loops.py), its body a resume function that takes the row.
def _symbolic_rows(value) -> bool:
    import torch
    from ..torch_function_inline import ungated  # framejit's own read: no __torch_function__ runs for it
    from ..values import TensorValue
    if not isinstance(value, TensorValue):
        return False
    with ungated():
        return value.fake.dim() > 0 and isinstance(value.fake.shape[0], torch.SymInt)


@op("FOR_ITER")
def for_iter(tx, inst):
    if isinstance(tx.peek(), CarriedIteratorValue):  # NOTE [Loops carried across breaks]
        tx.stack[-1] = step_value(tx, tx.peek())
    if not isinstance(tx.peek(), IteratorValue):  # NOTE [Other iterators stepped as Python] in carried_loops.py
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a for loop over {tx.peek().describe()}, an iterator "
                          "the trace cannot step")
    tx.peek().looped = True  # NOTE [Iterators of their own type] in values/containers.py
    item = tx.peek().next()
    if item is None:
        tx.pop()  # canonical form: an exhausted iterator is popped and the loop exits (NOTE in normalize)
        tx.jump(inst.arg)
    else:
        tx.push(item)
