"""Lowerings of reductions and of the composites built from them (mean, var/std, softmax,
log_softmax, layer norm), registered into lowering.LOWERINGS.

A reduction is one `ReductionNode` over `input_shape` with `reduced_dims`; anything around it
(the square in var, the exp in softmax, the normalization in layer norm) is a `PointwiseNode` that the
scheduler fuses before (prologue) or after (epilogue) it. Internal reductions of a composite run in
float32 for float16/bfloat16 inputs, and only the final value is rounded to the result dtype.
"""
from __future__ import annotations

import math

import torch

from . import ir
from .ir import Op, Scalar, cast
from .lowering import Lowerer, TensorRef, Unlowerable, compute_dtype, lowering
from .lowering_pointwise import lit, no_bool_kernel

aten = torch.ops.aten


def _reduced_cpu_kernel(node) -> None:
    """Raises Unlowerable for a bfloat16/float16 op on a CPU device whose eager kernel no lowering reproduces
    bit for bit (NOTE [Reduced-precision kernels kept whole on CPU] in backends/reduced_cpu.py)."""
    from ..reduced_cpu import REASON, reduced_on_cpu
    if reduced_on_cpu([arg.meta.get("val") for arg in node.all_input_nodes]):
        raise Unlowerable(REASON)


@lowering(aten.native_layer_norm_backward, aten.gelu, aten.gelu_backward)
def _kept_whole(lo, node, *args, **kwargs):
    """These reach the lowering only where their decompositions gave way (NOTE [Reduced-precision kernels kept
    whole on CPU]): an extern call of eager's kernel."""
    _reduced_cpu_kernel(node)
    raise Unlowerable("no lowering")


def _dims(dims, rank: int) -> tuple:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d + rank if d < 0 else d for d in dims})) if rank else ()


def _reduced_shape(shape, dims, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in dims)


def reduce(lo: Lowerer, x: TensorRef, dims, keepdim: bool, reduce_type: str, dtype: torch.dtype,
           compute: torch.dtype, origin: str, pre=None) -> TensorRef:
    """A ReductionNode of `pre(x)` (default: x) over `dims`, accumulated in `compute`."""
    dims = _dims(dims, len(x.shape))
    shape = x.shape
    rnumel = math.prod(shape[d] for d in dims)
    if rnumel == 0:
        raise Unlowerable("reduction over an empty dimension")
    coords = ir.loop_vars(shape)
    value = cast(lo.load(x, coords, shape), compute)
    body = pre(value) if pre else value
    node = ir.ReductionNode(lo.new_name(), _reduced_shape(shape, dims, keepdim), dtype, tuple(shape), dims,
                            reduce_type, body, origin)
    return lo.add(node)


def _out(node):
    return node.meta["val"]


@lowering(aten.sum.dim_IntList, aten.sum.default, aten.prod.dim_int, aten.prod.default)
def _sum(lo, node, x, dims=None, keepdim=False, dtype=None):
    out = _out(node)
    kind = "sum" if node.target.overloadpacket is aten.sum else "prod"
    return reduce(lo, x, dims, keepdim, kind, out.dtype, compute_dtype(out.dtype), str(node.target))


@lowering(aten.amax, aten.amin)
def _amax(lo, node, x, dims=(), keepdim=False):
    out = _out(node)
    kind = "max" if node.target.overloadpacket is aten.amax else "min"
    compute = torch.int32 if x.dtype == torch.bool else compute_dtype(x.dtype)
    return reduce(lo, x, dims, keepdim, kind, out.dtype, compute, str(node.target))


@lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def _any_all(lo, node, x, dims=None, keepdim=False):
    kind = "max" if node.target.overloadpacket is aten.any else "min"
    pre = lambda v: cast(Op("ne", (v, lit(0, v)), torch.bool), torch.int32)  # noqa: E731
    return reduce(lo, x, dims, keepdim, kind, torch.bool, compute_dtype(x.dtype), str(node.target), pre)


@lowering(aten.argmax, aten.argmin)
def _argmax(lo, node, x, dim=None, keepdim=False):
    no_bool_kernel(node.target, x)
    kind = "argmax" if node.target.overloadpacket is aten.argmax else "argmin"
    if dim is None:
        if keepdim and len(x.shape) > 0:
            raise Unlowerable("argmax over all dims with keepdim")
        dims = None
    else:
        dims = [dim]
    compute = torch.int32 if x.dtype == torch.bool else compute_dtype(x.dtype)
    return reduce(lo, x, dims, keepdim, kind, torch.int64, compute, str(node.target))


@lowering(aten.max.dim, aten.min.dim)
def _max_dim(lo, node, x, dim, keepdim=False):
    is_max = node.target.overloadpacket is aten.max
    compute = torch.int32 if x.dtype == torch.bool else compute_dtype(x.dtype)
    values = reduce(lo, x, [dim], keepdim, "max" if is_max else "min", x.dtype, compute, str(node.target))
    indices = reduce(lo, x, [dim], keepdim, "argmax" if is_max else "argmin", torch.int64, compute,
                     str(node.target))
    return (values, indices)


@lowering(aten.max.default, aten.min.default)
def _max_all(lo, node, x):
    kind = "max" if node.target.overloadpacket is aten.max else "min"
    if x.dtype.is_floating_point:  # eager's max() keeps the last of tied +-0.0 (NOTE [Eager's maximum on ties])
        kind += "_last"
    compute = torch.int32 if x.dtype == torch.bool else compute_dtype(x.dtype)
    return reduce(lo, x, None, False, kind, x.dtype, compute, str(node.target))


def mean(lo, x: TensorRef, dims, keepdim: bool, dtype: torch.dtype, origin: str) -> TensorRef:
    compute = compute_dtype(dtype)
    total = reduce(lo, x, dims, keepdim, "sum", compute, compute, origin)
    count = math.prod(x.shape[d] for d in _dims(dims, len(x.shape)))
    return lo.pointwise([total, float(count)], total.shape, dtype,
                        lambda s, n: Op("truediv", (s, n), compute), compute, origin)


@lowering(aten.mean.dim, aten.mean.default)
def _mean(lo, node, x, dims=None, keepdim=False, dtype=None):
    out = _out(node)
    if not out.dtype.is_floating_point:
        raise Unlowerable("integer mean")
    return mean(lo, x, dims, keepdim, out.dtype, str(node.target))


def variance(lo, x: TensorRef, dims, keepdim: bool, correction: float, dtype: torch.dtype, origin: str):
    """(var, mean) with the two-pass formula: mean first, then the mean of squared deviations."""
    compute = compute_dtype(dtype)
    mu = mean(lo, x, dims, True, compute, origin)
    sq = lo.pointwise([x, mu], x.shape, compute, lambda a, m: _square(Op("sub", (a, m), compute)), compute, origin)
    total = reduce(lo, sq, dims, keepdim, "sum", compute, compute, origin)
    count = math.prod(x.shape[d] for d in _dims(dims, len(x.shape)))
    divisor = max(count - correction, 0)
    var = lo.pointwise([total], total.shape, dtype, lambda s: Op("truediv", (s, Scalar(float(divisor), compute)), compute),
                       compute, origin)
    return var, mu


def _square(v):
    return Op("mul", (v, v), v.dtype)


def _correction(correction, unbiased=None) -> float:
    if correction is None:
        return 1.0 if unbiased in (None, True) else 0.0
    return float(correction)


@lowering(aten.var.correction, aten.std.correction, aten.var_mean.correction, aten.std_mean.correction)
def _var(lo, node, x, dims=None, *, correction=None, keepdim=False):
    packet = node.target.overloadpacket
    out = _out(node)
    out_dtype = (out[0] if isinstance(out, (tuple, list)) else out).dtype
    if not out_dtype.is_floating_point:
        raise Unlowerable("integer variance")
    var, mu = variance(lo, x, dims, keepdim, _correction(correction), out_dtype, str(node.target))
    if packet in (aten.std, aten.std_mean):
        var = lo.pointwise([var], var.shape, out_dtype, lambda v: Op("sqrt", (v,), v.dtype), compute_dtype(out_dtype),
                           str(node.target))
    if packet in (aten.var, aten.std):
        return var
    reduced = _dims(dims, len(x.shape))
    shape = _reduced_shape(x.shape, reduced, keepdim)
    if not keepdim:  # mu was computed with keepdim: read it through a squeezing view

        def unsqueeze(c):
            it = iter(c)
            return [ir.Const(0) if d in reduced else next(it) for d in range(len(x.shape))]

        mu = mu.view(shape, unsqueeze, aten.squeeze.dims, (list(reduced),))
    if mu.dtype != out_dtype:
        mu = lo.pointwise([mu], shape, out_dtype, lambda m: m, compute_dtype(out_dtype), str(node.target))
    return var, mu


@lowering(aten._softmax, aten._log_softmax)
def _softmax(lo, node, x, dim, half_to_float):
    out = _out(node)
    compute = compute_dtype(out.dtype)
    is_log = node.target.overloadpacket is aten._log_softmax
    origin = str(node.target)
    peak = reduce(lo, x, [dim], True, "max", compute, compute, origin)
    shifted_exp = lo.pointwise([x, peak], x.shape, compute, lambda a, m: Op("exp", (Op("sub", (a, m), compute),), compute),
                               compute, origin)
    total = reduce(lo, shifted_exp, [dim], True, "sum", compute, compute, origin)
    if is_log:
        return lo.pointwise([x, peak, total], x.shape, out.dtype,
                            lambda a, m, s: Op("sub", (Op("sub", (a, m), compute), Op("log", (s,), compute)), compute),
                            compute, origin)
    return lo.pointwise([shifted_exp, total], x.shape, out.dtype, lambda e, s: Op("truediv", (e, s), compute),
                        compute, origin)


@lowering(aten.native_layer_norm)
def _layer_norm(lo, node, x, normalized_shape, weight, bias, eps):
    _reduced_cpu_kernel(node)
    out = _out(node)[0]
    compute = compute_dtype(out.dtype)
    dims = list(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    origin = str(node.target)
    var, mu = variance(lo, x, dims, True, 0.0, compute, origin)
    rstd = lo.pointwise([var], var.shape, compute, lambda v: Op("rsqrt", (Op("add", (v, Scalar(float(eps), compute)), compute),), compute),
                        compute, origin)

    def normalize(a, m, r, *affine):
        y = Op("mul", (Op("sub", (a, m), compute), r), compute)
        if weight is not None:
            y = Op("mul", (y, affine[0]), compute)
        if bias is not None:
            y = Op("add", (y, affine[-1]), compute)
        return y

    affine = [t for t in (weight, bias) if t is not None]
    result = lo.pointwise([x, mu, rstd, *affine], x.shape, out.dtype, normalize, compute, origin)
    return (result, mu, rstd)


@lowering(aten.native_group_norm)
def _group_norm(lo, node, x, weight, bias, n, channels, hxw, groups, eps):
    """Statistics over (channels // groups) * spatial elements per group, read back per channel."""
    out = _out(node)[0]
    compute = compute_dtype(out.dtype)
    origin = str(node.target)
    grouped = (n, groups, (channels // groups) * hxw)
    # views that only kernels read (never replayed on real tensors): no aten op to record
    xg = x.view(grouped, lambda c: ir.delinearize(ir.linearize(c, grouped), x.shape), None, ())
    var, mu = variance(lo, xg, [2], True, 0.0, compute, origin)
    rstd = lo.pointwise([var], var.shape, compute, lambda v: Op("rsqrt", (Op("add", (v, Scalar(float(eps), compute)), compute),), compute),
                        compute, origin)
    spatial = (1,) * (len(x.shape) - 2)
    per_group = channels // groups

    def per_channel(ref):
        return ref.view((n, channels) + spatial, lambda c: [c[0], ir.floordiv(c[1], per_group), ir.Const(0)], None, ())

    def per_channel_param(ref):
        return ref.view((channels,) + spatial, lambda c: [c[0]], None, ())

    affine = [per_channel_param(t) for t in (weight, bias) if t is not None]

    def normalize(a, m, r, *params):
        y = Op("mul", (Op("sub", (a, m), compute), r), compute)
        if weight is not None:
            y = Op("mul", (y, params[0]), compute)
        if bias is not None:
            y = Op("add", (y, params[-1]), compute)
        return y

    result = lo.pointwise([x, per_channel(mu), per_channel(rstd), *affine], x.shape, out.dtype, normalize, compute, origin)
    # mean and rstd are outputs (saved for the backward in training): views replayed on real tensors
    def flat(ref):
        return ref.view((n, groups), lambda c: [c[0], c[1], ir.Const(0)], aten.reshape.default, ([n, groups],))

    return (result, flat(mu), flat(rstd))


@lowering(aten._native_batch_norm_legit_no_training, aten.native_batch_norm)
def _batch_norm_eval(lo, node, x, weight, bias, running_mean, running_var, *rest):
    """Inference batch norm: one pointwise node with per-channel statistics (dim 1)."""
    if node.target.overloadpacket is aten.native_batch_norm:
        training, eps = rest[0], rest[2]
        if training:
            raise Unlowerable("batch norm in training mode")
    else:
        eps = rest[1]
    if running_mean is None or running_var is None:
        raise Unlowerable("batch norm without running statistics")
    out = _out(node)
    compute = compute_dtype(out[0].dtype)
    spatial = (1,) * (len(x.shape) - 2)

    def per_channel(ref):
        return ref.view((ref.shape[0],) + spatial, lambda c: [c[0]], None, ())

    params = [per_channel(t) for t in (running_mean, running_var, weight, bias) if t is not None]

    def normalize(a, mean, var, *affine):
        y = Op("mul", (Op("sub", (a, mean), compute),
                       Op("rsqrt", (Op("add", (var, Scalar(float(eps), compute)), compute),), compute)), compute)
        if weight is not None:
            y = Op("mul", (y, affine[0]), compute)
        if bias is not None:
            y = Op("add", (y, affine[-1]), compute)
        return y

    result = lo.pointwise([x, *params], x.shape, out[0].dtype, normalize, compute, str(node.target))
    extras = [lo.pointwise([], tuple(v.shape), v.dtype, lambda v=v: Scalar(0, v.dtype), v.dtype, "empty")
              for v in out[1:]]
    return (result, *extras)
