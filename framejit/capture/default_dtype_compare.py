"""Comparisons of integer tensors with Python floats under a default dtype set inside the traced region.

NOTE [Comparisons under a default dtype set inside]: `n == 16777216.0` for an integer (or bool) tensor `n`
compares in the default dtype (torch's result_type of an integral tensor and a Python float), so after
`torch.set_default_dtype(torch.float64)` in the traced code eager compares in float64 (16777217 != 16777216.0).
The result is bool: neither pinning dtypes nor the promotion rewrites that keep a float result's dtype (NOTE
[Default dtype in the lowered graph], NOTE [Default dtype of promotions in joint halves] in backends/state.py)
see which default it used, and onnxrt and triton, which lower the graph again under the caller's default,
compared in float32 (True; hfixD's known gap). Where the default in force at the comparison (NOTE [Default dtype
changes] in state_blocks.py) is not the one at entry, the integral operand is converted to it first, as a node
of the graph: `n.to(float64) == 16777216.0` is eager's comparison on every backend, and the entry default's own
comparisons (guarded at entry) are left as they are.
"""
from __future__ import annotations

import operator
from typing import Any

import torch

from .values import ConstantValue, SymFloatValue, TensorValue

_NAMES = ("eq", "ne", "lt", "le", "gt", "ge")
_COMPARISONS = frozenset((*(getattr(operator, n) for n in _NAMES), *(getattr(torch, n) for n in _NAMES),
                          *(getattr(torch.Tensor, n) for n in _NAMES), *(getattr(torch.Tensor, f"__{n}__") for n in _NAMES),
                          torch.greater, torch.greater_equal, torch.less, torch.less_equal, torch.not_equal,
                          *_NAMES, *(f"__{n}__" for n in _NAMES), "greater", "greater_equal", "less", "less_equal",
                          "not_equal"))


def _integral(value: Any) -> bool:
    fake = getattr(value, "fake", None) if isinstance(value, TensorValue) else None
    return isinstance(fake, torch.Tensor) and not (fake.is_floating_point() or fake.is_complex())


def _python_float(value: Any) -> bool:
    return isinstance(value, SymFloatValue) or (isinstance(value, ConstantValue) and type(value.as_constant()) is float)


def cast_compared_ints(out, kind: str, target: Any, args: tuple, kwargs: dict) -> tuple:
    """`args` of the call, its integral tensor operand converted to the default dtype in force where that is not
    the entry's (NOTE [Comparisons under a default dtype set inside])."""
    dtype = out.__dict__.get("default_dtype")
    if dtype is None or dtype is torch._C.get_default_dtype() or kwargs or len(args) != 2:
        return args
    try:
        if target not in _COMPARISONS:
            return args
    except TypeError:  # an unhashable target
        return args
    for i in (0, 1):
        if _integral(args[i]) and _python_float(args[1 - i]):
            cast = out.call("call_method", "to", (args[i], ConstantValue(dtype)), {})
            return (cast, args[1]) if i == 0 else (args[0], cast)
    return args
