"""Integer tensors meeting Python floats under a default dtype set inside the traced region.

NOTE [Comparisons under a default dtype set inside]: `n == 16777216.0` for an integer (or bool) tensor `n` compares
in the default dtype (torch's result_type of an integral tensor and a Python float), so after
`torch.set_default_dtype(torch.float64)` in the traced code eager compares in float64 (16777217 != 16777216.0). The
result is bool: neither pinning dtypes nor the promotion rewrites that keep a float result's dtype (NOTE [Default
dtype in the lowered graph], NOTE [Default dtype of promotions in joint halves] in backends/state.py) see which
default it used, and onnxrt and triton, which lower the graph again under the caller's default, compared in float32
(True; hfixD's known gap). The same holds for arithmetic (`n * 0.5`, `n / 3`, `n ** 0.5`, `torch.sqrt(n)`) under a
float16 or bfloat16 default, which onnxrt's promotion preview does not keep (review revZ MED-3: float32 where eager
gives float16). Where the default in force at such a call (NOTE [Default dtype changes] in state_blocks.py) is not
the one at entry, the integral operand is converted to it first, as a node of the graph: `n.to(float64) ==
16777216.0` and `n.to(float16) * 0.5` are eager's computations on every backend, and calls under the entry's default
(guarded at entry) are left as they are.
"""
from __future__ import annotations

import operator
from typing import Any

import torch

from .values import ConstantValue, SymFloatValue, TensorValue

_NAMES = ("eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow")
_TORCH_NAMES = ("eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
                "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
                "remainder", "fmod", "pow")
_DUNDERS = (*_NAMES, "div", *(f"r{n}" for n in _NAMES[6:]), "rdiv")
_TARGETS = frozenset((*(getattr(operator, n) for n in _NAMES), *(getattr(torch, n) for n in _TORCH_NAMES),
                      *(getattr(torch.Tensor, n) for n in _TORCH_NAMES), *_TORCH_NAMES,
                      *(f"__{n}__" for n in _DUNDERS),
                      *(getattr(torch.Tensor, f"__{n}__") for n in _DUNDERS if hasattr(torch.Tensor, f"__{n}__"))))


# true division of integers computes in the default dtype too (`n / 3`, `n / m`), as do float functions of an
# integral tensor (`torch.sqrt(n)`)
_DIVISIONS = frozenset((operator.truediv, torch.div, torch.divide, torch.true_divide, torch.Tensor.div,
                        torch.Tensor.divide, torch.Tensor.true_divide, torch.Tensor.__truediv__,
                        torch.Tensor.__rtruediv__, "div", "divide", "true_divide", "__truediv__", "__rtruediv__",
                        "__div__", "__rdiv__"))
_UNARY_NAMES = ("sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
                "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv",
                "lgamma", "digamma", "reciprocal")
_UNARY = frozenset((*_UNARY_NAMES, *(getattr(torch, n) for n in _UNARY_NAMES if hasattr(torch, n)),
                    *(getattr(torch.Tensor, n) for n in _UNARY_NAMES if hasattr(torch.Tensor, n))))


def _integral(value: Any) -> bool:
    fake = getattr(value, "fake", None) if isinstance(value, TensorValue) else None
    return isinstance(fake, torch.Tensor) and not (fake.is_floating_point() or fake.is_complex())


def _python_float(value: Any) -> bool:
    return isinstance(value, SymFloatValue) or (isinstance(value, ConstantValue) and type(value.as_constant()) is float)


# NOTE [Clamps under a default dtype set inside]: `torch.clamp(n, min=s)` for an integral tensor `n` and a Python
# float bound computes in the default dtype too, and converts the bound to it with eager's overflow check: under
# a bfloat16 default eager gives bfloat16 (onnxrt, lowering under the caller's float32 default, gave float32 and
# other values: review revB MED), under float16 with s = 16777217.0 it raises "value cannot be converted to type
# c10::Half without overflow" (onnxrt and triton returned values). `n.to(dtype).clamp(min=s)` is eager's
# computation, bound conversion and error included; the in-place clamp_ (an error in eager) is left alone.
_CLAMP_NAMES = ("clamp", "clip", "clamp_min", "clamp_max")
_CLAMPS = frozenset((*_CLAMP_NAMES, *(getattr(torch, n) for n in _CLAMP_NAMES),
                     *(getattr(torch.Tensor, n) for n in _CLAMP_NAMES)))


def _clamp_cast(out, dtype, target: Any, args: tuple, kwargs: dict) -> tuple | None:
    """`args` of a clamp of an integral tensor with a Python float bound, the tensor converted to `dtype`
    (NOTE [Clamps under a default dtype set inside]); None for any other call."""
    try:
        if target not in _CLAMPS:
            return None
    except TypeError:  # an unhashable target
        return None
    if not args or len(args) > 3 or set(kwargs) - {"min", "max"} or not _integral(args[0]):
        return None
    if not any(_python_float(bound) for bound in (*args[1:], *kwargs.values())):
        return None
    return (out.call("call_method", "to", (args[0], ConstantValue(dtype)), {}), *args[1:])


def cast_ints_for_default(out, kind: str, target: Any, args: tuple, kwargs: dict) -> tuple:
    """`args` of the call, its integral tensor operand converted to the default dtype in force where that is not
    the entry's (NOTE [Comparisons under a default dtype set inside])."""
    dtype = out.__dict__.get("default_dtype")
    if dtype is None or dtype is torch._C.get_default_dtype():
        return args
    clamped = _clamp_cast(out, dtype, target, args, kwargs)
    if clamped is not None:
        return clamped
    if kwargs or not args or len(args) > 2:
        return args
    try:
        kind_of = "unary" if target in _UNARY else "divide" if target in _DIVISIONS else \
            "scalar" if target in _TARGETS else None
    except TypeError:  # an unhashable target
        return args
    if kind_of is None or (len(args) == 1) != (kind_of == "unary"):
        return args
    for i in range(len(args)):
        other = args[1 - i] if len(args) == 2 else None
        if _integral(args[i]) and (kind_of == "unary" or _python_float(other) or kind_of == "divide" and (
                _integral(other) or isinstance(other, ConstantValue) and type(other.as_constant()) in (int, bool))):
            cast = out.call("call_method", "to", (args[i], ConstantValue(dtype)), {})
            return (*args[:i], cast, *args[i + 1:])
    return args
