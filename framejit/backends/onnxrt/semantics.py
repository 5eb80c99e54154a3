"""Rewrites of the lowered aten graph where ONNX Runtime's operators differ from eager torch.

`match_eager(gm) -> int` rewrites the flat aten graph that lowering.py made (in place, before
partitioning) and returns how many nodes it rewrote. Every node it adds carries `meta["val"]`, computed
by running the op on the fake values of its inputs under the graph's own fake mode, so the partitioner
and the translator see a graph like any other lowered one.

NOTE [Eager semantics in ONNX]
ORT's ReduceMax/ReduceMin/ArgMax/ArgMin skip NaN (measured: `x.max()` of `[1, nan, 3]` gave 3, eager
gives nan; `argmax` gave the index of 3, eager the index of the NaN), `Sign(nan)` is NaN where eager
gives 0, a cumulative sum may start a row with -0.0 where eager's starts from +0.0, and torchlib writes
`aten.copy(dst, src)` as src itself (a broadcasting `src` came back in its own shape). Each is rewritten
into ops whose ONNX meaning is eager's:
- `amax/amin/max/min` (float):  where(any(isnan(x), dims), nan, r); max()/min() reduce flip(x) (eager keeps
  the last of tied +-0.0 there, the first in amax/amin)
- `argmax/argmin`, and the indices of `max.dim/min.dim` (float): where(any(isnan(x)), argmax(isnan(x)), r)
  (torch returns the first NaN's index; ArgMax returns the first maximum's index)
- `sign` (float): where(isnan(x), 0, r);  `cumsum`, `sum`, `mean` (float): where(r == 0, +0.0, r) (-0.0 into
  +0.0 only: ORT's ReduceSum/ReduceMean of -0.0s gave -0.0, eager's sums start from +0.0)
- `clamp_min`, `clamp_max`, `clamp` with one bound: where(x < lo, lo, x) / where(x > hi, hi, x) (ORT's
  Clip without an upper bound turned inf into the largest float; the comparison keeps NaN and -0.0)
- `copy(dst, src)`: clone(expand(src cast to dst's dtype, dst's shape))
- `max_pool2d/3d_with_indices` values (float): where(max_pool(isnan(x) as float) > 0, nan, r) (MaxPool
  skips NaN); a pool whose indices are used runs in torch (eager's index in a window holding NaN is its
  last NaN's)
Ops whose translation is wrong on special values in ways not worth rewriting (atan2, floor_divide,
remainder and rounding division of floats, signbit, xlogy of a scalar, heaviside), imprecise (expm1; log1p but
of float32/float64, which is rewritten: NOTE [log1p without cancellation]), inexact
on int64 (sum, prod, cumprod) or ordering ties otherwise than eager (topk) run in eager torch
(translate.unsupported_reason).
The sign of zero (soundness finding #10): every float `where` (and masked_fill with a -0.0 or tensor
value) becomes an exact select (NOTE [Where keeps -0.0]); `trunc` is `x > 0 ? floor(x) : ceil(x)` and
`frac` x - that (torchlib's Floor(Abs(x)) * Sign(x) gave +0.0 for -0.0); `x ** 0.5` / `x ** -0.5` are
sqrt / rsqrt as in eager; `maximum/minimum` and tensor-bound clamps keep the first argument on ties as
eager's scalar loop does (ORT's Max/Min gave the other zero); two-bound clamps with a zero bound, and
scalar clamps with a NaN bound (NaN everywhere in eager) are rewritten like the one-sided ones; `celu` is
elu with input_scale (ORT's Celu gave +0.0 for -0.0); avg_pool reads its input with -0.0 turned into +0.0
(eager's window sums start from +0.0); `logit(x, eps)` clamps with Clip (torchlib's clamp lost NaN);
float `xlogy(x, y)` is where(isnan(y), nan, where(x == 0, 0, x * log(y))) as eager's kernel; `max.dim` and
`min.dim` of bools reduce uint8 (torchlib's ArgMax of bools is an invalid ONNX graph).
translate.py also keeps -0.0 and 0.0 apart in the exporter's constant farm.
Reductions over empty tensors (mean or var of nothing is NaN in eager, 0 in ORT) are not rewritten:
nodes that touch an empty tensor run in eager torch (translate.unsupported_reason).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import float64_math

aten = torch.ops.aten

_NAN_VALUE_REDUCTIONS = {aten.amax.default, aten.amin.default, aten.max.default, aten.min.default}
_NAN_INDEX_REDUCTIONS = {aten.argmax.default, aten.argmin.default}
_NAN_PAIR_REDUCTIONS = {aten.max.dim, aten.min.dim}


# NOTE [Where keeps -0.0]
# ORT's Where (CPU) computes `X_sel = cond ? X : 0`, `Y_sel = cond ? 0 : Y` and merges them with
# `X_sel != 0 ? X_sel : Y_sel`: a -0.0 selected from X comes out as +0.0 (a -0.0 from Y is kept, NaN and
# infinities are kept). So a float `where` keeps eager's meaning as it is only when its X is a constant
# other than -0.0 (NaN, 0.0, -inf: `where(has_nan, nan, r)`, masked_fill(mask, -inf)); with a Y constant
# the condition is negated and the two swapped; otherwise it becomes
#     neg(where(!cond, 0, neg(x))) - where(cond, 0, neg(y))
# (the first term is `cond ? x : -0.0`, the second `cond ? +0.0 : -y`; every Where there has a constant
# +0.0 as X), which is exact for every value: x - (+0.0) is x, and -0.0 - (-y) is y, -0.0 included.
# Nodes marked `_KEEPS_SIGN` are known exact and left alone by the final pass over where nodes.
_KEEPS_SIGN = "_framejit_keeps_sign"


def _constant_number(arg: Any) -> float | None:
    """The value of a scalar constant made in the graph (full, scalar_tensor), else None."""
    if isinstance(arg, torch.fx.Node) and arg.op == "call_function":
        if arg.target is aten.full.default and isinstance(arg.args[1], (int, float)):
            return float(arg.args[1])
        if arg.target is aten.scalar_tensor.default and isinstance(arg.args[0], (int, float)):
            return float(arg.args[0])
    return None


def _safe_first_value(arg: Any) -> bool:
    """`arg` may be Where's X: a constant that is not -0.0 (NOTE [Where keeps -0.0])."""
    value = _constant_number(arg)
    return value is not None and not (value == 0 and math.copysign(1.0, value) < 0)


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _is_float_tensor_node(arg: Any) -> bool:
    val = _val(arg)
    return isinstance(val, torch.Tensor) and val.is_floating_point()


class _Builder:
    """Adds call_function nodes after `anchor`, in order, each with its fake `meta["val"]`."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, fake_mode) -> None:
        self.graph, self.last, self.fake_mode = graph, anchor, fake_mode
        self.made: set[torch.fx.Node] = set()

    def __call__(self, op: Callable, *args: Any, **kwargs: Any) -> torch.fx.Node:
        with self.graph.inserting_after(self.last):
            node = self.graph.call_function(op, args, kwargs)
        self.last = node
        self.made.add(node)
        fake_args, fake_kwargs = pytree.tree_map(_val, (args, kwargs))
        with self.fake_mode:
            node.meta["val"] = op(*fake_args, **fake_kwargs)
        return node

    def nan_like(self, x: torch.fx.Node, value: float = float("nan")) -> torch.fx.Node:
        val = _val(x)
        return self(aten.full.default, [], value, dtype=val.dtype, device=val.device, pin_memory=False)

    def has_nan(self, x: torch.fx.Node, dims, keepdim: bool) -> torch.fx.Node:
        """any(isnan(x)) over `dims` (None or []: every dimension)."""
        isnan = self(aten.isnan.default, x)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return self(aten.any.default, isnan)
        if isinstance(dims, int):
            return self(aten.any.dim, isnan, dims, keepdim)
        return self(aten.any.dims, isnan, list(dims), keepdim)

    def first_nan_index(self, x: torch.fx.Node, dim, keepdim: bool) -> torch.fx.Node:
        isnan = self(aten.isnan.default, x)
        as_float = self(aten._to_copy.default, isnan, dtype=_val(x).dtype)
        return self(aten.argmax.default, as_float, dim, keepdim)

    def where(self, cond: torch.fx.Node, x: Any, y: Any) -> torch.fx.Node:
        """cond ? x : y for a float result, with the sign of a selected -0.0 kept (NOTE [Where keeps -0.0]).
        `x` and `y` are nodes or Python floats."""
        dtype = torch.result_type(*[_val(a) if isinstance(a, torch.fx.Node) else a for a in (x, y)])
        device = _val(cond).device
        x, y = (self._as_tensor(a, dtype, device) for a in (x, y))
        if _safe_first_value(x):
            return self._exact(aten.where.self, cond, x, y)
        if _safe_first_value(y):
            return self._exact(aten.where.self, self.negate(cond), y, x)
        zero = self.nan_like(x, 0.0)
        x_or_minus_zero = self(aten.neg.default, self._exact(
            aten.where.self, self.negate(cond), zero, self(aten.neg.default, x)))
        zero_or_minus_y = self._exact(aten.where.self, cond, zero, self(aten.neg.default, y))
        return self(aten.sub.Tensor, x_or_minus_zero, zero_or_minus_y)

    def plus_zero(self, x: torch.fx.Node) -> torch.fx.Node:
        """x with -0.0 turned into +0.0, as `x == 0 ? +0.0 : x` (ORT's optimizer removes `x + 0.0`)."""
        return self(aten.where.self, self(aten.eq.Scalar, x, 0), self.nan_like(x, 0.0), x)

    def negate(self, cond: torch.fx.Node) -> torch.fx.Node:
        """not cond, as Xor(cond, true): ORT's NotWhereFusion swaps the values of a Where fed by Not,
        which would move a tensor back into X (measured: where(x > 0, y, x) lost -0.0 again)."""
        true = self(aten.full.default, [], True, dtype=torch.bool, device=_val(cond).device, pin_memory=False)
        return self(aten.logical_xor.default, cond, true)

    def _as_tensor(self, value: Any, dtype: torch.dtype, device: torch.device) -> torch.fx.Node:
        if not isinstance(value, torch.fx.Node):
            return self(aten.full.default, [], float(value), dtype=dtype, device=device, pin_memory=False)
        if _val(value).dtype != dtype:
            return self(aten._to_copy.default, value, dtype=dtype)
        return value

    def _exact(self, op: Callable, *args: Any) -> torch.fx.Node:
        node = self(op, *args)
        node.meta[_KEEPS_SIGN] = True
        return node

    def eager_max(self, a: Any, b: Any, larger: bool) -> torch.fx.Node:
        """Eager's maximum(a, b) (`larger`) or minimum(a, b): NaN if either is NaN, else the other value
        only where it is strictly larger (smaller), so `a` wins ties (maximum(-0.0, 0.0) is -0.0)."""
        b_ref = b if isinstance(b, torch.fx.Node) else self._as_tensor(b, _val(a).dtype, _val(a).device)
        beats = self(aten.gt.Tensor if larger else aten.lt.Tensor, b_ref, a)
        takes_b = self(aten.logical_or.default, beats, self(aten.isnan.default, b_ref))
        return self.where(takes_b, b_ref, a)


def _replace_uses(node: torch.fx.Node, new: torch.fx.Node, keep: set) -> None:
    for user in list(node.users):
        if user is not new and user not in keep:
            user.replace_input_with(node, new)


def _args(node: torch.fx.Node, names: tuple[str, ...], defaults: tuple) -> list:
    """The node's arguments by position or keyword, with defaults."""
    values = list(node.args) + [None] * (len(names) - len(node.args))
    for k, name in enumerate(names):
        if k >= len(node.args):
            values[k] = node.kwargs.get(name, defaults[k])
    return values


def _rewrite_value_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dims, keepdim = _args(node, ("self", "dim", "keepdim"), (None, [], False))
    if node.target in (aten.max.default, aten.min.default) and _val(x).dim() > 0:
        # eager's max()/min() of a whole tensor keep the last of tied +-0.0 (amax and ORT's ReduceMax the
        # first): reduce the tensor read backwards (NOTE [Eager's maximum on ties] in triton/codegen.py)
        b.last = node.prev
        node.replace_input_with(x, b(aten.flip.default, x, list(range(_val(x).dim()))))
        b.last = node
    has_nan = b.has_nan(x, dims, bool(keepdim))
    new = b(aten.where.self, has_nan, b.nan_like(x), node)
    _replace_uses(node, new, set())


def _rewrite_index_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dim, keepdim = _args(node, ("self", "dim", "keepdim"), (None, None, False))
    has_nan = b.has_nan(x, dim, bool(keepdim))
    new = b(aten.where.self, has_nan, b.first_nan_index(x, dim, bool(keepdim)), node)
    _replace_uses(node, new, set())


def _rewrite_pair_reduction(b: _Builder, node: torch.fx.Node) -> None:
    x, dim, keepdim = _args(node, ("self", "dim", "keepdim"), (None, None, False))
    items = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    b.last = max(items.values(), key=lambda n: _position(n), default=node)
    has_nan = b.has_nan(x, dim, bool(keepdim))
    if 0 in items:
        values = b(aten.where.self, has_nan, b.nan_like(items[0]), items[0])
        _replace_uses(items[0], values, set())
    if 1 in items:
        indices = b(aten.where.self, has_nan, b.first_nan_index(x, dim, bool(keepdim)), items[1])
        _replace_uses(items[1], indices, set())


def _rewrite_bool_reduction(b: _Builder, node: torch.fx.Node) -> bool:
    """max.dim/min.dim of bools over uint8 (torchlib's ArgMax/ArgMin of a bool tensor is an invalid ONNX graph:
    cumprod's backward takes max.dim of a mask); values come back as bools, indices as they are (ArgMax's
    first maximum is eager's index for ties)."""
    x = node.args[0]
    if not isinstance(x, torch.fx.Node) or not isinstance(_val(x), torch.Tensor) or _val(x).dtype != torch.bool:
        return False
    wide = b(aten._to_copy.default, x, dtype=torch.uint8)
    new = b(node.target, wide, *node.args[1:], **node.kwargs)
    for user in list(node.users):
        if user.target is operator.getitem:
            b.last = new
            item = b(operator.getitem, new, user.args[1])
            _replace_uses(user, b(aten._to_copy.default, item, dtype=torch.bool) if user.args[1] == 0 else item, set())
            if not user.users:
                node.graph.erase_node(user)  # then the bool op has no users left: match_eager erases it
    return True


def _rewrite_sign(b: _Builder, node: torch.fx.Node) -> None:
    x = node.args[0]
    new = b(aten.where.self, b(aten.isnan.default, x), b.nan_like(x, 0.0), node)
    _replace_uses(node, new, set())


def _rewrite_cumsum(b: _Builder, node: torch.fx.Node) -> None:
    _replace_uses(node, b.plus_zero(node), b.made)


def _rewrite_one_sided_clamp(b: _Builder, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if node.target is aten.clamp_min.default:
        low, high = _args(node, ("self", "min"), (None, None))[1], None
    elif node.target is aten.clamp_max.default:
        low, high = None, _args(node, ("self", "max"), (None, None))[1]
    else:
        _, low, high = _args(node, ("self", "min", "max"), (None, None, None))
    if isinstance(low, torch.fx.Node) or isinstance(high, torch.fx.Node):
        return False
    if any(bound is not None and math.isnan(bound) for bound in (low, high)):  # eager: NaN everywhere
        _replace_uses(node, b(aten.add.Tensor, x, b.nan_like(x)), set())
        return True
    if low is not None and high is not None and low != 0 and high != 0:
        return False  # Clip with both bounds matches eager, but for the sign of zero on ties with +-0.0
    value = x
    if low is not None:
        bound = b.nan_like(x, float(low))
        value = b(aten.where.self, b(aten.lt.Tensor, value, bound), bound, value)
    if high is not None:
        bound = b.nan_like(x, float(high))
        value = b(aten.where.self, b(aten.gt.Tensor, value, bound), bound, value)
    _replace_uses(node, value, set())
    return True


def _rewrite_where(b: _Builder, node: torch.fx.Node) -> bool:
    cond, x, y = node.args[:3]
    if node.meta.get(_KEEPS_SIGN) or _safe_first_value(x) or not _is_float_tensor_node(node):
        return False
    _replace_uses(node, b.where(cond, x, y), set())
    return True


def _rewrite_masked_fill(b: _Builder, node: torch.fx.Node) -> bool:
    x, mask, value = node.args[:3]
    # torchlib's masked_fill casts a number from float32 (NOTE [Constants in their own dtype] in translate.py)
    exact = isinstance(value, torch.fx.Node) or float(torch.tensor(value, dtype=torch.float32)) == value
    if exact and (_safe_first_value(value) or (not isinstance(value, torch.fx.Node) and not (
            value == 0 and math.copysign(1.0, value) < 0))):
        return False  # a constant other than -0.0 is an exact X for ORT's Where (torchlib's masked_fill)
    if isinstance(value, torch.fx.Node):
        value = b._as_tensor(value, _val(x).dtype, _val(x).device)
    _replace_uses(node, b.where(mask, value, x), set())
    return True


def _exact_trunc(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """trunc(x) as `x > 0 ? floor(x) : ceil(x)`: Floor of a positive x is never -0.0, and Ceil keeps -0.0
    (torchlib's Floor(Abs(x)) * Sign(x) gave +0.0 for -0.0)."""
    return b._exact(aten.where.self, b(aten.gt.Scalar, x, 0), b(aten.floor.default, x), b(aten.ceil.default, x))


def _rewrite_rounding(b: _Builder, node: torch.fx.Node) -> None:
    x = node.args[0]
    new = _exact_trunc(b, x)
    if node.target is aten.frac.default:
        new = b(aten.sub.Tensor, x, new)
    _replace_uses(node, new, set())


def _rewrite_root_power(b: _Builder, node: torch.fx.Node) -> bool:
    """Eager computes x ** 0.5 as sqrt(x) and x ** -0.5 as rsqrt(x) (sqrt(-0.0) is -0.0, sqrt(-inf) NaN);
    ONNX Pow is C's pow (pow(-0.0, 0.5) is +0.0, pow(-inf, 0.5) inf)."""
    exponent = node.args[1]
    if exponent not in (0.5, -0.5) or isinstance(exponent, bool):
        return False
    new = b(aten.sqrt.default if exponent == 0.5 else aten.rsqrt.default, node.args[0])
    _replace_uses(node, new, set())
    return True


def _rewrite_min_max(b: _Builder, node: torch.fx.Node) -> bool:
    """maximum/minimum and clamp with tensor bounds as eager's scalar loop computes them (`b` replaces `a`
    only where strictly larger/smaller or NaN): ORT's Max/Min returned the other zero on +-0.0 ties."""
    target = node.target
    if target in (aten.maximum.default, aten.minimum.default):
        if not isinstance(node.args[1], torch.fx.Node):
            return False
        new = b.eager_max(node.args[0], node.args[1], larger=target is aten.maximum.default)
    else:
        if target is aten.clamp_min.Tensor:
            low, high = node.args[1], None
        elif target is aten.clamp_max.Tensor:
            low, high = None, node.args[1]
        else:
            _, low, high = _args(node, ("self", "min", "max"), (None, None, None))
        new = node.args[0]
        for bound, larger in ((low, True), (high, False)):
            if bound is not None:
                new = b.eager_max(new, bound, larger)
        if new is node.args[0]:
            return False
    _replace_uses(node, new, set())
    return True


def _rewrite_celu(b: _Builder, node: torch.fx.Node) -> None:
    """celu(x, a) is elu(x, a, input_scale=1/a) in eager (celu(-0.0) is -0.0); ORT's Celu gave +0.0.
    torchlib writes elu as Elu(x * input_scale) * scale, which scales the positive side by input_scale too
    (eager: x * scale there): celu(x, 0.5) gave 2x for x > 0 (tools/nn_sweep.py). So the elu result is
    taken only where x <= 0 (or NaN), x itself where x > 0."""
    x, alpha = _args(node, ("self", "alpha"), (None, 1.0))
    negative_side = _elu_of(b, x, alpha, 1.0, 1.0 / alpha)  # NOTE [Float64 activations keep their numbers]
    if alpha == 1.0:
        _replace_uses(node, negative_side, set())
        return
    _replace_uses(node, b.where(b(aten.gt.Scalar, x, 0), x, negative_side), set())


# NOTE [Numbers read from tensors in ONNX]
# The single-tensor steps of Adam and AdamW (torch's default on CPU) write `param.addcdiv_(exp_avg, denom,
# value=-step_size)` with a tensor step_size: the value is `aten._local_scalar_dense(t)`, a number read from a
# tensor. torchlib's addcdiv takes `value` as a constant and failed to build with a tensor there, so every
# parameter's addcdiv ran in torch between ORT parts (logged only as 'failed to translate or load on an earlier
# attempt'). For float32 and float64 (eager computes in the tensors' own dtype, value cast to it), addcdiv and
# addcmul are rewritten in eager's order, self + (value * tensor1) / tensor2 (or * tensor2), with the 0-d
# tensor itself as the value.
def _rewrite_item_value(b: _Builder, node: torch.fx.Node) -> bool:
    x, t1, t2, value = _args(node, ("self", "tensor1", "tensor2", "value"), (None, None, None, 1))
    if not (isinstance(value, torch.fx.Node) and value.target is aten._local_scalar_dense.default) or \
            _val(node).dtype not in (torch.float32, torch.float64):
        return False
    scaled = b(aten.mul.Tensor, t1, value.args[0])
    combined = b(aten.div.Tensor if node.target is aten.addcdiv.default else aten.mul.Tensor, scaled, t2)
    _replace_uses(node, b(aten.add.Tensor, x, combined), set())
    return True


def _rewrite_avg_pool(b: _Builder, node: torch.fx.Node) -> None:
    """Eager's window sums start from +0.0 (a window of -0.0 averages to +0.0), ORT's from the first
    element: the input's -0.0 become +0.0 first."""
    x = node.args[0]
    b.last = node.prev  # the new nodes go before the pool, which reads them
    node.replace_input_with(x, b.plus_zero(x))


def _rewrite_xlogy(b: _Builder, node: torch.fx.Node) -> bool:
    """xlogy(x, y) = nan where y is NaN, else 0 where x == 0, else x * log(y), as eager's kernel (torchlib's
    gave 0 for xlogy(0, nan)). Float tensors of the result's dtype only; anything else runs in torch."""
    x, y = node.args[0], node.args[1]
    dtype = _val(node).dtype
    if not isinstance(y, torch.fx.Node) or not all(_is_float_tensor_node(a) and _val(a).dtype == dtype for a in (x, y)):
        return False
    product = b(aten.mul.Tensor, x, b(aten.log.default, y))
    inner = b.where(b(aten.eq.Scalar, x, 0), 0.0, product)
    _replace_uses(node, b.where(b(aten.isnan.default, y), float("nan"), inner), set())
    return True


# NOTE [log1p without cancellation]
# torchlib writes log1p(x) as log(1 + x), which loses every digit of a tiny x (log1p(1e-10) gave 0: soundness
# finding #9), so log1p ran in torch between ORT parts: F.logsigmoid (log_sigmoid_forward is min(x, 0) -
# log1p(exp(-|x|))) split every forward using it. For float32 and float64 it is written as Goldberg's
# u = 1 + x, d = u - 1, log1p(x) = x where d == 0, else log(u) * (x / d) (the rounding of 1 + x cancels out
# of the quotient), and x itself where x is +inf. Measured against eager's log1p over 5e5 values (magnitudes
# 1e-40 (1e-300 in float64) to 1e30 of both signs above -1, and -1, +-0.0, +-inf, NaN, -2): at most 2.3 ulp
# off in float32 (1.3% of values more than 1 ulp), 1.9 ulp in float64; special values and signs of zero as
# eager's (eager's own log1p(-1.4e-45) is +0.0, this gives the exact -1.4e-45). Other dtypes keep the op in
# torch (translate._IMPRECISE).
def _rewrite_log1p(b: _Builder, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if _val(x).dtype not in (torch.float32, torch.float64) or _val(node).dtype != _val(x).dtype:
        return False
    _replace_uses(node, _log1p_of(b, x), set())
    return True


def _log1p_of(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    u = b(aten.add.Tensor, x, 1.0)
    d = b(aten.sub.Tensor, u, 1.0)
    quotient = b(aten.mul.Tensor, b(aten.log.default, u), b(aten.div.Tensor, x, d))
    inner = b.where(b(aten.eq.Scalar, d, 0), x, quotient)
    return b.where(b(aten.eq.Scalar, x, float("inf")), x, inner)


# NOTE [expm1 without cancellation]
# torchlib writes expm1(x) as exp(x) - 1 (expm1(1e-10) gave 0: soundness finding #9), so expm1 ran in torch
# between ORT parts. For float32 and float64 it is written as Kahan's u = exp(x), d = u - 1, expm1(x) = x
# where u == 1, -1 where d == -1, else d * (x / log(u)) (the rounding of exp(x) cancels out of the quotient),
# and u itself where u is +inf (x large or +inf; the quotient would be inf * 0). NaN stays NaN, -inf gives -1.
# Other dtypes keep the op in torch (translate._IMPRECISE).
def _rewrite_expm1(b: _Builder, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if _val(x).dtype not in (torch.float32, torch.float64) or _val(node).dtype != _val(x).dtype:
        return False
    _replace_uses(node, _expm1_of(b, x), set())
    return True


def _expm1_of(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    u = b(aten.exp.default, x)
    d = b(aten.sub.Tensor, u, 1.0)
    quotient = b(aten.mul.Tensor, d, b(aten.div.Tensor, x, b(aten.log.default, u)))
    inner = b.where(b(aten.eq.Scalar, u, 1.0), x, b.where(b(aten.eq.Scalar, d, -1.0), -1.0, quotient))
    return b.where(b(aten.eq.Scalar, u, float("inf")), u, inner)


# NOTE [Float64 activations keep their numbers]
# torchlib gives ONNX's LeakyRelu, Elu, Selu, Celu, HardSigmoid their Scalar arguments as float attributes,
# and writes hardtanh's bounds and softplus's beta as float32 constants: in float64 graphs every such number
# was rounded to float32 (leaky_relu(x, 0.1) 1.5e-8 relative off eager, softplus 7e-7, hardsigmoid 1.6e-5
# near its zero). For float64 these ops are written as eager's CPU kernels compute them, the numbers kept as
# doubles: leaky_relu x > 0 ? x : x * slope; hardtanh the clamp; elu (celu, selu) x <= 0 ?
# expm1(x * input_scale) * (alpha * scale) : x * scale; softplus x * beta > threshold ? x :
# log1p(exp(x * beta)) / beta; hardsigmoid clamp(x + 3, 0, 6) / 6, hardswish x * that / 6 (float32's
# attributes are eager's own float32 rounding, so float32 keeps torchlib's ops).
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _clamp_of(b: _Builder, x: torch.fx.Node, low: float, high: float) -> torch.fx.Node:
    """min(max(x, low), high) as eager's clamp kernel: NaN stays NaN, x itself on ties."""
    low_t, high_t = b.nan_like(x, low), b.nan_like(x, high)
    value = b(aten.where.self, b(aten.lt.Tensor, x, low_t), low_t, x)
    return b(aten.where.self, b(aten.gt.Tensor, value, high_t), high_t, value)


def _elu_of(b: _Builder, x: torch.fx.Node, alpha: float, scale: float, input_scale: float) -> torch.fx.Node:
    if _val(x).dtype != torch.float64:
        return b(aten.elu.default, x, alpha, scale, input_scale)
    negative = b(aten.mul.Tensor, _expm1_of(b, b(aten.mul.Tensor, x, input_scale)), alpha * scale)
    return b(aten.where.self, b(aten.le.Scalar, x, 0), negative, b(aten.mul.Tensor, x, scale))


def _rewrite_float64_activation(b: _Builder, node: torch.fx.Node) -> bool:
    x, target = node.args[0], node.target
    numbers = [a for a in (*node.args[1:], *node.kwargs.values())]
    if _val(x).dtype != torch.float64 or _val(node).dtype != torch.float64 or \
            any(not isinstance(a, (int, float)) or isinstance(a, bool) for a in numbers):
        return False
    if target is aten.leaky_relu.default:
        slope = _args(node, ("self", "negative_slope"), (None, 0.01))[1]
        out = b(aten.where.self, b(aten.gt.Scalar, x, 0), x, b(aten.mul.Tensor, x, float(slope)))
    elif target is aten.hardtanh.default:
        out = _clamp_of(b, x, *map(float, _args(node, ("self", "min_val", "max_val"), (None, -1.0, 1.0))[1:]))
    elif target is aten.elu.default:
        out = _elu_of(b, x, *map(float, _args(node, ("self", "alpha", "scale", "input_scale"), (None, 1.0, 1.0, 1.0))[1:]))
    elif target is aten.selu.default:
        out = _elu_of(b, x, _SELU_ALPHA, _SELU_SCALE, 1.0)
    elif target is aten.softplus.default:
        beta, threshold = map(float, _args(node, ("self", "beta", "threshold"), (None, 1.0, 20.0))[1:])
        scaled = b(aten.mul.Tensor, x, beta)
        soft = b(aten.div.Tensor, _log1p_of(b, b(aten.exp.default, scaled)), beta)
        out = b(aten.where.self, b(aten.gt.Scalar, scaled, threshold), x, soft)
    else:  # hardsigmoid, hardswish
        gate = _clamp_of(b, b(aten.add.Tensor, x, 3.0), 0.0, 6.0)
        scaled = gate if target is aten.hardsigmoid.default else b(aten.mul.Tensor, x, gate)
        out = b(aten.div.Tensor, scaled, 6.0)
    _replace_uses(node, out, set())
    return True


_FLOAT64_ACTIVATIONS = {aten.leaky_relu.default, aten.hardtanh.default, aten.elu.default, aten.selu.default,
                        aten.softplus.default, aten.hardsigmoid.default, aten.hardswish.default}


def _rewrite_logit(b: _Builder, node: torch.fx.Node) -> bool:
    """logit(x, eps) = log(z / (1 - z)) with z = clamp(x, eps, 1 - eps) as eager (torchlib's version
    turned NaN into 1 - eps)."""
    x, eps = _args(node, ("self", "eps"), (None, None))
    if eps is None:
        return False
    clamped = b(aten.clamp.default, x, eps, 1.0 - eps)
    new = b(aten.log.default, b(aten.div.Tensor, clamped, b(aten.rsub.Scalar, clamped, 1.0)))
    _replace_uses(node, new, set())
    return True


def _rewrite_max_pool(b: _Builder, node: torch.fx.Node) -> bool:
    values = next((u for u in node.users if u.target is operator.getitem and u.args[1] == 0), None)
    if values is None:
        return False
    x = node.args[0]
    b.last = values
    mask = b(aten._to_copy.default, b(aten.isnan.default, x), dtype=_val(x).dtype)
    pooled = b(operator.getitem, b(node.target, mask, *node.args[1:], **node.kwargs), 0)
    new = b(aten.where.self, b(aten.gt.Scalar, pooled, 0), b.nan_like(x), values)
    _replace_uses(values, new, set())
    return True


# NOTE [Copies laid out as the op]
# The copy that replaces an op (`copy`: clone(expand(src)); a cat of one kept tensor: clone(x)) must have the
# op's strides, not its source's: later nodes (a `view`, in torch or in a pass that propagates fake values
# again, as the exporter's type promotion does) were traced on the op's layout. `clone` keeps its source's
# layout by default; transformers' bloom cats its keys onto DynamicCache's empty literal (contiguous) from a
# transposed (b, s, h, d) -> (b, h, s, d) tensor and views the result as (b * h, s, d): the plain clone kept
# the transposed layout, the view could not be computed and the whole graph ran eagerly. The clone takes
# the op's memory format (contiguous, channels_last or channels_last_3d) when the traced result statically
# has one; otherwise (a copy into a permuted destination) it keeps its source's layout as before.
def _memory_format_of(val: Any) -> torch.memory_format:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    if isinstance(val, torch.Tensor):
        for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
            try:
                if statically_known_true(val.is_contiguous(memory_format=fmt)):
                    return fmt
            except RuntimeError:  # channels_last of a tensor that is not 4-d
                continue
    return torch.preserve_format


def _rewrite_copy(b: _Builder, node: torch.fx.Node) -> bool:
    dst, src = node.args[0], node.args[1]
    dst_val, src_val = _val(dst), _val(src)
    if not isinstance(src_val, torch.Tensor) or (src_val.shape == dst_val.shape and src_val.dtype == dst_val.dtype):
        return False
    value = src
    if src_val.dtype != dst_val.dtype:
        value = b(aten._to_copy.default, value, dtype=dst_val.dtype)
    if src_val.shape != dst_val.shape:
        value = b(aten.expand.default, value, list(dst_val.shape))
    new = b(aten.clone.default, value, memory_format=_memory_format_of(_val(node)))  # NOTE [Copies laid out as the op]
    _replace_uses(node, new, set())
    return True


# NOTE [Cat skips empty vectors]
# Eager's cat skips 1-d inputs of size 0 whatever the other inputs' ranks (a legacy rule), and
# transformers' DynamicCache starts each layer's keys and values as `torch.tensor([])` that it
# concatenates onto: ONNX's Concat needs equal ranks, so those cats ran in eager torch and cut decoder
# graphs (gpt2, llama, qwen2) into several ORT parts. The skipped inputs are dropped here; the empty
# vectors still take part in type promotion, so the result is cast to the cat's dtype when it differs.
def _skipped_by_cat(arg: Any) -> bool:
    val = _val(arg)
    return isinstance(val, torch.Tensor) and val.dim() == 1 and isinstance(val.shape[0], int) and val.shape[0] == 0


def _rewrite_cat(b: _Builder, node: torch.fx.Node) -> bool:
    tensors, dim = _args(node, ("tensors", "dim"), (None, 0))
    kept = [t for t in tensors if not _skipped_by_cat(t)]
    if not kept or len(kept) == len(tensors):
        return False
    new = b(aten.cat.default, kept, dim) if len(kept) > 1 else \
        b(aten.clone.default, kept[0], memory_format=_memory_format_of(_val(node)))  # NOTE [Copies laid out as the op]
    if _val(new).dtype != _val(node).dtype:
        new = b(aten._to_copy.default, new, dtype=_val(node).dtype)
    _replace_uses(node, new, set())
    return True


# NOTE [Scalars of half-precision arithmetic]: eager's CPU kernels for float16/bfloat16 `mul` and `div`
# by a Python scalar keep the scalar in float32 (the op math type) and round only the result:
# `x.half() * 0.1` is round16(float(x) * 0.1f). torchlib casts the scalar to the tensor's dtype first, so
# ORT multiplied by round16(0.1) = 0.09998: one float16 step off on ~5% of elements (redteam3's
# add_in_half failed on about one run in seven). Measured on 4096 values, float16 and bfloat16 alike: mul
# and div match the float32-scalar form exactly (the dtype-rounded form differs on 20-50%); add, sub,
# rsub and add's alpha match the dtype-rounded form (the float32 one differs on 2-5%), which is what
# torchlib already does. So a mul or true div whose result is float16/bfloat16, by a float or int scalar
# that dtype cannot hold exactly, runs as eager does: its reduced tensors cast to float32, the op in float32,
# the result cast back (a product or quotient of two exact reduced values rounds once in float32 and
# again to the dtype, as eager's does).
_SCALAR_ARITH = {aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar}
_REDUCED = (torch.float16, torch.bfloat16)


def _inexact_in(value: Any, dtype: torch.dtype) -> bool:
    # ints too (red team 8): `x.half() / 70000` divided by round16(70000) = inf, 0 where eager gives 1.4e-05
    if type(value) not in (int, float) or (type(value) is float and math.isnan(value)):
        return False
    try:
        return float(torch.tensor(value, dtype=dtype)) != value
    except (OverflowError, RuntimeError):  # an int no float16 can hold
        return True


def _symbolic_scalar(arg: Any) -> bool:
    """A scalar known only at run time (a dynamic int or float input, a size): any value may come, so the op
    takes the float32 form, which matches eager for every scalar (NOTE above; red team 15: `x.half() * n`
    with a dynamic `n` of 70000 gave nan at 0 where eager gives 0)."""
    return isinstance(arg, torch.fx.Node) and isinstance(_val(arg), (int, float, torch.SymInt, torch.SymFloat))


def _rewrite_reduced_scalar(b: _Builder, node: torch.fx.Node) -> bool:
    out = _val(node)
    if not isinstance(out, torch.Tensor) or out.dtype not in _REDUCED or node.kwargs.get("rounding_mode"):
        return False
    scalars = [a for a in node.args if not isinstance(a, torch.fx.Node)] + list(node.kwargs.values())
    if not any(_inexact_in(v, out.dtype) for v in scalars) and not any(_symbolic_scalar(a) for a in node.args):
        return False
    args = [b(aten._to_copy.default, a, dtype=torch.float32)
            if isinstance(a, torch.fx.Node) and _val(a).dtype in _REDUCED else a for a in node.args]
    wide = b(node.target, *args, **node.kwargs)
    _replace_uses(node, b(aten._to_copy.default, wide, dtype=out.dtype), set())
    return True


# NOTE [Symbolic scalars of Scalar overloads]: `F.cross_entropy(x, t, label_smoothing=0.1)` with a dynamic class
# count multiplies by `0.1 / n`, a number known only at run time: `aten.mul.Scalar(t, truediv)` with `truediv` a
# scalar input of the ORT part. torchlib writes every `.Scalar` overload as `ir.tensor(other)` of a Python
# number, so the translation raised (float() of a SymbolicTensor) and the node ran in torch (eager_fallback). A
# float32 `add/sub/mul/div.Scalar` of such a number becomes the `.Tensor` overload with the number as a float32
# 0-dim tensor: the scalar input arrives rounded once from Python's double to float32, as eager's kernel rounds
# its wrapped scalar, so the values are eager's; other dtypes keep the node (float64 inputs of ORT parts are
# not guaranteed to carry the double).
_SYMBOLIC_SCALAR_OPS = {aten.mul.Scalar: aten.mul.Tensor, aten.div.Scalar: aten.div.Tensor,
                        aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor}


def _rewrite_symbolic_scalar(b: _Builder, node: torch.fx.Node) -> bool:
    out, self_val = _val(node), _val(node.args[0])
    if len(node.args) != 2 or node.kwargs or not _symbolic_scalar(node.args[1]) or not isinstance(
            out, torch.Tensor) or out.dtype != torch.float32 or self_val.dtype != torch.float32:
        return False
    scalar = b(aten.scalar_tensor.default, node.args[1], dtype=torch.float32, device=out.device)
    _replace_uses(node, b(_SYMBOLIC_SCALAR_OPS[node.target], node.args[0], scalar), set())
    return True


def _position(node: torch.fx.Node) -> int:
    return node.meta.setdefault("_semantics_order", 0)


def _fake_mode(gm: torch.fx.GraphModule):
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("val") for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    return detect_fake_mode(vals)


def _rewrite(b: _Builder, node: torch.fx.Node) -> bool:
    target = node.target
    if target is aten.copy.default:
        return _rewrite_copy(b, node)
    if target is aten.cat.default:
        return _rewrite_cat(b, node)  # NOTE [Cat skips empty vectors]
    if target in _NAN_PAIR_REDUCTIONS and _rewrite_bool_reduction(b, node):
        return True
    if not node.args or not _is_float_tensor_node(node.args[0]):
        return False
    if target in _SYMBOLIC_SCALAR_OPS and _rewrite_symbolic_scalar(b, node):
        return True  # NOTE [Symbolic scalars of Scalar overloads]
    if target in _SCALAR_ARITH:
        return _rewrite_reduced_scalar(b, node)  # NOTE [Scalars of half-precision arithmetic]
    if target in _NAN_VALUE_REDUCTIONS:
        _rewrite_value_reduction(b, node)
    elif target in _NAN_INDEX_REDUCTIONS:
        _rewrite_index_reduction(b, node)
    elif target in _NAN_PAIR_REDUCTIONS:
        _rewrite_pair_reduction(b, node)
    elif target is aten.sign.default:
        _rewrite_sign(b, node)
    elif target is aten.cumsum.default or target in _SUMS:
        _rewrite_cumsum(b, node)  # eager's sums start from +0.0: a sum or mean of -0.0s is +0.0
    elif target in (aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default):
        return _rewrite_max_pool(b, node)
    elif target in (aten.clamp_min.default, aten.clamp_max.default, aten.clamp.default):
        return _rewrite_one_sided_clamp(b, node)
    elif target in _MIN_MAX:
        return _rewrite_min_max(b, node)
    elif target in (aten.trunc.default, aten.frac.default):
        _rewrite_rounding(b, node)
    elif target is aten.pow.Tensor_Scalar:
        return _rewrite_root_power(b, node)
    elif target in (aten.masked_fill.Scalar, aten.masked_fill.Tensor):
        return _rewrite_masked_fill(b, node)
    elif target is aten.celu.default:
        _rewrite_celu(b, node)
    elif target in (aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default):
        _rewrite_avg_pool(b, node)
    elif target is aten.logit.default:
        return _rewrite_logit(b, node)
    elif target is aten.xlogy.Tensor:
        return _rewrite_xlogy(b, node)
    elif target is aten.log1p.default:
        return _rewrite_log1p(b, node)  # NOTE [log1p without cancellation]
    elif target is aten.expm1.default:
        return _rewrite_expm1(b, node)  # NOTE [expm1 without cancellation]
    elif target in _FLOAT64_ACTIVATIONS:
        return _rewrite_float64_activation(b, node)  # NOTE [Float64 activations keep their numbers]
    elif target in float64_math.TARGETS:  # NOTE [Float64 erf, gelu and hardtanh_backward]
        return float64_math.rewrite(b, node, lambda old, new: _replace_uses(old, new, set()))
    elif target in (aten.addcdiv.default, aten.addcmul.default):
        return _rewrite_item_value(b, node)  # NOTE [Numbers read from tensors in ONNX]
    else:
        return False
    return True


_SUMS = {aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim}
_MIN_MAX = {aten.maximum.default, aten.minimum.default, aten.clamp.Tensor, aten.clamp_min.Tensor,
            aten.clamp_max.Tensor}
_WHERE = {aten.where.self, torch.ops.prims.where.default}


def _erase_if_unused(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    if not node.users:
        inputs = node.all_input_nodes
        gm.graph.erase_node(node)
        for arg in inputs:  # a number only it read (NOTE [Numbers read from tensors in ONNX]): no sync left
            if arg.target is aten._local_scalar_dense.default and not arg.users:
                gm.graph.erase_node(arg)


def match_eager(gm: torch.fx.GraphModule) -> int:
    """Rewrite the nodes whose ONNX translation differs from eager (NOTE [Eager semantics in ONNX])."""
    fake_mode = _fake_mode(gm)
    if fake_mode is None:
        return 0
    for index, node in enumerate(gm.graph.nodes):
        node.meta["_semantics_order"] = index
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _rewrite(_Builder(gm.graph, node, fake_mode), node):
            rewritten += 1
            _erase_if_unused(gm, node)
    for node in list(gm.graph.nodes):  # last: every float where, the ones made above included
        if node.op == "call_function" and node.target in _WHERE and _rewrite_where(
                _Builder(gm.graph, node, fake_mode), node):
            rewritten += 1
            _erase_if_unused(gm, node)
    for node in gm.graph.nodes:
        node.meta.pop("_semantics_order", None)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten
