"""Folds of the shape env that hold for real numbers but not for NaN or a zero divisor (review revU HIGH).

A dynamic float (NOTE [Dynamic floats]) is a symbol of the env, and sympy folds `t == t`, `t <= t` to True and
`t != t` to False with no guard: a NaN on a later call reused the entry and took the branch eager does not
(NOTE [Float symbols are not NaN] in capture/shapes.py). A dynamic int divided by itself (`n // n`, `n % n`,
`(n * m) // m`) folded to a constant with no guard: a later 0 returned a value where eager raises
ZeroDivisionError (NOTE [Symbolic divisors are guarded nonzero]). The same holds for `float(s)`/`int(s)` of a
changing string (capture/changing_strings.py). Each test runs eager and framejit on the same values (ordinary
ones first, so the value is dynamic when the NaN or the 0 arrives) and compares results or exceptions."""
from __future__ import annotations

import math

import torch

import framejit


def _traced() -> int:
    return framejit.stats()["frames_traced"]


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception is the result compared
        return ("raises", type(e))
    return out.tolist() if isinstance(out, torch.Tensor) else out


def _same(a, b) -> bool:
    """Equal results, NaN equal to NaN, -0.0 apart from 0.0."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b and type(a) is type(b)


def _check(fn, values, make_arg=lambda v: v):
    cf = framejit.compile(fn, backend="eager")
    for v in values:
        x = torch.ones(2)
        expected, got = _outcome(fn, make_arg(v), x), _outcome(cf, make_arg(v), x)
        assert _same(got, expected), (fn.__name__, v, expected, got)


_FLOATS = [1.5, 2.5, 3.5, math.nan, 4.5, math.inf, -math.inf, -0.0, 0.0, math.nan]


def f_eq(a, x):
    return x * (2 if a == a else 3)


def f_ne(a, x):
    return x * (2 if a != a else 3)


def f_le(a, x):
    return x * (2 if a <= a else 3)


def f_ge(a, x):
    return x * (2 if a >= a else 3)


def f_lt_gt(a, x):
    return x * ((2 if a < a else 3) + (5 if a > a else 7))


def f_arith(a, x):
    return x * (a - a) + x * (a / a if a else 1.0) + x * a ** 0 + x * a


def f_isnan(a, x):
    return x * (2 if math.isnan(a) else 3)


def test_float_argument_compared_with_itself_is_python_on_nan():
    for fn in (f_eq, f_ne, f_le, f_ge, f_lt_gt, f_arith, f_isnan):
        _check(fn, _FLOATS)


def test_float_of_a_changing_string_compared_with_itself_is_python_on_nan():
    def g(s, x):
        a = float(s)
        return x * (2 if a == a else 3) + x * (5 if a <= a else 7)

    _check(g, ["1.0", "2.0", "3.0", "nan", "4.0", "inf", "-nan", "5.0"])


def n_floordiv(n, x):
    return x * (n // n)


def n_mod(n, x):
    return x * (n % n + 1)


def n_truediv(n, x):
    return x * (n / n)


def n_divmod(n, x):
    q, r = divmod(n, n)
    return x * (q + r)


def n_mul_zero(n, x):
    return x * (2 if n * 0 == 0 else 3) * (n * 2 // n)


def test_int_argument_divided_by_itself_raises_on_zero():
    for fn in (n_floordiv, n_mod, n_truediv, n_divmod, n_mul_zero):
        _check(fn, [2, 3, 5, 0, 7, 0, -4])


def test_divisor_that_is_another_int_argument_raises_on_zero():
    """Right before the fix too (the env keeps `(n * m) // m` symbolic); the divisor's guard must keep it so."""
    def g(n, m, x):
        return x * ((n * m) // m) + x * ((n * m) % m)

    cf = framejit.compile(g, backend="eager")
    for n, m in [(2, 3), (4, 5), (6, 7), (8, 0), (3, 2), (5, 0)]:
        x = torch.ones(2)
        assert _same(_outcome(cf, n, m, x), _outcome(g, n, m, x)), (n, m)


def test_int_of_a_changing_string_divided_by_itself_raises_on_zero():
    def g(s, x):
        n = int(s)
        return x * (n // n) + x * (n % n)

    _check(g, ["1", "2", "3", "5", "0", "6", "0"])


def test_ordinary_values_add_no_recompile():
    def f(a, n, x):
        return x * (2 if a == a else 3) * (n // n) + x * a * n

    cf = framejit.compile(f, backend="eager")
    before = _traced()
    for i in range(2, 10):
        x = torch.ones(2)
        torch.testing.assert_close(cf(1.5 * i, i, x), f(1.5 * i, i, x))
    assert _traced() - before == 2  # static, then dynamic a and n
    torch.testing.assert_close(cf(math.nan, 3, torch.ones(2)), f(math.nan, 3, torch.ones(2)), equal_nan=True)
    assert _traced() - before == 3  # the NaN gets an entry of its own


def test_int_of_a_dynamic_float_divided_by_itself_raises_on_zero():
    def g(t, x):
        k = math.floor(t)  # a symbolic int of the float (NOTE [Ints of dynamic floats])
        return x * (k // k) + x * (k % k)

    _check(g, [1.5, 2.5, 3.5, 0.5, 4.5, -0.5])
