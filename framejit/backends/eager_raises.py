"""Graphs whose eager kernels raise on the dtypes they are given, where a lowering would return values.

NOTE [Dtypes eager's batch norm rejects]: eager's CPU batch norm accepts parameters and running statistics
whose dtypes are all the input's, or all float32 beside a bfloat16/float16 input (checked against eager for
every combination of float32/float64/bfloat16/float16 inputs, weights and statistics, train and eval); any
other mix raises a RuntimeError ("expected scalar type Float but found Double", "Expected all parameters to
have the same dtype", ...). Meta kernels do not check this, so the trace succeeds, and torch._decomp's
decomposition, lowered by onnxrt or triton, computed values with promoted dtypes (an nn.BatchNorm1d whose
running statistics were made float64 beside float32 inputs: every call returned values where eager raises on
every call). Such a graph runs as its Python code (the backends' eager fallback, logged on `eager_fallback`),
so eager's kernel raises its own error with its message. Only CPU tensors are judged (CUDA's rules are
other ones; a GPU graph is lowered as before).
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F

_REDUCED = (torch.bfloat16, torch.float16)
_PARAMETERS = ("weight", "bias", "running_mean", "running_var")


def _signature(target) -> inspect.Signature | None:
    if target is F.batch_norm:
        return inspect.signature(F.batch_norm)
    if target is torch.batch_norm:  # aten::batch_norm(input, weight, bias, running_mean, running_var, ...)
        return inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
                                  for name in ("input", *_PARAMETERS, "training", "momentum", "eps",
                                               "cudnn_enabled")])
    return None


def _tensor(gm: torch.fx.GraphModule, value: Any) -> torch.Tensor | None:
    if not isinstance(value, torch.fx.Node):
        return value if isinstance(value, torch.Tensor) else None
    val = value.meta.get("val")
    if val is None and value.op == "get_attr":
        val = gm
        for part in value.target.split("."):
            val = getattr(val, part, None)
    return val if isinstance(val, torch.Tensor) else None


def batch_norm_dtypes_rejected(gm: torch.fx.GraphModule) -> str | None:
    """Why eager's kernel raises on a batch norm of `gm` (NOTE [Dtypes eager's batch norm rejects]), or None."""
    for node in gm.graph.nodes:
        signature = _signature(node.target) if node.op == "call_function" else None
        if signature is None:
            continue
        try:
            bound = signature.bind(*node.args, **node.kwargs).arguments
        except TypeError:
            continue
        x = _tensor(gm, bound.get("input"))
        params = [t for t in (_tensor(gm, bound.get(name)) for name in _PARAMETERS) if t is not None]
        if x is None or x.device.type != "cpu" or any(t.device.type != "cpu" for t in params):
            continue
        dtypes = {t.dtype for t in params}
        if dtypes <= {x.dtype} or (x.dtype in _REDUCED and dtypes == {torch.float32}):
            continue
        return (f"{node.name}: eager's CPU batch norm raises for a {x.dtype} input with parameters or running "
                f"statistics of {sorted(str(d) for d in dtypes)} (NOTE [Dtypes eager's batch norm rejects])")
    return None
