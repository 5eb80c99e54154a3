"""`cumprod` as one product reduction over a triangular mask, for the onnxrt lowering (lowering.py).

torchlib has no translation of `aten.cumprod`, and torch._decomp's decomposition (torch._refs) writes it
with `prims.prod`, which torchlib does not translate either: every cumprod, and the backward of every
`prod` (its gradient multiplies exclusive cumprods from both ends) and of every cumprod, ran in torch between
ORT parts. `decomposition()` returns the lowering's entry (NOTE [cumprod as a masked product]).

NOTE [cumprod as a masked product]
cumprod(x, dim)[i] = prod over j <= i of x[j]: x is moved so that `dim` is last ([..., n]), repeated as rows
([..., n, n]), the entries above the diagonal set to 1 (a `triu` mask made from `ones`, no constants), and
reduced with `prod.dim_int` over the last dim, which torchlib writes as ReduceProd. Eager's kernel multiplies
sequentially from 1 in its accumulation type (double for float32 on CPU) and so does ReduceProd in float64:
float32 inputs are multiplied in float64 and rounded once, as eager's are. Results equal eager's bit for bit
in float32 and float64 (tests/backends/test_training_gaps5.py, zeros, infinities and NaN included; in
float32 multiplication ReduceProd was 3e-7 off). It holds n times the input; above
`_LIMIT` elements, and for non-float or symbolic sizes, the op is kept (it then runs in torch).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_LIMIT = 1 << 24  # elements of the masked [..., n, n] tensor


def cumprod(x, dim, dtype=None):
    if dtype is not None and dtype != x.dtype:
        x = aten._to_copy.default(x, dtype=dtype)
    if x.dtype not in (torch.float32, torch.float64) or x.dim() == 0 or not all(type(s) is int for s in x.shape):
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0 or x.numel() * n > _LIMIT:
        return NotImplemented
    wide = aten._to_copy.default(x, dtype=torch.float64) if x.dtype == torch.float32 else x  # eager's acc_type
    rows = aten.unsqueeze.default(aten.movedim.int(wide, dim, -1), -2)  # [..., 1, n]
    above = aten.triu.default(aten.ones.default([n, n], dtype=torch.bool, device=x.device), 1)
    masked = aten.masked_fill.Scalar(aten.expand.default(rows, [*rows.shape[:-2], n, n]), above, 1.0)
    result = aten.movedim.int(aten.prod.dim_int(masked, -1), -1, dim)
    return aten._to_copy.default(result, dtype=x.dtype) if x.dtype == torch.float32 else result


def decomposition() -> dict:
    """The lowering's decomposition-table entry (NOTE [cumprod as a masked product])."""
    return {aten.cumprod.default: cumprod}
