"""Dynamic scalars converted to a tensor's dtype (NOTE [Scalars converted to a narrow dtype]).

NOTE [Scalars converted to a narrow dtype]: ops that store a Python scalar into a tensor (`fill_`,
`torch.full`, `new_full`, `masked_fill`, `index_fill`, `x[i] = n`, `clamp`, `torch.where`, `F.pad`'s value,
`torch.tensor([n])`, ...) check in eager that the scalar fits the tensor's dtype ("value cannot be
converted to type int8_t without overflow"); some ops check and others wrap or give inf. With the scalar a
dynamic int (a graph input, NOTE [Dynamic ints]) the check ran only in the trace, on its example value: a
later call with `n = 300` for an int8 tensor was stored as 44 by onnxrt and triton where eager raised.
So for these ops, a dynamic int whose target dtype cannot hold every int64 (narrow ints, float16) is
guarded to lie in the dtype's range (a relation of the shape env: no recompile while it holds); a value outside the range is
specialised (guarded equal) and the op is a graph break, so it runs eagerly with eager's own semantics
(raise, wrap or inf: fake tensors do not check every conversion, `fill_` for one, and a lowered backend
casts the constant silently). The same break
is taken for a constant outside the range (`x.index_fill(0, i, 300)`, `x.masked_fill_(m, 300)`,
`x.clamp(max=300)` on int8, `h.masked_fill(m, -1e9)` on float16): those fake kernels do not check either,
and onnxrt stored 44; infinities and NaN into floating dtypes are fine and stay in the graph. Dynamic floats
needed nothing (1e40 into float32 and 7e4 into float16 raised
as eager on onnxrt and triton: checked when this was written).
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, SequenceValue, SymNodeValue, TensorValue, Value

# call_function targets and call_method names that convert a scalar argument to a tensor's dtype
_FUNCTIONS = {torch.full, torch.full_like, torch.fill, torch.masked_fill, torch.index_fill, torch.clamp,
              torch.clip, torch.where, torch.scatter, torch.tensor, torch.as_tensor, F.pad, F.threshold,
              F.hardtanh, operator.setitem, torch.pow,
              torch.scalar_tensor}  # NOTE [Tensors of symbolic ints]: torch.tensor([n]) traces as scalar_tensor
_METHODS = {"fill_", "new_full", "masked_fill", "masked_fill_", "index_fill", "index_fill_", "clamp", "clamp_",
            "clip", "clip_", "scatter", "scatter_", "__setitem__", "pow", "pow_", "__pow__", "__ipow__"}
_NO_OVERFLOW = (torch.int64, torch.float64, torch.complex128, torch.bool)


def check_converted_ints(kind: str, target: Any, args: tuple, kwargs: dict) -> None:
    """Guards every dynamic int the op converts to be in range of the target dtype; a graph break (the
    value specialised) when one is outside it, or when a constant int or finite float is."""
    try:
        if not (target in _FUNCTIONS if kind == "call_function" else target in _METHODS):
            return
    except TypeError:  # an unhashable target
        return
    scalars = _converted_scalars(target, args, kwargs)
    if not scalars:
        return
    dtype = _target_dtype(target, args, kwargs, scalars)
    if dtype is None or dtype in _NO_OVERFLOW or dtype.is_complex:
        return
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    outside = [v for v in scalars if not _fits(v, dtype, info.min, info.max)]
    if outside:
        values = [v.as_constant() for v in outside]  # specialised: guarded equal
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"{getattr(target, '__name__', target)} with {values} outside the range of {dtype} "
                          f"(eager checks the conversion)")


def _fits(v: Value, dtype: torch.dtype, low: float, high: float) -> bool:
    """The value fits the dtype (a symbolic int: guarded so). An int (at most 64 bits while symbolic) fits
    every floating dtype but float16; an infinite or NaN float fits every floating dtype."""
    if isinstance(v, SymNodeValue):
        if dtype.is_floating_point and dtype is not torch.float16:
            return True
        return _guard_in_range(v, low, high)
    value = v.as_constant()
    if dtype.is_floating_point and (not math.isfinite(value) or (type(value) is int and dtype is not torch.float16)):
        return True
    return math.isfinite(value) and low <= value <= high


def _converted_scalars(target: Any, args: tuple, kwargs: dict) -> list[Value]:
    if target in (operator.setitem, "__setitem__"):
        candidates = _leaves(args[2:])
    elif target in (torch.tensor, torch.as_tensor):
        candidates = _leaves(args[:1])
    else:  # top-level arguments only: sizes come in tuples and lists
        candidates = [*args, *(v for k, v in kwargs.items() if k != "dim")]
    return [v for v in candidates if (isinstance(v, SymNodeValue) and v.python_type() is int)
            or (isinstance(v, ConstantValue) and type(v.value) in (int, float))]


def _leaves(values: tuple) -> list[Value]:
    """The scalar values inside (possibly nested) lists and tuples of values."""
    out: list[Value] = []
    for v in values:
        if isinstance(v, SequenceValue):
            out += _leaves(tuple(v.items))
        elif isinstance(v, (list, tuple)):
            out += _leaves(tuple(v))
        else:
            out.append(v)
    return out


def _target_dtype(target: Any, args: tuple, kwargs: dict, scalars: list[Value]) -> torch.dtype | None:
    dtype = kwargs.get("dtype")
    if dtype is not None:
        value = getattr(dtype, "value", dtype)
        return value if isinstance(value, torch.dtype) else None
    if target in (torch.full, torch.tensor, torch.as_tensor, torch.scalar_tensor):  # the scalar's own type
        return torch.int64
    dtypes = [v.fake.dtype for v in (*args, *kwargs.values()) if isinstance(v, TensorValue)]
    # torch.where(cond, x, n): the condition's bool is not the target
    return next((d for d in dtypes if d is not torch.bool), dtypes[0] if dtypes else None)


def _guard_in_range(v: SymNodeValue, low: float, high: float) -> bool:
    """True when the int lies in [low, high], guarded so (shape env relations); False otherwise."""
    if not isinstance(v.sym, torch.SymInt):
        return low <= v.as_constant() <= high
    example = v.sym.node.hint
    if example is None or not (low <= example <= high):
        return False
    return bool(v.sym >= int(low)) and bool(v.sym <= int(high))
