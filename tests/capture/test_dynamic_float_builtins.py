"""Dynamic shapes, issue 13 (hhuntD MED-3, helper hfixDyn2): builtins and math functions of a dynamic float keep it
a graph input (NOTE [Builtins of dynamic floats] in capture/float_calls.py).

`abs(a)`, `float(a)`, `bool(a)`, `round(a, 2)`, `math.cos(a)`, `math.sqrt(a * a)`, `a // 0.3` and `a % 0.3` of a
float argument that had changed (a graph input from then on) specialised it again: one entry per value, then
"hit the recompile limit (8); it now runs eagerly". Stock torch.compile (a counting backend, measured over these
values): 2 graphs for each of those; math.exp/math.log: 8. Each test compares eager and compiled (floats by repr:
bit-equal, -0.0, round-half-even, floor semantics of // and % for negatives; exceptions by type and message).
"""
from __future__ import annotations

import logging
import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

VALUES = (0.1, 0.7, 0.3, 2.0, -1.5, 0.25, 3.5, 10.0, -2.675, 2.675, 0.125, -0.0)

CASES = {  # each returns the floats themselves (compared by repr) beside a tensor using one
    "abs": lambda x, a: (x * abs(a), abs(a)),
    "float": lambda x, a: (x * float(a), float(a)),
    "round_ndigits": lambda x, a: (x * round(a, 2), round(a, 2), round(a, 1)),
    "cos": lambda x, a: (x * math.cos(a), math.cos(a)),
    "sqrt_of_square": lambda x, a: (x * math.sqrt(a * a), math.sqrt(a * a)),
    "floordiv": lambda x, a: (x * (a // 0.3), a // 0.3, a // -0.3),
    "mod": lambda x, a: (x * (a % 0.3), a % 0.3, a % -0.3),
    "exp": lambda x, a: (x * math.exp(a), math.exp(a)),
    "tanh_of_abs": lambda x, a: (x * math.tanh(abs(a)), math.tanh(abs(a))),
}


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return type(e), str(e)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and repr(a) == repr(b)  # floats bit-equal: -0.0 is not 0.0


def _run(fn, values) -> int:
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    eager_frames = framejit.stats()["eager_frames"]
    for a in values:
        x = torch.linspace(-1, 1, 3)
        expected, got = _outcome(fn, x, a), _outcome(compiled, x, a)
        assert _same(got, expected), (a, got, expected)
    assert framejit.stats()["eager_frames"] == eager_frames
    return backend.graph_count


@pytest.mark.parametrize("name", sorted(CASES))
def test_builtin_of_dynamic_float_stays_an_input(name):
    assert _run(CASES[name], VALUES) == 2  # stock: 2 (exp: 8)


def test_bool_of_dynamic_float_is_a_relation():
    """bool(a) is the guarded relation a != 0: nonzero values share one entry, zeros another."""
    fn = lambda x, a: x * bool(a) + (1 if a else 2)  # noqa: E731
    assert _run(fn, (0.1, 0.7, 0.3, 2.0, -1.5, 0.0, 3.5, -0.0, 10.0, 0.25)) == 3  # stock: 3


def test_domain_errors_raise_as_eager():
    """Values outside a function's domain raise eager's error, while tracing or from the graph."""
    fn = lambda x, a: x * math.sqrt(a) + math.log(a)  # noqa: E731
    assert _run(fn, (4.0, 9.0, -1.0, 2.0, 0.0, 3.0, 16.0, -4.0, 5.0)) <= 3  # stock: 6


def test_recompile_log_names_the_float_made_constant_again(caplog):
    """A use that still needs the value (math.hypot) says so in the recompile log (math.isclose, the example
    before, is now a graph break: NOTE [Math functions of symbolic ints] in folded_results.py)."""
    fn = lambda x, a: x * math.hypot(a, 1.0)  # noqa: E731
    compiled = framejit.compile(fn, backend="eager")
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.DEBUG, logger="framejit"):
            for a in (0.1, 0.7, 0.3):
                assert torch.equal(compiled(torch.ones(2), a), fn(torch.ones(2), a))
    finally:
        framejit.set_logs("")
    assert any("expected 0.7 (the float L['a'] is a graph input, made constant again by a call), got 0.3"
               in r.getMessage() for r in caplog.records)
