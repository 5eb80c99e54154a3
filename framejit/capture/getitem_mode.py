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
"""
from __future__ import annotations

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


def exit_(output, saved: int) -> None:
    output.getitem_to_index = saved


def subscript(tx, obj: TensorValue, key: Value) -> Value | None:
    """`obj[key]` under the mode: the recorded `aten.index`, or None when the mode leaves the subscript
    alone (a leaf that is neither a tensor nor an int)."""
    if isinstance(key, ConstantValue) and type(key.value) in (tuple, list):
        leaves = [ConstantValue(v) for v in key.value]
    elif isinstance(key, SequenceValue) and key.python_type() in (tuple, list):
        leaves = list(key.items)
    else:
        leaves = [key]
    if not all(_index_leaf(leaf) is not None for leaf in leaves):
        if any(isinstance(leaf, SequenceValue) or isinstance(leaf, ConstantValue) and type(leaf.value) in (tuple, list)
               or _symbolic(leaf) for leaf in leaves):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a subscript with a nested or symbolic index under "
                                                          "TransformGetItemToIndex")
        return None
    indices = [leaf if isinstance(leaf, TensorValue) else _index_tensor(tx, obj, leaf) for leaf in leaves]
    return tx.output.call("call_function", torch.ops.aten.index.Tensor, (obj, ListValue(indices)), {})


def _index_leaf(leaf: Value) -> Value | None:
    if isinstance(leaf, TensorValue):
        return leaf
    if isinstance(leaf, ConstantValue) and isinstance(leaf.value, int):
        return leaf
    return None


def _symbolic(leaf: Value) -> bool:
    return not isinstance(leaf, (ConstantValue, TensorValue)) and not leaf.is_constant() and \
        issubclass(leaf.python_type(), int)


def _index_tensor(tx, obj: TensorValue, leaf: ConstantValue) -> Value:
    kwargs = {"dtype": ConstantValue(torch.int64), "device": ConstantValue(obj.fake.device)}
    return tx.output.call("call_function", torch.tensor, (ConstantValue(leaf.value),), kwargs)
