"""divmod of dynamic floats (issue 13, review revP LOW-2): `divmod(x.size(0), a)` pinned the float `a` (a
compilation per value, then the recompile limit): a graph break now (NOTE [divmod of sizes] in float_calls.py).
Divisors that become zero after the trace raise eager's ZeroDivisionError (through the graph's failure rerun).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _outcome(fn, *args):
    try:
        return repr(fn(*args))
    except ZeroDivisionError as e:
        return f"ZeroDivisionError: {e}"


def _differential(fn, arg_lists):
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend)
    outcomes = []
    for args in arg_lists:
        expected = _outcome(fn, *args)
        assert _outcome(compiled, *args) == expected, args
        outcomes.append(expected)
    assert eager_frames() == before
    return backend, outcomes


def _computed(x, a, b):
    return x * 2, divmod(a, b * 2.0)


def test_a_computed_divisor_that_becomes_zero():
    _differential(_computed, [(torch.ones(2), a, b) for a, b in [(1.5, 0.5), (3.0, 2.0), (2.0, -3.0), (1.0, 0.0),
                                                                    (2.5, 1.5), (-4.0, -0.0), (7.0, 4.0)]])


def _int_divisor(x, a, n):
    return x * 2, divmod(a, n)


def test_a_symbolic_int_divisor_that_becomes_zero():
    _, outcomes = _differential(_int_divisor, [(torch.ones(2), a, n) for a, n in [(1.5, 2), (3.0, 3), (2.0, 5),
                                                                                  (1.0, 0), (2.5, 4), (7.0, 6)]])
    assert outcomes.count("ZeroDivisionError: float divmod()") == 1


def _size_first(x, a):
    q, r = divmod(x.size(0), a)
    return x * q, r


def _size_second(x, a):
    q, r = divmod(a, x.size(0))
    return x * q, r


@pytest.mark.parametrize("fn", [_size_first, _size_second])
def test_divmod_of_a_size_and_a_dynamic_float_keeps_both_dynamic(fn):
    sizes = [3, 5, 7, 4, 9, 6, 8, 10]
    backend, _ = _differential(fn, [(torch.ones(n, 2), 0.3 * n + 0.05) for n in sizes])
    assert backend.graph_count <= 3  # parent: 8 and the recompile limit (an eager frame)
