"""A rebuilt float that raises (NOTE [Rebuilt floats that raise]) after a graph with an effect that cannot be
repeated: `x.add_(1); try: r = 1.0 / v except ZeroDivisionError: r = -1.0` (review revAF HIGH).

The graph ran first and held `1.0 / v` as a node: at v = 0.0 it raised there, its eager rerun was refused
(an input changed in place, a draw from torch's generator), and ZeroDivisionError reached the caller where
eager returned -1.0. The floats read only their sourced roots, so they are now preloaded before the graph
call (raising_floats.floats_then_draws): the preload raises before any effect and the call reruns eagerly.
"""
from __future__ import annotations

import torch

import framejit


@framejit.disable
def _opaque(d):  # a graph break
    d["seen"] = len(d)


def _inplace_then_divide(x, v):
    x.add_(1)
    try:
        r = 1.0 / v
    except ZeroDivisionError:
        r = -1.0
    return r


def _draw_then_divide(x, v):
    n = torch.rand(1)
    try:
        r = 1.0 / v
    except ZeroDivisionError:
        r = -1.0
    return n, r


def _inplace_divide_then_break(x, v, d):
    x.add_(1)
    try:
        y = 1.0 / v
        _opaque(d)
        return x * 2, y
    except ZeroDivisionError:
        d["z"] = v
        return "caught", x * 3


def _run(fn, values, with_dict=False):
    """Every call's result, x after it and the next draw of torch's generator, from one seed."""
    torch.manual_seed(0)
    x, out = torch.zeros(2), []
    for v in values:
        d = {}
        try:
            result = fn(x, v, d) if with_dict else fn(x, v)
        except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
            result = (type(e), str(e))
        result = result if isinstance(result, tuple) else (result,)
        result = tuple(r.tolist() if torch.is_tensor(r) else r for r in result)
        out.append((v, result, x.tolist(), d, torch.rand(1).item()))
    return out


def _check(fn, with_dict=False):
    values = (2.0, 0.0, 4.0, 0.0, -0.5, 0.0)
    for _ in range(2):
        compiled = framejit.compile(fn, backend="eager")
        assert _run(compiled, values, with_dict) == _run(fn, values, with_dict)


def test_an_input_changed_in_place_before_a_rebuilt_float_that_raises():
    _check(_inplace_then_divide)


def test_a_torch_draw_before_a_rebuilt_float_that_raises():
    _check(_draw_then_divide)


def test_an_input_changed_in_place_before_a_rebuilt_float_that_raises_at_a_break():
    _check(_inplace_divide_then_break, with_dict=True)
