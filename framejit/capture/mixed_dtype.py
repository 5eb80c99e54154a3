"""Eager's mixed-dtype check of the CPU normalization kernels, made while tracing.

NOTE [Mixed dtypes of CPU norms]: eager's CPU batch_norm, layer_norm and group_norm refuse parameters
(weight, bias, running statistics) whose dtype differs from the input's, except float32 parameters of a
bfloat16/float16 input (ATen's check_mixed_data_type: "mixed dtype (CPU): all inputs must share same
datatype." when the input is not a reduced float type, "... expect parameter to have scalar type of Float"
when a parameter is not float32). Fake tensors' meta rules do not check, so the lowered backends (onnxrt,
triton) decomposed the op with type promotion and returned a result where eager raises (red team 6:
`nn.BatchNorm1d` with float32 weights on a float64 input). The check is made on the fake values when the
call is traced, and the user's RuntimeError is raised as eager raises it (the frame runs eagerly from there).
"""
from __future__ import annotations

from typing import Any

import torch

from .breaks import UserException

F = torch.nn.functional
_REDUCED = (torch.bfloat16, torch.float16)

# target -> positions of (input, parameters...) in the positional arguments, and their keyword names
_PARAMETERS: dict[Any, tuple[tuple[int, str], tuple[tuple[int, str], ...]]] = {
    F.batch_norm: ((0, "input"), ((3, "weight"), (4, "bias"), (1, "running_mean"), (2, "running_var"))),
    torch.batch_norm: ((0, "input"), ((1, "weight"), (2, "bias"), (3, "running_mean"), (4, "running_var"))),
    F.layer_norm: ((0, "input"), ((2, "weight"), (3, "bias"))),
    torch.layer_norm: ((0, "input"), ((2, "weight"), (3, "bias"))),
    F.group_norm: ((0, "input"), ((2, "weight"), (3, "bias"))),
    torch.group_norm: ((0, "input"), ((2, "weight"), (3, "bias"))),
}


def _arg(args: tuple, kwargs: dict, position: int, name: str) -> Any:
    return args[position] if position < len(args) else kwargs.get(name)


def check_mixed_norm(target: Any, fake_args: tuple, fake_kwargs: dict) -> None:
    """Raise eager's RuntimeError for a CPU norm whose parameters' dtype differs from its input's."""
    spec = _PARAMETERS.get(target) if callable(target) else None
    if spec is None:
        return
    x = _arg(fake_args, fake_kwargs, *spec[0])
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return
    params = [p for p in (_arg(fake_args, fake_kwargs, *s) for s in spec[1]) if isinstance(p, torch.Tensor)]
    if not params or params[0].dtype == x.dtype:  # ATen's is_mixed_type: the first defined parameter decides
        return
    if x.dtype not in _REDUCED:
        raise UserException(RuntimeError("mixed dtype (CPU): all inputs must share same datatype."))
    if any(p.dtype != torch.float32 for p in params):
        raise UserException(RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float"))


__all__ = ["check_mixed_norm"]
