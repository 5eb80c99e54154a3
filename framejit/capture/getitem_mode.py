"""torch's TransformGetItemToIndex mode as a with-block of the trace (kind "getitem_to_index" in context.py).

NOTE [Getitem-to-index blocks]: transformers' sdpa_mask builds masks with
`with TransformGetItemToIndex(): mask = vmap(vmap(vmap(vmap(mask_fn))))(b, h, q, kv)` (Gemma3, PaliGemma-2 and
every model whose mask has an or/and mask function: token types, packed sequences). The class (from
torch._dynamo._trace_wrapped_higher_order_op) is a TorchFunctionMode whose only change is `Tensor.__getitem__`:
when every leaf of the index (torch's pytree leaves) is a tensor or an int, it returns
`mod_index(t, [tensor(int) or tensor, ...])` (ModIndex: `aten.index(t, indices)`, a copy, never a view); any
other index and every other torch call go on unchanged. framejit broke at its `__enter__` (`_push_mode` is C
state) and the rest of the frame, called under the mode, ran eagerly: Gemma3ForConditionalGeneration made
8 graphs per call and 1 eager frame where stock torch.compile makes 4 and none.

Now the block is a CtxValue: entering it raises `output.getitem_to_index` (exiting restores it), and while it
is up a tensor subscript whose key is a tensor, an int, or a flat tuple or list of them is recorded as the mode
computes it: `aten.index.Tensor(t, [indices])`, ints made `torch.tensor(i, dtype=int64, device=t.device)`. A
key with other leaves (slices, None, Ellipsis) is the ordinary subscript, as under the mode. A symbolic int
leaf, or a nested key, is a graph break (the subscript then runs as Python, under the block re-entered). A
graph break inside the block carries it as the mode object itself (`TransformGetItemToIndex()`, entered again
by the break's code and by the resume function), so calls made there run under the mode as in eager. Only
the exact class: a subclass may change `__torch_function__`.

NOTE [Subscripts the mode transforms, by any path] (review revC C4): a key leaf the trace does not know as a
constant or a tensor (a symbolic int: `k` after it changed between calls) is a break, as the mode may
transform it; it was taken by the symbolic-index path (sym_arith.select), a VIEW, so
`with TransformGetItemToIndex(): y = x[k]; y.add_(1)` wrote into the caller's x on the 2nd call (eager: a
copy). And a tensor subscript that reaches the graph by another spelling than the subscript protocol
(`x.__getitem__(k)`, `operator.getitem(x, k)`, `torch.Tensor.__getitem__(x, k)`) with a key the mode would
transform is a break too (check_call), never a view.
"""
from __future__ import annotations

import operator
import sys
from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, ListValue, SequenceValue, TensorValue, Value

_MODULE = "torch._dynamo._trace_wrapped_higher_order_op"


def mode_class() -> type | None:
    """TransformGetItemToIndex when its module is loaded (no object of it can exist otherwise); framejit does
    not import torch._dynamo itself."""
    module = sys.modules.get(_MODULE)
    return getattr(module, "TransformGetItemToIndex", None)


def is_mode_class(cls: Any) -> bool:
    return cls is not None and cls is mode_class()


def is_mode_object(obj: Any) -> bool:
    return is_mode_class(type(obj))


def active(output) -> bool:
    return getattr(output, "getitem_to_index", 0) > 0


def enter(output) -> int:
    """Raise the block depth; returns the depth to restore on exit."""
    saved = getattr(output, "getitem_to_index", 0)
    output.getitem_to_index = saved + 1
    return saved


def check_call(output, kind: str, target: Any, args: tuple) -> None:
    """A tensor subscript recorded by another path while the mode is up is a break when the mode would
    transform its key (NOTE [Breaks inside getitem-to-index blocks])."""
    if not active(output) or len(args) < 2 or not isinstance(args[0], TensorValue):
        return
    if target in (operator.getitem, torch.Tensor.__getitem__) or kind == "call_method" and target == "__getitem__":
        leaves = _leaves(args[1])
        if any(_nested(leaf) for leaf in leaves) or all(_index_leaf(leaf) is not None or _symbolic(leaf)
                                                        for leaf in leaves):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a tensor subscript under TransformGetItemToIndex "
                                                          "reached the graph as a view")


def exit_(output, saved: int) -> None:
    output.getitem_to_index = saved


def subscript(tx, obj: TensorValue, key: Value) -> Value | None:
    """`obj[key]` under the mode: the recorded `aten.index`, or None when the mode leaves the subscript
    alone (a leaf that is neither a tensor nor an int)."""
    leaves = _leaves(key)
    if not all(_index_leaf(leaf) is not None for leaf in leaves):
        if any(_nested(leaf) or _symbolic(leaf) for leaf in leaves):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a subscript with a nested or symbolic index under "
                                                          "TransformGetItemToIndex")
        return None
    indices = [leaf if isinstance(leaf, TensorValue) else _index_tensor(tx, obj, leaf) for leaf in leaves]
    result = tx.output.call("call_function", torch.ops.aten.index.Tensor, (obj, ListValue(indices)), {})
    # the subscript as written, for a traced flex_attention mod (NOTE [Subscripts in flex_attention mods])
    container = None if not _nested(key) else type(key.value) if isinstance(key, ConstantValue) else key.python_type()
    result.node.meta["fj_subscript"] = (container, [None if isinstance(leaf, TensorValue) else leaf.value
                                                    for leaf in leaves])
    return result


def _leaves(key: Value) -> list:
    if isinstance(key, ConstantValue) and type(key.value) in (tuple, list):
        return [ConstantValue(v) for v in key.value]
    if isinstance(key, SequenceValue) and key.python_type() in (tuple, list):
        return list(key.items)
    return [key]


def _nested(leaf: Value) -> bool:
    return isinstance(leaf, SequenceValue) or isinstance(leaf, ConstantValue) and type(leaf.value) in (tuple, list)


def _index_leaf(leaf: Value) -> Value | None:
    if isinstance(leaf, TensorValue):
        return leaf
    if isinstance(leaf, ConstantValue) and isinstance(leaf.value, int):
        return leaf
    return None


def _symbolic(leaf: Value) -> bool:
    """A leaf whose value the trace does not know (a symbolic int, or anything but a constant or a tensor):
    whether the mode transforms it is not known, so it is a break."""
    from .values import SymNodeValue
    return isinstance(leaf, SymNodeValue) or not isinstance(leaf, (ConstantValue, TensorValue)) and \
        not leaf.is_constant()


def _index_tensor(tx, obj: TensorValue, leaf: ConstantValue) -> Value:
    kwargs = {"dtype": ConstantValue(torch.int64), "device": ConstantValue(obj.fake.device)}
    return tx.output.call("call_function", torch.tensor, (ConstantValue(leaf.value),), kwargs)
