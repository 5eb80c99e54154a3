"""Float64 ops that ONNX Runtime lacks or that torchlib writes with float32 numbers, written as eager computes them.

NOTE [Float64 erf, gelu and hardtanh_backward]: ORT's CPU Erf has no double kernel, so a float64 `erf`, `gelu`
and `gelu_backward` (and every graph of a float64 model using GELU: its backward reads erf) ran in torch (a
node-level fallback, or the whole graph eagerly when a decomposed backward reached Erf); torchlib's
`hardtanh_backward` mixed a float32 constant into double arithmetic and ORT refused to load it. Here:
- `erf` (float64) is fdlibm's s_erf.c, the algorithm of glibc's erf, in ONNX ops: on |x| < 0.84375
  x + x * P(x^2)/Q(x^2) (x + efx * x below 2^-28), on [0.84375, 1.25) erx + P(|x| - 1)/Q(|x| - 1), on [1.25, 6)
  1 - exp(-z^2 - 0.5625) * exp((z - |x|)(z + |x|) + R(1/x^2)/S(1/x^2)) / |x| with z = |x| rounded to float32
  (fdlibm clears the low 32 bits; any z whose square is exact serves: the two exponents sum to -x^2 - 0.5625 +
  R/S), 1 from 6 on, the sign of x applied, NaN kept. Measured against eager's erf (Sleef's and libm's, 1 ulp)
  over 4e5 values: within 2 ulps (tests/backends/test_training_gaps7.py).
- `gelu` (approximate='none') is `x * 0.5 * (1 + erf(x * M_SQRT1_2))` and `gelu_backward` `dy * (cdf + x *
  pdf)` with cdf = 0.5 * (1 + erf(x * M_SQRT1_2)), pdf = M_2_SQRTPI * M_SQRT1_2 * 0.5 * exp(x * x * -0.5), the
  order of eager's CPU kernel (Activation.cpp), every number a double.
- `hardtanh_backward` (float64) is `x <= min or x >= max ? 0 : grad` as eager's kernel (NaN x keeps grad).
`rewrite(b, node)` is called from semantics._rewrite with its builder.
"""
from __future__ import annotations

import math

import torch
import torch.fx

aten = torch.ops.aten

_ERX, _EFX = 8.45062911510467529297e-01, 1.28379167095512586316e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)
_GELU_ALPHA = math.sqrt(0.5)  # M_SQRT1_2 (the correctly rounded double, as <cmath>'s constant)
_GELU_BETA = (2 / math.sqrt(math.pi)) * math.sqrt(0.5) * 0.5  # M_2_SQRTPI * M_SQRT1_2 * 0.5


def _val(arg):
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _double(arg) -> bool:
    val = _val(arg)
    return isinstance(val, torch.Tensor) and val.dtype == torch.float64


def _polynomial(b, z, coefficients: tuple) -> torch.fx.Node:
    """c0 + z * (c1 + z * (...)), Horner's order as fdlibm writes it."""
    value = b.nan_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        value = b(aten.add.Tensor, b(aten.mul.Tensor, value, z), c)
    return value


def _less(b, x, bound: float) -> torch.fx.Node:
    return b(aten.lt.Tensor, x, b.nan_like(x, bound))  # the bound a double tensor, never a float32 constant


def erf_of(b, x: torch.fx.Node) -> torch.fx.Node:
    a = b(aten.abs.default, x)
    z = b(aten.mul.Tensor, x, x)
    small = b(aten.add.Tensor, x, b(aten.mul.Tensor, x, b(aten.div.Tensor, _polynomial(b, z, _PP),
                                                         _polynomial(b, z, _QQ))))
    tiny = b(aten.add.Tensor, x, b(aten.mul.Tensor, x, _EFX))
    s = b(aten.sub.Tensor, a, 1.0)
    middle = b(aten.add.Tensor, b(aten.div.Tensor, _polynomial(b, s, _PA), _polynomial(b, s, _QA)), _ERX)
    inverse = b(aten.reciprocal.default, z)
    near = b(aten.div.Tensor, _polynomial(b, inverse, _RA), _polynomial(b, inverse, _SA))
    far = b(aten.div.Tensor, _polynomial(b, inverse, _RB), _polynomial(b, inverse, _SB))
    ratio = b(aten.where.self, _less(b, a, 1 / 0.35), near, far)
    rounded = b(aten._to_copy.default, b(aten._to_copy.default, a, dtype=torch.float32), dtype=torch.float64)
    head = b(aten.exp.default, b(aten.sub.Tensor, b(aten.neg.default, b(aten.mul.Tensor, rounded, rounded)), 0.5625))
    tail_exponent = b(aten.add.Tensor, b(aten.mul.Tensor, b(aten.sub.Tensor, rounded, a),
                                         b(aten.add.Tensor, rounded, a)), ratio)
    r = b(aten.mul.Tensor, head, b(aten.exp.default, tail_exponent))
    large = b(aten.sub.Tensor, b.nan_like(x, 1.0), b(aten.div.Tensor, r, a))
    magnitude = b(aten.where.self, _less(b, a, 1.25), middle, b(aten.where.self, _less(b, a, 6.0), large,
                                                                 b.nan_like(x, 1.0)))
    signed = b(aten.where.self, _less(b, x, 0.0), b(aten.neg.default, magnitude), magnitude)
    inner = b(aten.where.self, _less(b, a, 2.0 ** -28), tiny, small)
    value = b(aten.where.self, _less(b, a, 0.84375), inner, signed)
    return b(aten.where.self, b(aten.isnan.default, x), x, value)


def _cdf(b, x: torch.fx.Node) -> torch.fx.Node:
    return b(aten.mul.Tensor, b(aten.add.Tensor, erf_of(b, b(aten.mul.Tensor, x, _GELU_ALPHA)), 1.0), 0.5)


TARGETS = frozenset({aten.erf.default, aten.gelu.default, aten.gelu_backward.default, aten.hardtanh_backward.default})


def rewrite(b, node: torch.fx.Node, replace) -> bool:
    """Rewrite `node` if it is one of this module's float64 ops; `replace(node, new)` redirects its uses."""
    target = node.target
    if target is aten.erf.default and _double(node.args[0]):
        replace(node, erf_of(b, node.args[0]))
    elif target is aten.gelu.default and _double(node.args[0]) and node.kwargs.get("approximate", "none") == "none" \
            and len(node.args) == 1:
        x = node.args[0]
        erf_term = b(aten.add.Tensor, erf_of(b, b(aten.mul.Tensor, x, _GELU_ALPHA)), 1.0)
        replace(node, b(aten.mul.Tensor, b(aten.mul.Tensor, x, 0.5), erf_term))
    elif target is aten.gelu_backward.default and all(_double(a) for a in node.args[:2]) \
            and node.kwargs.get("approximate", "none") == "none" and len(node.args) == 2:
        grad, x = node.args
        pdf = b(aten.mul.Tensor, b(aten.exp.default, b(aten.mul.Tensor, b(aten.mul.Tensor, x, x), -0.5)), _GELU_BETA)
        replace(node, b(aten.mul.Tensor, grad, b(aten.add.Tensor, _cdf(b, x), b(aten.mul.Tensor, x, pdf))))
    elif target is aten.hardtanh_backward.default and all(_double(a) for a in node.args[:2]) \
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node.args[2:4]):
        grad, x, low, high = node.args
        outside = b(aten.logical_or.default, b(aten.le.Tensor, x, b.nan_like(x, float(low))),
                    b(aten.ge.Tensor, x, b.nan_like(x, float(high))))
        replace(node, b.where(outside, 0.0, grad))
    else:
        return False
    return True
