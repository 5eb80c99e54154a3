"""Lowerings of elementwise aten ops to PointwiseNodes (registered into lowering.LOWERINGS).

Each lowering computes in `compute_dtype(result dtype)` (float32 for float16/bfloat16 results, as eager
PyTorch does) and casts the result back, so every node rounds exactly once, like its eager op.
Functions that Triton's core language lacks (tanh, log1p, expm1, trunc, pow, remainder) are built
here from the primitives codegen knows (see codegen.OPS); the interpreter has no libdevice.
"""
from __future__ import annotations

import math

import torch

from .ir import Op, Scalar, _python_value, cast
from .lowering import TensorRef, Unlowerable, compute_dtype, lowering

aten = torch.ops.aten
prims = torch.ops.prims


def _meta(node):
    return node.meta["val"]


def _arg_meta(a):
    return a.meta["val"] if isinstance(a, torch.fx.Node) else a


def _promoted(node) -> torch.dtype:
    tensors = [_arg_meta(a) for a in node.args if isinstance(a, (torch.fx.Node, bool, int, float))]
    return torch.result_type(*tensors[:2]) if len(tensors) >= 2 else tensors[0].dtype


def _pointwise(lo, node, args, fn, compute=None):
    out = _meta(node)
    return lo.pointwise(args, out.shape, out.dtype, fn, compute or compute_dtype(out.dtype), str(node.target))


def binop(name: str):
    return lambda a, b: Op(name, (a, b), a.dtype)


# -- value builders used by several lowerings (and by lowering_reductions) --------------------------


def where(cond, a, b):
    return Op("where", (cast(cond, torch.bool), a, b), a.dtype)


def lit(value, like):
    return Scalar(_python_value(value, like.dtype), like.dtype)  # NOTE [Literals hold their dtype's value]


def tanh(x):
    t = Op("exp", (Op("mul", (lit(-2.0, x), Op("abs", (x,), x.dtype)), x.dtype),), x.dtype)
    y = Op("truediv", (Op("sub", (lit(1.0, x), t), x.dtype), Op("add", (lit(1.0, x), t), x.dtype)), x.dtype)
    signed = where(Op("lt", (x, lit(0.0, x)), torch.bool), Op("neg", (y,), x.dtype), y)
    return where(Op("eq", (x, lit(0.0, x)), torch.bool), x, signed)  # tanh(-0.0) is -0.0


def trunc(x):
    return where(Op("lt", (x, lit(0.0, x)), torch.bool), Op("ceil", (x,), x.dtype), Op("floor", (x,), x.dtype))


def log1p(x):
    # NOTE [Kahan's log1p/expm1]: log(u) * x / (u - 1) with u = 1 + x cancels the rounding error of
    # 1 + x, giving a few-ulp result from plain log/exp, which the interpreter also supports.
    u = Op("add", (lit(1.0, x), x), x.dtype)
    um1 = Op("sub", (u, lit(1.0, x)), x.dtype)
    # log(u) * (x / (u - 1)): the product first overflowed for x near the dtype's max (log1p(3e38): inf, eager 88.5)
    ratio = Op("mul", (Op("log", (u,), x.dtype), Op("truediv", (x, um1), x.dtype)), x.dtype)
    return where(Op("eq", (u, lit(1.0, x)), torch.bool), x, where(Op("eq", (u, lit(math.inf, x)), torch.bool), u, ratio))


def expm1(x):
    u = Op("exp", (x,), x.dtype)
    um1 = Op("sub", (u, lit(1.0, x)), x.dtype)
    ratio = Op("truediv", (Op("mul", (um1, x), x.dtype), Op("log", (u,), x.dtype)), x.dtype)
    big = Op("gt", (Op("abs", (x,), x.dtype), lit(40.0, x)), torch.bool)
    return where(Op("eq", (u, lit(1.0, x)), torch.bool), x, where(big, um1, ratio))


def power(x, exponent):
    """x ** exponent for a Python number exponent."""
    if float(exponent).is_integer() and abs(exponent) > 8 and x.dtype.is_floating_point:
        return _integer_power(x, exponent)  # NOTE [Integer powers of negative floats]
    if float(exponent).is_integer() and abs(exponent) <= 8:
        n = int(abs(exponent))
        result = lit(1.0 if x.dtype.is_floating_point else 1, x)
        base = x
        while n:  # square and multiply
            if n & 1:
                result = base if isinstance(result, Scalar) else Op("mul", (result, base), x.dtype)
            n >>= 1
            if n:
                base = Op("mul", (base, base), x.dtype)
        if exponent < 0:
            if not x.dtype.is_floating_point:
                raise Unlowerable("negative integer power of an integer tensor")
            result = Op("truediv", (lit(1.0, x), result), x.dtype)
        return result
    if not x.dtype.is_floating_point:
        raise Unlowerable("fractional power of an integer tensor")
    if exponent == 0.5:
        return Op("sqrt", (x,), x.dtype)
    if exponent == -0.5:
        return Op("rsqrt", (x,), x.dtype)
    # exp2(y * log2(x)): NaN for x < 0 and a non-integer y, like torch.pow; but pow(-inf, y) is inf (y > 0) or 0
    at_minus_inf = lit(math.inf if exponent > 0 else 0.0 if exponent < 0 else math.nan, x)
    return where(Op("eq", (x, lit(-math.inf, x)), torch.bool), at_minus_inf, _exp2_log2(x, x, lit(float(exponent), x)))


def _float16_root(v, exponent):
    """x ** 0.5 and x ** -0.5 as eager's CPU float16 kernel computes them: C's pow, so (-inf) ** 0.5 is inf,
    (-inf) ** -0.5 is 0, (-0.0) ** 0.5 is +0.0 and (-0.0) ** -0.5 is +inf (sqrt gives NaN, -0.0 and -inf, as
    eager's other dtypes do), and x ** 0.5 rounded from float64 (float32's sqrt rounded twice: 45 of 1e5
    differed). Measured on CPU."""
    if exponent > 0:
        root = cast(Op("sqrt", (cast(v, torch.float64),), torch.float64), v.dtype)
    else:
        root = Op("rsqrt", (v,), v.dtype)
    at_zero, at_minus_inf = (lit(0.0, v), lit(math.inf, v)) if exponent > 0 else (lit(math.inf, v), lit(0.0, v))
    root = where(Op("eq", (v, lit(0.0, v)), torch.bool), at_zero, root)
    return where(Op("eq", (v, lit(-math.inf, v)), torch.bool), at_minus_inf, root)


# NOTE [Integer powers of negative floats]
# An integer exponent beyond the square-and-multiply range (|n| > 8) was computed as exp2(n * log2(x)),
# which is NaN for every negative base: x ** 9 at x = -2 gave NaN (eager -512), and so did
# x ** (x.size(1) - 6) with dynamic=None, whose size-generic module is generated at probes with large
# exponents and then serves every size (n = 0 included: exp2(0 * log2(0)) is NaN, eager's 0 ** 0 is 1).
# So the magnitude is exp2(n * log2|x|), negated where x is negative (or -0.0) and n odd, and 1 where
# n == 0. The exponent stays one literal (repeated), so the module is still fitted to the size expression;
# tests/backends/test_integer_and_negative_powers.py.
def _integer_power(x, exponent):
    e = lit(float(exponent), x)
    zero = lit(0.0, x)
    negative = Op("or", (Op("lt", (x, zero), torch.bool),
                         Op("lt", (Op("truediv", (lit(1.0, x), x), x.dtype), zero), torch.bool)), torch.bool)
    magnitude = _exp2_log2(x, Op("abs", (x,), x.dtype), e)
    # parity and zero tests of e are taken on tensors (where(c, e, e)), not on two literals
    signed_e = where(negative, e, zero)
    odd_negative = Op("ne", (Op("cmod", (signed_e, lit(2.0, x)), x.dtype), zero), torch.bool)
    signed = where(odd_negative, Op("neg", (magnitude,), x.dtype), magnitude)
    return where(Op("eq", (where(negative, e, e), zero), torch.bool), lit(1.0, x), signed)


def _exp2_log2(x, base, e):
    """exp2(e * log2(base)) in x's dtype; float32 computes in float64, so that the result is eager's
    correctly rounded pow (float32's log2 put ~|e * log2 x| ulps of error in the result)."""
    if x.dtype != torch.float32:
        return Op("exp2", (Op("mul", (e, Op("log2", (base,), x.dtype)), x.dtype),), x.dtype)
    wide = cast(base, torch.float64)
    out = Op("exp2", (Op("mul", (cast(e, torch.float64), Op("log2", (wide,), torch.float64)), torch.float64),),
             torch.float64)
    return cast(out, x.dtype)


def python_remainder(a, b):
    r = Op("cmod", (a, b), a.dtype)
    zero = lit(0, a)
    fix = Op("and", (Op("ne", (r, zero), torch.bool),
                     Op("ne", (Op("lt", (r, zero), torch.bool), Op("lt", (b, zero), torch.bool)), torch.bool)), torch.bool)
    return where(fix, Op("add", (r, b), a.dtype), r)


def floor_divide(a, b, step=lambda v: v):
    if a.dtype.is_floating_point:
        return _floor_divide_float(a, b, step)
    q = Op("truncdiv", (a, b), a.dtype)
    zero = lit(0, a)
    fix = Op("and", (Op("ne", (Op("cmod", (a, b), a.dtype), zero), torch.bool),
                     Op("ne", (Op("lt", (a, zero), torch.bool), Op("lt", (b, zero), torch.bool)), torch.bool)), torch.bool)
    return where(fix, Op("sub", (q, lit(1, a)), a.dtype), q)


# NOTE [Floor division as eager divides]: eager's floor division of floats is c10::div_floor_floating, not
# floor(a / b): `mod = fmod(a, b); div = (a - mod) / b`, minus 1 where mod's sign differs from b's, then floor
# with a correction above .5, a signed zero for a zero quotient and a / b for b == 0. So inf // 3 is NaN
# (floor(inf / 3) gave inf) and 1 // 0.1 is 9.0. For float16/bfloat16 it runs in that dtype's arithmetic when
# both operands are dimensioned tensors: every step rounds (`step`; CPU and CUDA alike: 9024 // 45 in
# bfloat16 is 201, floor(9024 / 45) 200; 0 of 2e5 random pairs differ), and in float32 when the divisor is a
# number or a 0-d tensor (eager's kernels read such a scalar in float32: 0 of 1e5 differ). Trunc division
# likewise rounds the quotient to the dtype before truncating (9024 / 258 -> 35.0 -> 35, not 34) only when
# both are dimensioned. A 0-d dividend of a dimensioned divisor matches neither form: eager's kernel runs it.
def _floor_divide_float(a, b, step):
    zero, one = lit(0.0, a), lit(1.0, a)
    mod = Op("cmod", (a, b), a.dtype)
    div = step(Op("truediv", (step(Op("sub", (a, mod), a.dtype)), b), a.dtype))
    lt0 = (lambda v: Op("lt", (v, zero), torch.bool))
    fix = Op("and", (Op("ne", (mod, zero), torch.bool), Op("ne", (lt0(b), lt0(mod)), torch.bool)), torch.bool)
    div = where(fix, step(Op("sub", (div, one), a.dtype)), div)
    floored = Op("floor", (div,), a.dtype)
    above = Op("gt", (step(Op("sub", (div, floored), a.dtype)), lit(0.5, a)), torch.bool)
    floored = where(above, step(Op("add", (floored, one), a.dtype)), floored)
    quotient = step(Op("truediv", (a, b), a.dtype))
    negative = Op("or", (lt0(quotient), lt0(Op("truediv", (one, quotient), a.dtype))), torch.bool)
    signed_zero = where(negative, lit(-0.0, a), zero)
    result = where(Op("ne", (div, zero), torch.bool), floored, signed_zero)
    return where(Op("eq", (b, zero), torch.bool), quotient, result)


def _division_step(lo, node, a, b):
    """How a division of `node` rounds its intermediates (NOTE [Floor division as eager divides])."""
    out = _meta(node).dtype
    if out not in (torch.float16, torch.bfloat16):
        return lambda v: v
    dims = [isinstance(v, TensorRef) and v.shape != () for v in (a, b)]
    if dims == [True, True]:
        return lambda v: cast(cast(v, out), v.dtype)
    if not dims[0] and dims[1]:
        raise Unlowerable("a number or 0-d dividend of a float16/bfloat16 division with rounding")
    return lambda v: v


# -- registrations ------------------------------------------------------------------------------------

SIMPLE_UNARY = {
    aten.neg: "neg", aten.abs: "abs", aten.exp: "exp", aten.exp2: "exp2", aten.log: "log", aten.log2: "log2",
    aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.sigmoid: "sigmoid",
    aten.erf: "erf", aten.floor: "floor", aten.ceil: "ceil", aten.bitwise_not: "bitnot",
}
BUILT_UNARY = {
    aten.tanh: tanh, aten.trunc: trunc, aten.log1p: log1p, aten.expm1: expm1,
    aten.reciprocal: lambda x: Op("truediv", (lit(1.0, x), x), x.dtype),
    aten.relu: lambda x: where(Op("lt", (x, lit(0, x)), torch.bool), lit(0, x), x),
    # eager: sign(nan) and sign(-0.0) are 0.0 (soundness finding #8)
    aten.sign: lambda x: where(Op("gt", (x, lit(0, x)), torch.bool), lit(1, x),
                               where(Op("lt", (x, lit(0, x)), torch.bool), lit(-1, x), lit(0, x))),
    aten.log10: lambda x: Op("mul", (Op("log2", (x,), x.dtype), lit(math.log10(2.0), x)), x.dtype),
}
ARITHMETIC = {
    aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum",
    aten.bitwise_and: "and", aten.bitwise_or: "or", aten.bitwise_xor: "xor",
}
COMPARISONS = {aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge"}
LOGICAL = {aten.logical_and: "and", aten.logical_or: "or", aten.logical_xor: "ne"}


def _float_only(x):
    if not x.dtype.is_floating_point:
        raise Unlowerable(f"float op on {x.dtype}")
    return x


# eager has no bool kernel for these (`torch.abs(mask)` raises NotImplementedError): its op runs and raises
NO_BOOL_KERNEL = {aten.abs, aten.floor, aten.ceil, aten.trunc, aten.relu, aten.argmax, aten.argmin}


def no_bool_kernel(op, x) -> None:
    if isinstance(x, TensorRef) and x.dtype == torch.bool and getattr(op, "overloadpacket", op) in NO_BOOL_KERNEL:
        raise Unlowerable(f"eager has no bool kernel for {op}")


def _register_unary(op, build):
    @lowering(op)
    def lower_unary(lo, node, x, *rest, **kw):
        if rest or kw:
            raise Unlowerable("extra arguments")
        no_bool_kernel(node.target, x)
        return _pointwise(lo, node, [x], build)


for _op, _name in SIMPLE_UNARY.items():
    _register_unary(_op, lambda x, n=_name: Op(n, (x,), x.dtype))
for _op, _fn in BUILT_UNARY.items():
    _register_unary(_op, _fn)


def _register_binary(op, name, result_bool=False, operand_dtype=None):
    @lowering(op)
    def lower_binary(lo, node, a, b, **kw):
        if kw:
            raise Unlowerable("extra arguments")
        compute = operand_dtype or (compute_dtype(_promoted(node)) if result_bool else None)
        dtype = torch.bool if result_bool else None
        return _pointwise(lo, node, [a, b], _converting(node, a, b, lambda x, y: Op(name, (x, y), dtype or x.dtype)),
                          compute)


def _converting(node, a, b, fn):
    """`fn` of the loaded operands, those `_converted_first` going through the result's dtype first."""
    through = [_converted_first(node, v) for v in (a, b)]

    def converted(x, y):
        x, y = (cast(cast(v, _meta(node).dtype), v.dtype) if t else v for v, t in zip((x, y), through))
        return fn(x, y)
    return converted


def _converted_first(node, value) -> bool:
    """`value` is a dimensioned tensor of another dtype than the op's float16/bfloat16 result: eager converts it
    to the result's dtype before computing (`bfloat16 + int64`: 2045 is 2048 first; NOTE [Operands of
    comparisons in the promoted dtype]), where the lowering computed from its float32 value."""
    out = _meta(node)
    return isinstance(value, TensorRef) and value.shape != () and value.dtype != out.dtype \
        and out.dtype in (torch.float16, torch.bfloat16)


# NOTE [Operands of comparisons in the promoted dtype]: eager compares in the operands' promoted dtype: each
# operand is converted to it first, a Python number as the double (or int64) it is wrapped in
# (TensorIterator's cast on CPU, `iter.scalar_value<scalar_t>` in CUDA's compare kernels). So
# `x.half() == 2049.0` compares with 2048.0 (2049 rounds to even in float16: True for x = 2048 and 2049),
# `x.bfloat16() < 257.0` with 256.0, `x.int8() == 300` with 44, and a float16 operand equals 16777217.0 where
# it is inf. The lowering computed in float32 (the compute dtype of a float16 comparison) with the number
# unrounded, so all of those differed (review revB HIGH: under a float16 default set inside the function,
# `n == s` for an int64 n is `n.to(float16) == s`, NOTE [Comparisons under a default dtype set inside]). A
# Python number is now converted as eager converts it (torch's own conversion, no overflow check, as eager's),
# and a tensor operand of another dtype goes through the promoted dtype (the same float32 step as eager's
# c10 conversions of float64/int64 to float16/bfloat16) before the float32 comparison.
def _in_promoted(value, promoted: torch.dtype):
    if isinstance(value, TensorRef) or not isinstance(value, (bool, int, float)):
        return value
    wrapped = torch.bool if isinstance(value, bool) else torch.float64 if isinstance(value, float) else torch.int64
    try:
        return torch.tensor(value, dtype=wrapped).to(promoted).item()
    except (OverflowError, RuntimeError) as e:
        raise Unlowerable(f"comparison with {value!r}: {e}") from None


def _register_comparison(op, name):
    @lowering(op)
    def lower_comparison(lo, node, a, b, **kw):
        if kw:
            raise Unlowerable("extra arguments")
        promoted = _promoted(node)
        a, b = _in_promoted(a, promoted), _in_promoted(b, promoted)
        through = [isinstance(v, TensorRef) and v.dtype != promoted for v in (a, b)]

        def fn(x, y):
            x, y = (cast(cast(v, promoted), v.dtype) if t else v for v, t in zip((x, y), through))
            return Op(name, (x, y), torch.bool)

        return _pointwise(lo, node, [a, b], fn, compute_dtype(promoted))


for _op, _name in ARITHMETIC.items():
    _register_binary(_op, _name)
for _op, _name in COMPARISONS.items():
    _register_comparison(_op, _name)
for _op, _name in LOGICAL.items():
    _register_binary(_op, _name, result_bool=True, operand_dtype=torch.bool)


@lowering(aten.clone)
def _clone(lo, node, x, memory_format=None):
    return _pointwise(lo, node, [x], lambda v: v)


@lowering(aten.logical_not)
def _logical_not(lo, node, x):
    return _pointwise(lo, node, [x], lambda v: Op("not", (v,), torch.bool), torch.bool)


@lowering(aten.isnan)
def _isnan(lo, node, x):
    return _pointwise(lo, node, [x], lambda v: Op("ne", (v, v), torch.bool), compute_dtype(x.dtype))


@lowering(aten.isinf)
def _isinf(lo, node, x):
    if not x.dtype.is_floating_point:
        return _pointwise(lo, node, [x], lambda v: Op("ne", (v, v), torch.bool), compute_dtype(x.dtype))
    return _pointwise(lo, node, [x], lambda v: Op("eq", (Op("abs", (v,), v.dtype), lit(math.inf, v)), torch.bool),
                      compute_dtype(x.dtype))


# NOTE [Scalars of reduced-precision addition on CPU]: eager's CPU kernels for float16/bfloat16 `add` and
# `sub` with a Python scalar (and `alpha`) cast the scalar to the tensor's dtype first, then add in float32
# and round: `x.bfloat16() + 0.3` is round(float(x) + float(bf16(0.3))) (measured on 1e5 values: exact; the
# float32-scalar form differed on 14-22%), while its `mul`/`div` keep the scalar in float32 (as here). CUDA's
# kernels keep every scalar in float32. So for a float16/bfloat16 result on a CPU device (Triton's
# interpreter; eager on the same tensors is the reference), the scalars of add/sub are rounded to the dtype.
# With an `alpha` other than 1 (a scalar's or a tensor's: `torch.add(x, 0.1, alpha=3)`, the optimizers'
# `p.add_(g, alpha=-lr)`) eager's result depends on the element's place: the kernel's vector body computes
# round(fma(bf16(b), bf16(alpha), x)) and the tail of each innermost run (its last n % 32 elements with
# AVX512, per thread chunk) round(x + bf16(bf16(alpha) * bf16(b))) (measured: 1000 elements, the vector form
# differs only at 992-999, the tail form elsewhere). No kernel of ours can know those places, so such an
# add/sub runs eager's kernel as an extern fallback (before: 38 of 1000 elements an ulp off). A 0-d tensor of
# another dtype (`x.bfloat16() + torch.tensor(0.1)`: a 0-d operand does not promote a dimensioned one, so
# the result is bfloat16) is a scalar to these kernels too: it is rounded to the dtype the same way (measured
# on 1e5 values for float32, float64 and int64 0-d tensors, add/sub/radd: exact; mul/div keep float32).
def _reduced_cpu_scalar(node, value):
    out = _meta(node)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _reduced_on_cpu(out):
        return torch.tensor(value, dtype=out.dtype).item()
    return value


def _reduced_on_cpu(out) -> bool:
    return out.dtype in (torch.float16, torch.bfloat16) and out.device.type == "cpu"


def _rounds_0d(node, value) -> bool:
    """`value` is a 0-d tensor that eager's CPU add/sub rounds to the result's reduced dtype first."""
    out = _meta(node)
    return isinstance(value, TensorRef) and value.shape == () and value.dtype != out.dtype \
        and value.dtype != torch.bool and _reduced_on_cpu(out)


@lowering(aten.add, aten.sub)
def _add_sub(lo, node, a, b, alpha=1):
    name = "add" if node.target.overloadpacket is aten.add else "sub"
    if alpha != 1 and _reduced_on_cpu(_meta(node)):
        raise Unlowerable(f"eager's CPU {name} of bfloat16/float16 with an alpha rounds by the element's place "
                          "(NOTE [Scalars of reduced-precision addition on CPU])")
    rounded = (False, False)
    if alpha == 1:
        a, b = (_reduced_cpu_scalar(node, v) for v in (a, b))
        rounded = (_rounds_0d(node, a), _rounds_0d(node, b))
    rounded = tuple(r or _converted_first(node, v) for r, v in zip(rounded, (a, b)))
    out_dtype = _meta(node).dtype

    def fn(x, y):
        x, y = (cast(cast(v, out_dtype), v.dtype) if r else v for v, r in zip((x, y), rounded))
        if alpha != 1:
            y = Op("mul", (y, lit(alpha, y)), y.dtype)
        return Op(name, (x, y), x.dtype)

    # bool + bool is a logical or in eager (True + True is True): add in int32, store `!= 0` (finding #7)
    return _pointwise(lo, node, [a, b], fn, torch.int32 if _meta(node).dtype == torch.bool else None)


@lowering(aten.div)
def _div(lo, node, a, b, rounding_mode=None):
    if rounding_mode is None:
        return _pointwise(lo, node, [a, b], _converting(node, a, b, binop("truediv")))
    step = _division_step(lo, node, a, b) if _meta(node).dtype.is_floating_point else None
    if rounding_mode == "floor":
        return _pointwise(lo, node, [a, b], _converting(node, a, b, lambda x, y: floor_divide(x, y, step)))
    if _meta(node).dtype.is_floating_point:
        return _pointwise(lo, node, [a, b],
                          _converting(node, a, b, lambda x, y: trunc(step(Op("truediv", (x, y), x.dtype)))))
    return _pointwise(lo, node, [a, b], binop("truncdiv"))


# NOTE [Operands of remainder and pow in the result dtype]: eager's remainder, fmod and pow kernels read a number
# or 0-d operand in the float16/bfloat16 result dtype (TensorIterator's cast; unlike mul/div, whose kernels read a
# CPU scalar in float32): `x % 3.3` is x % 3.296875 in bfloat16 (measured on 1e5 values: the float32 form differed
# on 95%, the rounded 0), `torch.fmod(x, torch.tensor(3.3))` the same, `x ** 3.3` is x ** 3.296875 (the float32
# exponent differed on 98%). So those operands are rounded to the result dtype here, as the dimensioned operands
# of another dtype already were (`_converted_first`).
def _in_result_dtype(node, values) -> tuple:
    """`values` with numbers rounded to `node`'s float16/bfloat16 result dtype, and which tensors to convert."""
    out = _meta(node).dtype
    if out not in (torch.float16, torch.bfloat16):
        return tuple(values), tuple(False for _ in values)
    values = tuple(torch.tensor(v, dtype=out).item() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   else v for v in values)
    return values, tuple(isinstance(v, TensorRef) and v.dtype != out for v in values)


def _rounded_operands(lo, node, a, b, fn):
    (a, b), through = _in_result_dtype(node, (a, b))
    out = _meta(node).dtype

    def rounded(x, y):
        x, y = (cast(cast(v, out), v.dtype) if t else v for v, t in zip((x, y), through))
        return fn(x, y)
    return _pointwise(lo, node, [a, b], rounded)


@lowering(aten.remainder)
def _remainder(lo, node, a, b):
    return _rounded_operands(lo, node, a, b, python_remainder)


@lowering(aten.fmod)
def _fmod(lo, node, a, b):
    return _rounded_operands(lo, node, a, b, lambda x, y: Op("cmod", (x, y), x.dtype))


@lowering(aten.pow.Tensor_Scalar)
def _pow(lo, node, x, exponent):
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise Unlowerable("non-number exponent")
    compute = compute_dtype(_meta(node).dtype)
    power(Scalar(1, compute), exponent)  # raises Unlowerable early for unsupported integer cases
    (exponent,), _ = _in_result_dtype(node, (exponent,))  # NOTE [Operands of remainder and pow in the result dtype]
    out = _meta(node).dtype
    if out == torch.bfloat16 and exponent in (3, -2) and _meta(node).device.type == "cpu":
        # NOTE [bfloat16 cubes on CPU]: eager's CPU kernel computes x ** 3 as (x * x) * x and x ** -2 as
        # 1 / (x * x) in bfloat16 arithmetic, each product rounded (measured on 1e5 values: 0 differ; one
        # rounding differed on 22% and 27%); float16 and the other exponents round once
        def step(v):
            return cast(cast(v, out), v.dtype)

        def stepped(v):
            square = step(Op("mul", (v, v), v.dtype))
            if exponent == 3:
                return Op("mul", (square, v), v.dtype)
            return Op("truediv", (lit(1.0, v), square), v.dtype)
        return _pointwise(lo, node, [x], stepped)
    if out == torch.float16 and exponent in (0.5, -0.5) and _meta(node).device.type == "cpu":
        return _pointwise(lo, node, [x], lambda v: _float16_root(v, exponent))
    return _pointwise(lo, node, [x], lambda v: power(v, exponent))


@lowering(aten.clamp)
def _clamp(lo, node, x, min=None, max=None):
    if isinstance(min, TensorRef) or isinstance(max, TensorRef):
        raise Unlowerable("tensor bounds")
    try:  # eager converts the bounds to x's dtype with an overflow check: its kernel raises eager's error
        torch.empty(0, dtype=x.dtype).clamp(min=min, max=max)
    except (RuntimeError, TypeError) as e:
        raise Unlowerable(f"clamp bounds: {e}") from None

    def fn(v):  # eager's clamp is `x < lo ? lo : x`: it keeps NaN and the sign of clamp_min(-0.0, 0.0)
        if any(isinstance(bound, float) and bound != bound for bound in (min, max)):
            return Op("add", (v, lit(float("nan"), v)), v.dtype)  # a NaN bound: NaN everywhere, as eager
        if min is not None:
            bound = lit(min, v)
            v = Op("where", (Op("lt", (v, bound), torch.bool), bound, v), v.dtype)
        if max is not None:
            bound = lit(max, v)
            v = Op("where", (Op("gt", (v, bound), torch.bool), bound, v), v.dtype)
        return v

    return _pointwise(lo, node, [x], fn)


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(lo, node, cond, a, b):
    out = _meta(node)
    compute = compute_dtype(out.dtype)

    def fn(c, x, y):
        return Op("where", (cast(c, torch.bool), cast(x, compute), cast(y, compute)), compute)

    if not isinstance(cond, TensorRef):
        raise Unlowerable("scalar condition")
    for value in (a, b):
        _fits(value, out.dtype, "where")
    return lo.pointwise([cond, a, b], out.shape, out.dtype, lambda c, x, y: fn(c, x, y), compute, "where")


@lowering(aten._to_copy, prims.convert_element_type, aten.to.dtype)
def _to_copy(lo, node, x, *args, **kwargs):
    out = _meta(node)
    device = kwargs.get("device")
    if device is not None and torch.device(device) != out.device:
        raise Unlowerable("device change")
    if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        raise Unlowerable("memory format")
    # compute in the target dtype: the cast itself is the one rounding step
    return lo.pointwise([x], out.shape, out.dtype, lambda v: v, x.dtype, "_to_copy")


@lowering(aten.full, aten.scalar_tensor, aten.full_like, aten.zeros, aten.ones, aten.zeros_like,
          aten.ones_like, aten.empty_like, aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty,
          aten.empty, aten.fill.Scalar)
def _constant_fill(lo, node, *args, **kwargs):
    out = _meta(node)
    packet = node.target.overloadpacket
    if packet in (aten.full, aten.new_full):
        value = args[-1] if packet is aten.full else args[2]
    elif packet is aten.full_like or packet is aten.fill:
        value = args[1]
    elif packet is aten.scalar_tensor:
        value = args[0]
    else:
        value = 1 if packet in (aten.ones, aten.ones_like, aten.new_ones) else 0
    if isinstance(value, TensorRef):
        raise Unlowerable("tensor fill value")
    _fits(value, out.dtype, "fill")
    if not (out.dtype.is_floating_point or out.dtype.is_complex):
        value = _integral_fill(value, out.dtype)
    return lo.pointwise([], out.shape, out.dtype, lambda: Scalar(value, out.dtype), out.dtype, str(node.target))


def _fits(value, dtype: torch.dtype, what: str) -> None:
    """Eager converts a fill's (or where's) number to `dtype` with an overflow check (`scalar_tensor(300,
    dtype=int8)`, `full(..., 1e6, dtype=float16)` raise; -3 in uint8 wraps): what it refuses runs eager's op
    (an extern), which raises eager's error, instead of a wrapped literal (NOTE [Literals hold their dtype's
    value] in ir.py)."""
    if isinstance(value, (bool, int, float)):
        try:
            torch.full((), value, dtype=dtype)
        except (RuntimeError, OverflowError) as e:
            raise Unlowerable(f"{what} with {value!r}: {e}") from None


# NOTE [Integer fills of floats] (review revD D4): torch converts a fill's Scalar to the tensor's dtype before
# filling (C++'s cast: truncation toward zero; a bool is `value != 0`), so `full_like(x, 2.5, dtype=int64)` holds
# 2 and `x.long().fill_(0.6)` holds 0. The kernel kept the float 2.5 in the arithmetic after it (`* 3` gave 7.5,
# stored as 8 where eager gives 6 + 1). The value is converted here as torch converts it; a value torch refuses
# (inf, nan: its overflow error) runs the op in torch (an extern), which raises it.
def _integral_fill(value, dtype: torch.dtype):
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise Unlowerable("a non-finite fill of an integer tensor")
        return value != 0 if dtype is torch.bool else int(value)
    if dtype is torch.bool:
        return bool(value)
    return value
