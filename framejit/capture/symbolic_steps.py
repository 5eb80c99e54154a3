"""Loops over symbolic ranges whose body computes: stepped in Python, the body a captured resume function
(NOTE [Scans over symbolic ranges]), and item stores at a symbolic int index (NOTE [Symbolic int indices
stored to])."""
from __future__ import annotations

from typing import Any

from .values import TensorValue, Value


# NOTE [Scans over symbolic ranges]: a chunked scan (`for i in range(n): out[:, i] = x[:, i] @ state + ...;
# state = state * g + ...` over `n = ceil(T / 64)` chunks: transformers' gated delta rule, linear attention)
# whose length is symbolic ran as Python with its body (NOTE [Loops over symbolic ranges]): only the body's
# calls go through frame hooks, so the ops written in the body ran eagerly, uncounted (/tmp/hhuntHF4/
# symloop70_root.py: no matmul in a graph from the second length on; stock torch.compile unrolls, one entry
# per chunk count until its recompile limit). A loop whose body computes itself (an operator or an item store
# in the body, no nested loop) steps in Python instead: the break at its GET_ITER makes the range's iterator
# in Python, stepped like any iterator made by Python (NOTE [Iterators stepped as Python] in carried_loops.py),
# the body a resume function taking the loop variable, which is a symbolic int from its third value on (x[:, i]
# a select, `out[:, i] = v` a select and copy_: NOTE [Symbolic int indices stored to] below). One
# entry of the body serves every step and length, and its ops are in its graph. A loop of calls only
# (`x = self.layers[i](x)`) or with a nested loop keeps running as Python (the calls are captured as frames).
def computes(insts: list, loop: Any) -> bool:
    body = [i for i in insts if loop.index < i.index < loop.arg]
    return any(i.name in ("BINARY_OP", "STORE_SUBSCR") for i in body) and not any(i.name == "FOR_ITER" for i in body)


# NOTE [Symbolic int indices stored to]: `out[:, i] = v` with a symbolic int `i` (a chunked scan stepping
# its body as a resume function, NOTE [Loops over symbolic ranges] in python_loops.py) went to torch's C++
# setitem, which read the int: the body's function compiled once per step until the recompile limit. Such a
# store is `torch.select(out, d, i).copy_(v)`, what torch's own setitem does for an int index (its copy
# broadcasts and casts `v` as copy_ does). Only for a tensor `v` of no more dimensions than the selected
# view (torch strips leading 1s first; copy_ would refuse those) and a target that is not a leaf requiring
# grad (whose error message differs); other stores specialise as before.
def store_select(tx, obj: TensorValue, key: Value, value: Value) -> bool:
    """`obj[key] = value` as a select and a copy_ (NOTE above); False where the caller stores as before."""
    if not isinstance(value, TensorValue) or (obj.fake.is_leaf and obj.fake.requires_grad):
        return False
    if value.fake.dim() >= obj.fake.dim():  # the select drops one dimension
        return False
    from .sym_arith import select  # NOTE [Symbolic int indices] there
    view = select(tx, obj, key)
    if view is None:
        return False
    tx.output.call("call_method", "copy_", (view, value), {})
    return True
