"""Arithmetic on NumPy scalar constants that meets a floating-point error follows `np.seterr` of each call, as in
eager (NOTE [NumPy folds and the error state] in capture/protocol.py); errors-free folds stay folded."""
from __future__ import annotations

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


def _run(fn, x, mode):
    old = np.seterr(all=mode)
    try:
        return ("ok", fn(x))
    except FloatingPointError as e:
        return ("raised", str(e))
    finally:
        np.seterr(**old)


@pytest.mark.parametrize("fn", [divide_by_zero, overflow, integer_divide_by_zero, plain_division])
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
