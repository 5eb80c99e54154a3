"""The table of single-op and pattern cases for the triton backend's differential tests.

Each case is `Case(id, fn, inputs, options, allow_fallbacks)`; `inputs` lists, per argument, either a
shape (float32 randn) or a function `seed -> tensor`. Sizes are odd on purpose (masks), tiny (the
interpreter runs them), and cover non-contiguous, broadcast, 0-dim, empty, float16 and bfloat16 inputs.
test_triton_ops.py runs each one; test_triton_sm90.py compiles their kernels for sm_90.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

from tests.backends.triton_util import randint, randn


@dataclasses.dataclass
class Case:
    id: str
    fn: Callable
    inputs: list
    options: dict | None = None
    allow_fallbacks: bool = False

    def make_inputs(self, seed: int) -> tuple:
        return tuple(spec(seed) if callable(spec) else randn(*spec, seed=seed + 17 * k)
                     for k, spec in enumerate(self.inputs))


def half(*shape):
    return lambda seed: randn(*shape, dtype=torch.float16, seed=seed)


def bf16(*shape):
    return lambda seed: randn(*shape, dtype=torch.bfloat16, seed=seed)


def ints(*shape, low=-20, high=20, dtype=torch.int64):
    return lambda seed: randint(low, high, *shape, dtype=dtype, seed=seed)


def nonzero_ints(*shape, dtype=torch.int64):
    return lambda seed: torch.where(randint(-9, 9, *shape, dtype=dtype, seed=seed + 5) == 0, 3,
                                    randint(-9, 9, *shape, dtype=dtype, seed=seed + 5)).to(dtype)


def bools(*shape):
    return lambda seed: randn(*shape, seed=seed + 3) > 0


def transposed(*shape):  # a non-contiguous input
    return lambda seed: randn(*reversed(shape), seed=seed).t() if len(shape) == 2 else \
        randn(*shape[::-1], seed=seed).permute(*range(len(shape) - 1, -1, -1))


def with_specials(*shape):
    def make(seed):
        x = randn(*shape, seed=seed)
        x.view(-1)[::5] = float("nan")
        x.view(-1)[1::7] = float("inf")
        x.view(-1)[2::11] = -float("inf")
        return x
    return make


S = (3, 5, 7)
V = (37,)
M = (5, 7)

CASES = [
    # -- unary pointwise -------------------------------------------------------------------------
    Case("neg", lambda x: -x, [S]),
    Case("abs", torch.abs, [S]),
    Case("exp", torch.exp, [S]),
    Case("exp2", torch.exp2, [V]),
    Case("log", lambda x: torch.log(x.abs() + 0.1), [S]),
    Case("log2", lambda x: torch.log2(x.abs() + 0.1), [V]),
    Case("log10", lambda x: torch.log10(x.abs() + 0.1), [V]),
    Case("sqrt", lambda x: torch.sqrt(x.abs()), [S]),
    Case("rsqrt", lambda x: torch.rsqrt(x.abs() + 0.1), [S]),
    Case("sin_cos", lambda x: torch.sin(x) + torch.cos(x), [S]),
    Case("tanh", torch.tanh, [S]),
    Case("sigmoid", torch.sigmoid, [S]),
    Case("erf", torch.erf, [S]),
    Case("floor_ceil_trunc", lambda x: torch.floor(3 * x) + torch.ceil(3 * x) * 10 + torch.trunc(3 * x) * 100, [S]),
    Case("reciprocal", lambda x: torch.reciprocal(x + 4), [V]),
    Case("sign", torch.sign, [S]),
    Case("relu", torch.relu, [S]),
    Case("log1p_expm1", lambda x: torch.log1p(x.abs() * 1e-3) + torch.expm1(x * 1e-3), [V]),
    Case("gelu", F.gelu, [S]),
    Case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [S]),
    Case("silu", F.silu, [S]),
    Case("hardswish", F.hardswish, [S]),
    Case("leaky_relu", lambda x: F.leaky_relu(x, 0.1), [S]),
    Case("elu", F.elu, [S]),
    Case("softplus", F.softplus, [S]),
    Case("hardtanh", F.hardtanh, [S]),
    Case("clamp", lambda x: torch.clamp(x, -0.5, 0.7), [S]),
    Case("clamp_min", lambda x: x.clamp_min(0.1), [S]),
    Case("pow_int", lambda x: x ** 2 + x ** 3 - x ** 5, [S]),
    Case("pow_neg", lambda x: (x.abs() + 1) ** -2, [S]),
    Case("pow_frac", lambda x: (x.abs() + 0.01) ** 1.7 + x.abs() ** 0.5, [S]),
    Case("pow_big_int", lambda x: x ** 9 - (x + 0.5) ** -11 + x.double() ** 10, [S]),  # negative bases
    Case("nan_inf_unary", lambda x: torch.exp(x) + torch.relu(x) + torch.abs(x), [with_specials(41)]),
    # -- binary pointwise and broadcasting -------------------------------------------------------
    Case("add_broadcast", lambda x, y: x + y, [S, (7,)]),
    Case("add_broadcast_middle", lambda x, y: x + y, [S, (5, 1)]),
    Case("sub_alpha", lambda x, y: torch.sub(x, y, alpha=2.5), [S, S]),
    Case("mul_scalar", lambda x: x * 3 - 1.5, [S]),
    Case("div", lambda x, y: x / (y.abs() + 0.5), [S, S]),
    Case("div_floor", lambda x, y: torch.div(x, y.abs() + 0.5, rounding_mode="floor"), [S, S]),
    Case("div_trunc", lambda x, y: torch.div(x, y.abs() + 0.5, rounding_mode="trunc"), [S, S]),
    Case("remainder", lambda x, y: torch.remainder(x * 5, y + 3), [S, S]),
    Case("fmod", lambda x: torch.fmod(x * 5, 1.5), [S]),
    Case("maximum_minimum", lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), [S, (7,)]),
    Case("maximum_nan", lambda x, y: torch.maximum(x, y), [with_specials(41), (41,)]),
    Case("where", lambda x, y: torch.where(x > y, x, y * 2), [S, S]),
    Case("where_scalar", lambda x: torch.where(x > 0, x, 0.0), [S]),
    Case("masked_fill", lambda x, m: x.masked_fill(m, -1e9), [S, bools(5, 7)]),
    Case("compare", lambda x, y: torch.stack([x == y, x != y, x < y, x <= y, x > y, x >= y]).sum(0), [S, (7,)],
         allow_fallbacks=True),
    Case("compare_cast", lambda x, y: (x < y).float() + (x >= 0.5).to(torch.float32) * 2, [S, S]),
    Case("logical", lambda a, b: (a & ~b) | (a ^ b), [bools(5, 7), bools(5, 7)]),
    Case("logical_fns", lambda x, y: torch.logical_and(x > 0, y > 0) | torch.logical_not(x > y), [S, S]),
    Case("isnan_isinf", lambda x: torch.isnan(x).int() + 2 * torch.isinf(x).int(), [with_specials(41)]),
    Case("addcmul_lerp", lambda x, y, z: torch.addcmul(x, y, z, value=0.5) + torch.lerp(x, y, 0.3), [S, S, S]),
    # -- integers, booleans, casts --------------------------------------------------------------
    Case("int_arith", lambda a, b: a * 3 + b - 7, [ints(5, 7), ints(5, 7)]),
    Case("int_floor_div", lambda a, b: torch.div(a, b, rounding_mode="floor"), [ints(5, 7), nonzero_ints(5, 7)]),
    Case("int_trunc_div", lambda a, b: torch.div(a, b, rounding_mode="trunc"), [ints(5, 7), nonzero_ints(5, 7)]),
    Case("int_remainder", lambda a, b: torch.remainder(a, b), [ints(5, 7), nonzero_ints(5, 7)]),
    Case("int_true_div", lambda a, b: a / b, [ints(5, 7), nonzero_ints(5, 7)]),
    Case("int32_bitwise", lambda a, b: (a & b) | (a ^ 5), [ints(37, dtype=torch.int32), ints(37, dtype=torch.int32)]),
    Case("int_abs_neg", lambda a: torch.abs(a) - a.neg() * 2, [ints(5, 7, dtype=torch.int32)]),
    Case("float_to_int", lambda x: (x * 10).to(torch.int32) + 1, [S]),
    Case("int_to_float", lambda a: a.float() * 0.5, [ints(5, 7)]),
    Case("bool_to_float", lambda m, x: m.float() * x, [bools(5, 7), M]),
    Case("uint8_mix", lambda a, x: a.to(torch.float32) + x, [ints(5, 7, low=0, high=200, dtype=torch.uint8), M]),
    Case("full_like", lambda x: torch.zeros_like(x) + torch.ones_like(x) * 2 + torch.full_like(x, 3.5) * x, [S]),
    # -- views as index arithmetic --------------------------------------------------------------
    Case("permute_add", lambda x, y: x.permute(2, 0, 1) + y, [S, (7, 3, 5)]),
    Case("transposed_input", lambda x: x * 2 + 1, [transposed(5, 7)]),
    Case("transposed_3d_input", lambda x, y: x + y, [transposed(3, 5, 7), S]),
    Case("slice_step", lambda x: x[:, 1:6:2] * 2, [(5, 9)]),
    Case("slice_negative", lambda x: x[..., -3:] + x[..., :3], [S]),
    Case("select", lambda x: x[:, 2] - x[1], [(5, 5)]),
    Case("unsqueeze_expand", lambda x: x.unsqueeze(1).expand(5, 4, 7) * 2, [M]),
    Case("reshape_after_permute", lambda x: x.permute(1, 0, 2).reshape(5, 21) + 1, [S]),
    Case("view_flatten", lambda x: (x * 2).view(-1)[3:30] + 1, [S]),
    Case("squeeze", lambda x: x.squeeze(1) * 3, [(5, 1, 7)]),
    Case("chunk", lambda x: x.chunk(2, dim=1)[0] * x.chunk(2, dim=1)[1], [(5, 8)]),
    Case("unbind", lambda x: x.unbind(0)[0] + 2 * x.unbind(0)[2], [(3, 11)]),
    Case("transpose_output", lambda x: (x + 1).t(), [M]),
    Case("input_with_offset", lambda x: x * x, [lambda seed: randn(60, seed=seed)[7:44]]),
    Case("expanded_input", lambda x, y: x + y, [lambda seed: randn(1, 7, seed=seed).expand(5, 7), M]),
    Case("narrow_view_chain", lambda x: x.transpose(0, 1)[1:4].reshape(-1).unsqueeze(0) * 2, [(5, 6)]),
    # -- 0-dim and empty --------------------------------------------------------------------------
    Case("zero_dim", lambda x, y: x * y + 1, [(), ()]),
    Case("zero_dim_broadcast", lambda x, y: x + y, [(), S]),
    Case("empty_pointwise", lambda x: x * 2 + 1, [(0, 5)]),
    Case("empty_rows_reduction", lambda x: x.sum(1), [(0, 5)]),
    Case("sum_to_zero_dim", lambda x: x.sum(), [S]),
    # -- reductions --------------------------------------------------------------------------------
    Case("sum_dim", lambda x: x.sum(-1), [S]),
    Case("sum_multi_keepdim", lambda x: x.sum((0, 2), keepdim=True), [S]),
    Case("sum_dim0", lambda x: x.sum(0), [M]),
    Case("mean", lambda x: x.mean(1), [S]),
    Case("amax_amin", lambda x: x.amax(-1) - x.amin(-1), [S]),
    Case("max_dim", lambda x: x.max(1), [M]),
    Case("min_dim_keepdim", lambda x: x.min(0, keepdim=True), [M]),
    Case("argmax_argmin", lambda x: x.argmax(-1) * 10 + x.argmin(-1), [S]),
    Case("argmax_ties", lambda a: a.argmax(1), [ints(5, 9, low=0, high=3)]),
    Case("argmax_flat", lambda x: x.argmax(), [S]),
    Case("var_std", lambda x: x.var(-1) + x.std(0, unbiased=False).sum(), [M]),
    Case("var_mean", lambda x: torch.var_mean(x, 1, correction=0), [S]),
    Case("prod", lambda x: (x * 0.5 + 1).prod(1), [M]),
    Case("any_all", lambda x: (x > 1).any(1).int() + 2 * (x > -1).all(1).int(), [M]),
    Case("int_sum", lambda a: a.sum(1), [ints(5, 7)]),
    Case("bool_sum", lambda m: m.sum(), [bools(5, 7)]),
    Case("max_nan", lambda x: x.amax(0), [with_specials(6, 7)]),
    Case("softmax", lambda x: torch.softmax(x, -1), [S]),
    Case("softmax_dim0", lambda x: torch.softmax(x, 0), [M]),
    Case("log_softmax", lambda x: F.log_softmax(x, -1), [S]),
    Case("logsumexp", lambda x: torch.logsumexp(x, -1), [S]),
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, (7,), w, b), [S, (7,), (7,)]),
    Case("layer_norm_2d_no_affine", lambda x: F.layer_norm(x, (5, 7)), [S]),
    Case("rms_norm", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, [S, (7,)]),
    Case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 5), (4,), (4,)]),
    Case("mean_over_spatial", lambda x: x.mean((2, 3)), [(2, 3, 5, 5)]),
    # -- looped reductions --------------------------------------------------------------------------
    Case("looped_sum", lambda x: x.sum(-1), [(3, 100)], {"persistent_reduction_limit": 16}),
    Case("looped_softmax", lambda x: torch.softmax(x, -1), [(3, 100)], {"persistent_reduction_limit": 16}),
    Case("looped_layer_norm", lambda x: F.layer_norm(x, (100,)), [(3, 100)], {"persistent_reduction_limit": 32}),
    Case("looped_argmax_max", lambda x: x.max(1), [(4, 77)], {"persistent_reduction_limit": 16}),
    Case("looped_argmin_ints", lambda a: a.argmin(1), [ints(4, 70, low=0, high=4)], {"persistent_reduction_limit": 16}),
    Case("looped_var_dim0", lambda x: x.var(0), [(50, 3)], {"persistent_reduction_limit": 8}),
    Case("long_row_default_loop", lambda x: torch.softmax(x, -1), [(2, 3000)]),
    # -- float16 / bfloat16 ---------------------------------------------------------------------------
    Case("half_chain", lambda x, y: torch.sigmoid(x * y + 1) * 2 - x, [half(5, 7), half(5, 7)]),
    Case("half_softmax", lambda x: torch.softmax(x, -1), [half(3, 5, 7)]),
    Case("half_sum_mean", lambda x: x.sum(-1) + x.mean(-1), [half(5, 33)]),
    # on CPU these run eager's kernels (NOTE [Reduced-precision kernels kept whole on CPU]); lowered on GPUs
    Case("bf16_layer_norm", lambda x, w, b: F.layer_norm(x, (7,), w, b), [bf16(3, 5, 7), bf16(7), bf16(7)],
         allow_fallbacks=True),
    Case("bf16_gelu", F.gelu, [bf16(5, 7)], allow_fallbacks=True),
    Case("half_plus_float", lambda x, y: x + y, [half(5, 7), M]),
    Case("explicit_round_trip", lambda x: x.to(torch.float16).to(torch.float32) * 3, [M]),
    Case("half_argmax", lambda x: x.argmax(-1), [half(5, 7)]),
    # -- externs -------------------------------------------------------------------------------------
    Case("mm_relu", lambda x, w: torch.relu(x @ w), [M, (7, 3)]),
    Case("bmm_scale", lambda a, b: torch.bmm(a, b) * 0.5, [(2, 3, 5), (2, 5, 4)]),
    Case("linear_3d_gelu", lambda x, w, b: F.gelu(F.linear(x, w, b)), [S, (6, 7), (6,)]),
    Case("conv2d_relu", lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)), [(1, 2, 5, 5), (3, 2, 3, 3), (3,)]),
    Case("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2, [(1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4)]),
    Case("embedding", lambda i, w: F.embedding(i, w) * 2, [ints(3, 4, low=0, high=9), (9, 5)]),
    Case("fallback_cumsum", lambda x: torch.cumsum(x * 2, 1) + 1, [M], allow_fallbacks=True),
    Case("fallback_cat", lambda x, y: torch.cat([x * 2, y], 1).sum(1), [M, (5, 3)], allow_fallbacks=True),
    Case("fallback_sort", lambda x: torch.sort(x + 1, dim=1)[0] * 2, [M], allow_fallbacks=True),
]

assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
