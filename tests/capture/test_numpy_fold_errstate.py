"""Arithmetic on NumPy scalar constants, and NumPy functions and constructors called on constants, that meet a
floating-point error follow `np.seterr` of each call, as in eager (NOTE [NumPy folds and the error state] in
capture/protocol.py, NOTE [NumPy calls folded under the error state] in capture/numpy_support.py); error-free
folds stay folded."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import framejit


def divide_by_zero(x):
    return x * float(np.float64(1.0) / np.float64(0.0) > 0)


def overflow(x):
    return x * float(np.float32(3e38) * np.float32(10) > 0)


def integer_divide_by_zero(x):
    return x + float(np.int64(1) // np.int64(0) == 0)


def plain_division(x):
    return x * float(np.float64(1.0) / np.float64(4.0))


def cast_overflow(x):  # review revO O7: the constructor's cast overflows
    return x + float(np.float32(1e39))


def half_cast_overflow_in_a_callee(x):
    def half(v):
        return np.float16(v)
    return x - float(half(70000.0)) if x.shape[0] > 1 else x


def ufunc_overflow_on_a_python_float(x):
    return x + float(np.exp(1000.0))


def branch_on_an_overflowing_cast(x):
    return x + 1 if np.float32(1e39) > 0 else x - 1


def cast_then_break(x):
    y = x * 2
    print("", end="")  # a graph break before the cast
    return y - float(np.float32(-1e39))


def error_free_calls(x):
    return x * float(np.float32(0.5)) + float(np.exp(0.5)) + float(np.sqrt(np.float16(4.0)))


def _run(fn, x, mode):
    old = np.seterr(all=mode)
    try:
        return ("ok", fn(x))
    except FloatingPointError as e:
        return ("raised", str(e))
    finally:
        np.seterr(**old)


@pytest.mark.parametrize("fn", [divide_by_zero, overflow, integer_divide_by_zero, plain_division, cast_overflow,
                                half_cast_overflow_in_a_callee, ufunc_overflow_on_a_python_float,
                                branch_on_an_overflowing_cast, cast_then_break, error_free_calls])
def test_numpy_errors_follow_the_error_state_of_each_call(fn):
    compiled = framejit.compile(fn, backend="eager")
    for call, mode in enumerate(("ignore", "raise", "ignore", "raise")):
        x = torch.arange(3.0) + call
        expected, got = _run(fn, x, mode), _run(compiled, x, mode)
        assert got[0] == expected[0]
        assert torch.equal(got[1], expected[1]) if got[0] == "ok" else got[1] == expected[1]


def test_an_error_free_fold_stays_in_the_graph():
    before = framejit.stats()["frames_traced"]
    compiled = framejit.compile(plain_division, backend="eager")
    for call in range(3):
        assert torch.equal(compiled(torch.arange(3.0) + call), plain_division(torch.arange(3.0) + call))
    assert framejit.stats()["frames_traced"] - before == 1


def _warned(fn, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = np.seterr(all="warn")
        try:
            result = fn(x)
        finally:
            np.seterr(**old)
    return result, sorted(str(w.message) for w in caught if issubclass(w.category, RuntimeWarning))


@pytest.mark.parametrize("fn", [cast_overflow, ufunc_overflow_on_a_python_float, cast_then_break])
def test_numpy_calls_that_meet_an_error_warn_as_eager_under_warn(fn):
    compiled = framejit.compile(fn, backend="eager")
    for call in range(3):
        x = torch.arange(3.0) - call
        (expected, expected_warnings), (got, got_warnings) = _warned(fn, x), _warned(compiled, x)
        assert torch.equal(got, expected) and got_warnings == expected_warnings and expected_warnings


def test_error_free_numpy_calls_stay_folded_under_every_error_state():
    before = framejit.stats()["frames_traced"]
    compiled = framejit.compile(error_free_calls, backend="eager")
    for call, mode in enumerate(("ignore", "raise", "warn", "raise")):
        x = torch.arange(3.0) + call
        expected, got = _run(error_free_calls, x, mode), _run(compiled, x, mode)
        assert got[0] == expected[0] == "ok" and torch.equal(got[1], expected[1])
    assert framejit.stats()["frames_traced"] - before == 1
