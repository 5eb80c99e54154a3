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
"""
from __future__ import annotations

import operator

from .values import ConstantValue, Value


def real_fractional_power(tx, base: Value, exponent: Value) -> bool:
    """`base ** exponent` (a float base, `exponent` a constant) is a non-whole power whose base's sign was
    guarded so that the result is a float (NOTE above). Guards only for a fractional exponent."""
    if not isinstance(exponent, ConstantValue) or type(exponent.value) is not float or \
            exponent.value.is_integer() or exponent.value != exponent.value:
        return False
    from .comparisons import compare
    from .protocol import truth
    relation = compare(tx, operator.ge if exponent.value > 0 else operator.gt, base, ConstantValue(0.0))
    return truth(tx, relation)
