"""Questions about a strided nested tensor answered while tracing, instead of a break at each.

NOTE [Metadata of nested tensors]: a strided nested tensor is an opaque value (NOTE [Nested tensors stay out
of graphs], values/builder.py): an op on it breaks. Code that carries one mostly asks about it before
handing it to a kernel: nn.TransformerEncoderLayer's fast path checks `src.dim()` and
`torch.overrides.has_torch_function(tensor_args)` before `torch._transformer_encoder_layer_fwd`, and each
question was a break of its own (three per layer frame). Questions whose answer is a fact of the tensor's
metadata, not of its data, are answered from the real tensor at trace time and guarded where its source can
be read again: `dim()`/`ndimension()`/`is_floating_point()` (a guard calls the method again), and the
`__torch_function__` protocol checks (`has_torch_function*`) over arguments that are tensors of plain
`torch.Tensor` type (their types are guarded already; the answer also depends only on the torch-function mode
state, which every entry guards: NOTE [Torch function and dispatch modes] in convert.py). The kernel call
itself still breaks.
"""
from __future__ import annotations

from typing import Any

import torch

from .values import ConstantValue, ObjectValue, SequenceValue, TensorValue, Value

_METHODS = {torch.Tensor.dim: "dim", torch.Tensor.ndimension: "ndimension",
            torch.Tensor.is_floating_point: "is_floating_point"}
_PROTOCOL = (torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
             torch.overrides.has_torch_function_variadic)


def is_nested_value(v: Value) -> bool:
    """An opaque value holding a strided nested tensor of plain torch.Tensor type."""
    return isinstance(v, ObjectValue) and type(v.obj) is torch.Tensor and v.obj.is_nested


def nested_tensor_call(tx, fn: Any, args: list[Value], kwargs: dict) -> Value | None:
    """The answer to `fn(*args)` when it asks about a nested tensor's metadata (module docstring), else None."""
    try:
        method = _METHODS.get(fn)
        protocol = any(fn is p for p in _PROTOCOL)  # by identity: never a user object's __eq__
    except TypeError:  # an unhashable callable
        return None
    if method is not None and len(args) == 1 and not kwargs and is_nested_value(args[0]) \
            and args[0].source is not None:
        answer = getattr(args[0].obj, method)()
        e = args[0].source.expr(tx.output.names)
        tx.output.add_guard("NESTED", f"{e}.{method}() == {answer!r}", args[0].source, expected=repr(answer),
                            actual=f"{e}.{method}()")
        return ConstantValue(answer)
    if protocol and not kwargs and any(_has_nested(a) for a in args):
        leaves = [_stand_in(a) for a in args]
        if any(leaf is None for leaf in leaves):
            return None
        return ConstantValue(fn(*leaves))
    if protocol or fn is torch.overrides.handle_torch_function:  # NOTE [Protocol checks of subclass tensors]
        from .torch_function_checks import protocol_answer
        return protocol_answer(tx, fn, args, kwargs)
    return None


def _has_nested(v: Value) -> bool:
    if isinstance(v, SequenceValue):
        return any(_has_nested(i) for i in v.items)
    return is_nested_value(v)


def _stand_in(v: Value) -> Any:
    """A real object that answers the protocol check as `v` does: the nested tensor itself, an empty tensor
    for a traced tensor without a __torch_function__ of its own, a tuple or list of those; None for anything
    else (the ordinary path answers then)."""
    if isinstance(v, SequenceValue) and v.cls in (tuple, list):
        items = [_stand_in(i) for i in v.items]
        return None if any(i is None for i in items) else v.cls(items)
    if is_nested_value(v):
        return v.obj
    if isinstance(v, TensorValue) and (v.python_type() is torch.Tensor or getattr(
            v.python_type(), "__torch_function__", None) is torch._C._disabled_torch_function_impl):
        return torch.empty(0)  # a plain tensor or a Parameter (the tensor guard checks its exact type)
    return None
