"""onnxrt lowers max()/min() of dynamic floats (helper hfixSym; NOTE [Float inputs as tensors] and NOTE [Sorting by
symbolic keys]): `x * max(x.tolist())` is one graph whose max is a Python `max` of float inputs; the float-input
rewrite did not take it, so onnxrt ran the graph eagerly ("float inputs stay floats ... <built-in function max>").
It is `where(b > a, b, a)` (`<` for min) on float64 0-d tensors now: CPython's rule, so NaN and -0.0 come out
as Python's max/min give them. Eager first, then compiled, on the same inputs; no fallback logged.
"""
from __future__ import annotations

import logging
import math

import torch

import framejit
from framejit import logs
from tests.helpers import assert_same


def _scaled_by_extrema(x):
    vals = x.tolist()
    top, low = max(vals), min(vals[0], 0.5, vals[1])
    y = x * top + low
    # the sign of a zero shows which of 0.0 and -0.0 was picked (a NaN's sign bit is no Python-visible fact)
    return y, torch.signbit(torch.nan_to_num(x.abs() * low)), torch.signbit(torch.nan_to_num(x.abs() * top))


def test_onnxrt_compiles_max_and_min_of_changing_floats(caplog):
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    nan = math.nan
    rows = [[1.0, 2.0, 3.0], [3.0, -2.0, 1.0], [0.25, 0.75, -1.0], [-0.0, 0.0, -1.0], [0.0, -0.0, -3.0],
            [nan, 1.0, 2.0], [1.0, nan, 0.5], [-5.0, -6.0, -7.0]]
    try:
        compiled = framejit.compile(_scaled_by_extrema, backend="onnxrt")
        for row in rows:
            x = torch.tensor(row, dtype=torch.float64)
            assert_same(compiled(x), _scaled_by_extrema(x))
    finally:
        logs.set_logs("")
    assert not [r for r in caplog.records if "float inputs stay floats" in r.getMessage()]
