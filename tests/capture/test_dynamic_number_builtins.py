"""Python math of dynamic numbers (issue 13): `divmod(a, 0.3)`, `math.copysign(1.0, a)` of a dynamic float,
`round(n, -1)` of a symbolic int, `math.isclose` of either, `math.copysign` of sizes. Each was folded on the
value (one compilation per value, then the recompile limit ran the frame eagerly). NOTE [More builtins of dynamic
numbers] in capture/float_calls.py, NOTE [Math functions of symbolic ints] in capture/folded_results.py.

Stock torch.compile(backend=CompileCounter) over the same calls: copysign 8 (+ eager), isclose 4-5, divmod 1,
round(n, -1) 2 with values that differ from eager's (it rounds n / 10 as a float).
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

FLOATS = [0.1, 0.7, -0.0, -2.5, 0.3, 1e300, 0.9, 2.0, 0.30000000000000004, -1.75, 0.0, 5.5]
INTS = [1, 2, 3, 5, 15, 25, 35, 44, 45, 46, 99, 105, 0, -15, -25]


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _outcome(fn, *args):
    """repr of the result (-0.0 and the last bit seen) or the exception's type and text."""
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return type(e).__name__, str(e)
    if isinstance(out, tuple):
        return repr(out[1]), out[0].tolist()
    return out.tolist()


def _run(fn, values, make=lambda v: (torch.ones(2), v), fullgraph=False):
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for v in values:
        assert _outcome(compiled, *make(v)) == _outcome(fn, *make(v)), v
    assert eager_frames() == before
    return backend.graph_count


def divmod_by(x, a):
    q, r = divmod(a, 0.3)
    q2, r2 = divmod(1.7, a)
    return x * q + r, (q, r, q2, r2)


def copysigns(x, a):
    s, t = math.copysign(1.0, a), math.copysign(a, -1.0)
    return x * s + t, (s, t)


@pytest.mark.parametrize("fn", [divmod_by, copysigns], ids=lambda f: f.__name__)
def test_float_functions_of_a_dynamic_float_stay_graph_nodes(fn):
    """Bit-equal to eager (reprs, -0.0 included); divmod(1.7, 0.0) raises eager's ZeroDivisionError.
    Was 8 compilations, then eager."""
    assert _run(fn, FLOATS) <= 3


def round_ints(x, n):
    a, b, c = round(n, -1), round(n * 7, -2), round(n, 2)
    return x * a + b + c, (a, b, c, type(c).__name__)


def test_round_of_a_symbolic_int_keeps_eagers_half_even_values():
    """round(n, 2) is n itself; a negative ndigits runs as Python (a graph break) so n stays symbolic. Was 8
    compilations then eager; stock 2, with wrong values at 15, 25, 35 (it rounds the float n / 10)."""
    assert _run(round_ints, INTS) <= 6  # two breaks: 3 pieces, each static once then symbolic


def test_round_of_a_symbolic_int_with_fullgraph_folds_and_keeps_values():
    assert _run(round_ints, [3, 5, 15, 25, 44], fullgraph=True) >= 1


def isclose_float(x, a):
    return x * math.isclose(a, 0.3), math.isclose(a, 0.3, rel_tol=0.5)


def isclose_int(x, n):
    return x * math.isclose(n / 3, 2.0) + math.isclose(n, 5, abs_tol=1)


def isclose_size(x):
    return x * math.isclose(x.shape[0] / 3, 2.0)


@pytest.mark.parametrize("fn,values,make,bound", [
    (isclose_float, FLOATS, lambda v: (torch.ones(2), v), 4),
    (isclose_int, INTS, lambda v: (torch.ones(2), v), 5),
    (isclose_size, [3, 5, 6, 7, 4, 9, 6, 8, 10, 11], lambda v: (torch.ones(v, 2),), 4),
], ids=["float", "int", "size"])
def test_isclose_of_dynamic_numbers_is_a_break_not_a_pin(fn, values, make, bound):
    """A bool per call, so the resume function specialises on True/False only. Was 8 compilations, then eager
    (stock 4 / 4 / 5)."""
    assert _run(fn, values, make) <= bound


def copysign_size(x):
    return x * math.copysign(2.0, x.shape[0] - 6)


def test_copysign_of_a_size_keeps_it_symbolic():
    """Was one compilation per size, then eager (stock the same)."""
    assert _run(copysign_size, [3, 5, 6, 7, 4, 9, 8, 10, 11], lambda v: (torch.ones(v, 2),)) <= 3
