"""onnxrt lowers abs() of a dynamic float (helper hfixDyn2; NOTE [Float inputs as tensors], NOTE [Builtins of dynamic
floats]): `x * abs(a)` keeps `a` a graph input, and the float-input rewrite takes operator.abs (exact on a float64
0-d tensor, -0.0 included), so onnxrt compiles the graph once for every value instead of running it eagerly
("float inputs stay floats ... <built-in function abs>"). Eager first, then compiled, on the same inputs.
"""
from __future__ import annotations

import logging

import torch

import framejit
from framejit import logs
from tests.helpers import assert_same


def _scaled(x, a):
    return x * abs(a) - x * (-a), torch.signbit(x.abs() * abs(a))


def test_onnxrt_compiles_abs_of_a_changing_float(caplog):
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    try:
        compiled = framejit.compile(_scaled, backend="onnxrt")
        for a in (0.5, -0.7, -0.0, 2.5, -3.25, 1e-300, -1e300, 0.0):
            x = torch.linspace(-1, 1, 4, dtype=torch.float64)
            assert_same(compiled(x, a), _scaled(x, a))
    finally:
        logs.set_logs("")
    assert not [r for r in caplog.records if "float inputs stay floats" in r.getMessage()]
