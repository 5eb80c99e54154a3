"""A dynamic float to a constant fractional power (NOTE [Float bases to fractional powers]).

NOTE [Float bases to fractional powers]: PolynomialLR(power=0.5)'s `((1 - e / T) / (1 - (e - 1) / T)) ** 0.5`
with the epoch `e` symbolic (a step counter that changes every call) specialised the base: torch keeps only
whole powers of a float (NOTE [Float bases to int powers] in sym_arith.py), because a negative float to a
fractional power is a complex number in CPython, not a float. So the base was guarded equal to its value
(`(...) == 0.857...`): one entry per epoch, and a compiled train step reached the recompile limit (11 graphs,
the step's scheduler part run eagerly after 8 epochs). Now a float to a constant non-whole power guards the
base's sign instead: `base >= 0` for a positive power (0.0 ** 0.5 is 0.0), `base > 0` for a negative one
(0.0 ** -0.5 raises ZeroDivisionError): a relation of the ShapeEnv's symbols, a line of the guard function.
Where it holds, the power is a graph node computed by CPython's own float pow at run time (the same value as
eager's, bit for bit); where it does not (a negative base: eager's complex result), the base specialises as
before.

NOTE [Int bases to fractional and negative powers] (review revAD MED-2): the inverse-sqrt warmup
`LambdaLR(opt, lambda e: (1 + e) ** -0.5)` has an int base (the epoch counter, symbolic once it changes), and
an int to a float power, or to a negative int power, is `float(base) ** float(exponent)` in CPython (int_pow
hands a negative exponent to float_pow; int.__pow__ returns NotImplemented to a float, whose float_pow
converts the int). It specialised the base as a float base did before (10 graphs and 1 eager frame over 14
steps). The same sign guard now keeps it: `base >= 0` for a positive fractional power, `base > 0` for a
negative power (fractional or whole, float or int: `0 ** -1` raises ZeroDivisionError, as does `0 ** -0.5`).
The graph's node is `operator.pow` of the same int and constant, CPython's own result and exception at run
time; a base outside the guard (zero, negative) specialises as before, so eager's exception or complex result
comes from the concrete values. A whole float power >= 0 of an int (`n ** 2.0`) is a real float for every
base and needs no guard.
"""
from __future__ import annotations

import operator

from .values import ConstantValue, Value


def real_fractional_power(tx, base: Value, exponent: Value, base_type: type = float) -> bool:
    """`base ** exponent` (a dynamic base of `base_type`, `exponent` a constant) is a power whose result is a
    float once the base's sign is guarded (NOTEs above): a non-whole float power of a float; a non-whole
    float power or a negative (float or int) power of an int. Guards only for such an exponent."""
    if not isinstance(exponent, ConstantValue) or type(exponent.value) not in (int, float):
        return False
    power = exponent.value
    whole = type(power) is int or power.is_integer()
    if power != power or (whole and (base_type is float or power >= 0)):
        return False  # nan; whole powers are sym_arith's own rules (NOTE [Float bases to int powers] there)
    from .comparisons import compare
    from .protocol import truth
    if base_type is int:
        from .sym_arith import _known_positive
        if _known_positive(tx, base):
            return True  # a size: NOTE [Negative powers of sizes], [Float powers of sizes] in sym_arith.py
    relation = compare(tx, operator.ge if power > 0 else operator.gt, base, ConstantValue(base_type(0)))
    return truth(tx, relation)
