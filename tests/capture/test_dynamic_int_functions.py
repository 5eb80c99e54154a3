"""Dynamic shapes, issue 13 (hhuntD MED-6, helper hfixDyn2): Python functions of a dynamic int argument keep it
symbolic.

`range(0, 100, 3)[n]`, `enumerate(xs, n)` (position ids from an offset), `pow(n, 2, 7)`, `math.gcd(n, 6)`,
`math.factorial(n)`, `math.comb(n + 2, 2)`, `math.isqrt(n)`, `math.lcm` and `math.perm` of an int argument that
changes pinned it: one compilation per value, then "hit the recompile limit (8); it now runs eagerly". Range
indexing is `start + n * step` with its bound check a guarded relation, enumerate's rows are `n + i`, a modular
pow with constant exponent and modulus is `n ** e % m`; the math functions with no symbolic form break the graph
there (NOTE [Math functions of symbolic ints] in capture/folded_results.py), as stock torch.compile does. Graph
counts over the values below, framejit (stock torch.compile with a counting backend, measured): range 2 (1),
enumerate 2 (2), pow 2 (3), gcd/factorial/isqrt/lcm/perm 3 (3), comb 4 (4). Values and exceptions equal eager.
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


def _enumerate_start(x, n):
    return [x * i for i, _ in enumerate(range(3), n)][-1]


def _enumerate_start_keyword(x, n):
    return [x * i for i, _ in enumerate("abc", start=n)]


def _enumerate_escapes(x, n):
    rows = enumerate(range(4), n)
    next(rows)
    return x * 2, rows


CASES = {  # name: (function, graphs over VALUES)
    "range_index": (lambda x, n: x * range(0, 100, 3)[n], 2),
    "enumerate_start": (_enumerate_start, 2),
    "enumerate_start_keyword": (_enumerate_start_keyword, 2),
    "enumerate_escapes": (_enumerate_escapes, 2),
    "pow_mod": (lambda x, n: x * pow(n, 2, 7), 2),
    "pow_mod_negative_modulus": (lambda x, n: x * pow(n - 5, 3, -7), 2),
    # a large exponent (the modular inverse idiom) is a break, not `n ** e % m` (review revK HIGH-1: hung)
    "pow_mod_large_exponent": (lambda x, n: x * (pow(n, 10**9 + 5, 10**9 + 7) % 1000), 3),
    "gcd": (lambda x, n: x * math.gcd(n, 6), 3),
    "factorial": (lambda x, n: x * math.factorial(n), 3),
    "comb": (lambda x, n: x * math.comb(n + 2, 2), 4),
    "isqrt": (lambda x, n: x * math.isqrt(n), 3),
    "lcm": (lambda x, n: x * math.lcm(n, 4), 3),
}


def _plain(result):
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], enumerate):
        return result[0], list(result[1])
    return result


def _outcome(fn, *args):
    try:
        return _plain(fn(*args))
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return type(e), str(e)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(i, j) for i, j in zip(a, b))
    return a == b


def _run(fn, values, **options) -> int:
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, **options)
    for n in values:
        x = torch.ones(2)
        expected, got = _outcome(fn, x, n), _outcome(compiled, x, n)
        assert _same(got, expected), (n, got, expected)
    return backend.graph_count


@pytest.mark.parametrize("name", sorted(CASES))
def test_function_of_dynamic_int_stays_symbolic(name):
    fn, graphs = CASES[name]
    assert _run(fn, VALUES) == graphs


def test_range_index_bounds_and_negative_indices():
    """Negative indices and indices out of range (IndexError, as eager) are relations, not values: the values
    on either side of each bound share entries (8 graphs, one per value, before)."""
    values = (1, 2, -1, -5, 3, 40, 33, -34, -35, 5, 7, 6, -2, 41)
    assert _run(lambda x, n: x * range(0, 100, 3)[n], values) <= 5
    assert _run(lambda x, n: x * range(50, 0, -7)[n], (1, 2, 3, -2, 7, 8, -8, -9, 4, 0, 5, -3)) <= 5


def test_math_function_breaks_only_without_fullgraph():
    """With fullgraph=True (no graph break by choice) the call is folded, as before: values right."""
    assert _run(lambda x, n: x * math.gcd(n, 6), VALUES[:3], fullgraph=True) == 3
    assert _run(lambda x, n: x * math.factorial(n), (1, 2, -1, 3)) == 3  # ValueError of -1 raised as eager


@pytest.mark.parametrize("start", [0.5, "a", None, True, 2])
def test_enumerate_start_is_an_index_as_in_eager(start):
    """Review revK MED-2: `enumerate(xs, 0.5)` counted 0.5, 1.5 in compiled code where eager raises TypeError
    ('float' object cannot be interpreted as an integer); a str or None start too. An int or bool start counts
    as eager does."""
    def rows(x, s):
        return [x * i for i, _ in enumerate([x, x], s)]
    compiled = framejit.compile(rows, backend="eager")
    for _ in range(2):
        x = torch.randn(2)
        assert _same(_outcome(compiled, x, start), _outcome(rows, x, start))
