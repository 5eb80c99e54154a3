"""Small library calls answered at trace time: `sys.intern`, `id()` of objects from outside, `Tensor.type()` (the type name of a
tensor, or a conversion to the dtype that a type name, tensor class or dtype names), and
`torch._dynamo.graph_break()`, which breaks the graph as it asks.

`collections.namedtuple(...)` called inside the region is not answered here: eager makes a new class on
every call, and a class made once while tracing would be observably another type.

`Tensor.type()` without arguments is metadata (from the fake tensor: dtype and device, which inputs are
guarded on). `t.type(T)` is `t.to(dtype)` for the dtype `T` stands for on the tensor's own device (the
same tensor when it already has that type, as eager returns `t` itself); a type naming another device
(`torch.cuda.HalfTensor`) or any keyword argument is a graph break.
"""
from __future__ import annotations

import sys

import torch

from .breaks import BreakKind, Unsupported, UserException
from .builtins import _fold, BUILTIN_HANDLERS
from .values import ConstantValue, TensorValue, Value

BUILTIN_HANDLERS[sys.intern] = _fold(sys.intern)


def _id(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`id(obj)` of an object from outside (a module, a user object, a class, a function): the real id,
    with the object guarded by identity, so a call with another object recompiles (torch's parametrize
    caches by `id(module)`). Anything else (tensors, objects made while tracing, constants whose
    identity CPython does not promise) is a graph break."""
    from .values import ObjectValue, UserFunctionValue
    if len(args) != 1 or kwargs:
        raise UserException(TypeError(f"id() takes exactly one argument ({len(args) + len(kwargs)} given)"))
    value = args[0]
    if isinstance(value, ObjectValue) and value.source is not None and type(value.obj) not in (int, float, str, bytes):
        tx.output.guard_id(value.source, value.obj)
        return ConstantValue(id(value.obj))
    if isinstance(value, UserFunctionValue) and value.source is not None:
        tx.output.guard_id(value.source, value.fn)
        return ConstantValue(id(value.fn))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"id() of {value.describe()}")


BUILTIN_HANDLERS[id] = _id


def forced_break(f) -> None:
    """`torch._dynamo.graph_break()` asks for a graph break at the call (its body is empty, so inlining
    it would silently capture through). Recognised by name, never imported (NOTE [Compile-aware library
    paths])."""
    if getattr(f, "__name__", None) == "graph_break" and getattr(f, "__module__", None) == "torch._dynamo.decorators":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch._dynamo.graph_break() asks for a graph break")



def tensor_type(tx, t: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not args and not kwargs:
        return ConstantValue(t.fake.type())
    if kwargs or len(args) != 1 or not args[0].is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.type() with these arguments")
    target = args[0].as_constant()
    if t.fake.device.type != "cpu":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.type() of a {t.fake.device.type} tensor")
    try:
        converted = torch.empty(0, dtype=t.fake.dtype).type(target)  # what eager makes of `target`
    except Exception as e:
        raise UserException(e) from None
    if converted.device.type != "cpu":
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.type({target!r}) moves the tensor to another device")
    return tx.output.call("call_method", "to", (t, ConstantValue(converted.dtype)), {})


__all__ = ["forced_break", "tensor_type"]
