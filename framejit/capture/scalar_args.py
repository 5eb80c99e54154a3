"""Output metadata of ops that take a 0-d tensor where their schema wants a Python number.

NOTE [Scalar arguments given as tensors]: `x.addcmul_(y, z, value=s)`, `torch._foreach_pow(s, exps)` and
`torch._foreach_lerp_(xs, ys, s)` accept a 0-d tensor `s` for a `Scalar` parameter; the op reads its
value (`s.item()`), so fake tensors cannot run it (DataDependentOutputException). What the op returns
(shapes, dtypes, devices, which input it mutates) does not depend on that value, only on its kind: a
Scalar made from a tensor is a bool, int, float or complex by the tensor's dtype, and it promotes as a
Python number of that kind would. So the output metadata is computed with a Python number of the same
kind in its place, while the graph node keeps the tensor, and the graph computes with its value at run
time, exactly as eager does. Only the parameters listed here are known to be Scalars: a 0-d tensor in a
Tensor parameter promotes differently from a Python number and is never replaced.
"""
from __future__ import annotations

from typing import Any

import torch

# (kind, target) -> positions (int) and keywords (str) of Scalar parameters
_SCALAR_PARAMS: dict[tuple[str, Any], tuple] = {
    **{("call_method", name): ("value",) for name in ("addcmul", "addcmul_", "addcdiv", "addcdiv_")},
    ("call_function", torch.addcmul): ("value",),
    ("call_function", torch.addcdiv): ("value",),
    ("call_function", torch._foreach_pow): (0,),
    ("call_function", torch._foreach_lerp): (2, "weight"),
    ("call_function", torch._foreach_lerp_): (2, "weight"),
}


# (kind, target) -> position and keyword of a `scalars` ScalarList parameter that also takes a 1-d CPU
# tensor (one value per list element): its fake kernel runs on meta and refuses the (meta) tensor ("Expected
# scalars to be on CPU"), though eager reads it on the CPU. Probed with a list of numbers of its length.
_SCALAR_LIST_PARAMS: dict[tuple[str, Any], tuple[int, str]] = {
    ("call_function", op): (3, "scalars") for op in (torch._foreach_addcdiv, torch._foreach_addcdiv_,
                                                     torch._foreach_addcmul, torch._foreach_addcmul_)}
SCALAR_LIST_META_ERROR = "Expected scalars to be on CPU, got meta instead"


def _number_like(t: torch.Tensor) -> Any:
    if t.dtype.is_complex:
        return 1 + 0j
    if t.dtype.is_floating_point:
        return 1.0
    return True if t.dtype is torch.bool else 1


def scalar_probe(kind: str, target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """`(args, kwargs)` with each 0-d tensor given for a Scalar parameter replaced by a Python number of
    its kind, or None when there is none to replace (NOTE [Scalar arguments given as tensors])."""
    try:
        params = _SCALAR_PARAMS.get((kind, target))
        scalar_list = _SCALAR_LIST_PARAMS.get((kind, target))
    except TypeError:  # an unhashable target
        return None
    if scalar_list is not None:
        return _scalar_list_probe(scalar_list, args, kwargs)
    if params is None:
        return None
    args, kwargs, replaced = list(args), dict(kwargs), False
    for p in params:
        holder = args if isinstance(p, int) else kwargs
        present = p < len(args) if isinstance(p, int) else p in kwargs
        if present and isinstance(holder[p], torch.Tensor) and holder[p].dim() == 0:
            holder[p] = _number_like(holder[p])
            replaced = True
    if not replaced:
        return None
    if kind == "call_function" and target is torch._foreach_pow and not isinstance(args[1], (list, tuple)):
        return None  # a Tensor base and a Tensor exponent is another overload
    return tuple(args), kwargs


def _scalar_list_probe(param: tuple[int, str], args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """A 1-d CPU tensor given for a `scalars` list replaced by as many Python numbers of its kind."""
    args, kwargs = list(args), dict(kwargs)
    holder, key = (args, param[0]) if param[0] < len(args) else (kwargs, param[1])
    t = holder[key] if holder is args or key in kwargs else None
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.device.type != "cpu":
        return None
    holder[key] = [_number_like(t)] * t.shape[0]
    return tuple(args), kwargs
