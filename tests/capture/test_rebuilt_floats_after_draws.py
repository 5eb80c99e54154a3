"""A rebuilt float that raises (NOTE [Rebuilt floats that raise]) in a frame that draws from the random module
before it: `r = random.random(); try: d["r"] = r; return x, 1.0 / v except ZeroDivisionError: ...`.

The draws were emitted first in the transformed code, so the float's preload came after an effect and was
not rerun eagerly: at v = 0.0 ZeroDivisionError reached the caller, the except never ran and d stayed {}.
The floats read only their sourced roots, never a draw, so they are now preloaded before the draws
(raising_floats.floats_then_draws): the call reruns eagerly, drawing once, as eager does.
"""
from __future__ import annotations

import random

import torch

import framejit


@framejit.disable
def _opaque(d):  # a graph break
    d["seen"] = len(d)


def _draw_then_divide(x, v, d):
    r = random.random()
    try:
        d["r"] = r
        return x, 1.0 / v
    except ZeroDivisionError:
        return "caught", r


def _draw_divide_then_break(x, v, d):
    r = random.gauss(0.0, 1.0)
    try:
        y = 1.0 / v
        d["r"] = r
        _opaque(d)
        return x * 2, y, r
    except ZeroDivisionError:
        d["z"] = random.random()
        return "caught", r


def _run(fn, seed, values):
    """Every call's result, dict and the next draw of the generator after it, from one seed."""
    random.seed(seed)
    out = []
    for v in values:
        d = {}
        try:
            result = fn(torch.ones(2), v, d)
        except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
            result = (type(e), str(e))
        result = tuple(r.tolist() if torch.is_tensor(r) else r for r in result)
        out.append((v, result, d, random.random()))
    return out


def _check(fn):
    values = (2.5, 0.0, 4.0, 0.0, 0.0, -1.5, 0.0, 8.0)
    compiled = framejit.compile(fn, backend="eager")
    for seed in (0, 7):
        assert _run(compiled, seed, values) == _run(fn, seed, values)


def test_a_draw_before_a_rebuilt_float_that_raises():
    _check(_draw_then_divide)


def test_a_draw_before_a_rebuilt_float_that_raises_at_a_break():
    _check(_draw_divide_then_break)
