"""Arithmetic between a dynamic float and a symbolic int argument stays symbolic (NOTE [Symbolic ints beside
dynamic floats]): `a + n`, `loss.item() / n`, `lr * step` compile once per regime, not once per value.

Each program runs eagerly and compiled over 8 calls whose float and int both change (the int large enough
once for float(n) to round, negative once), results compared exactly (type, value, NaN and inf included;
exceptions by type); the traces are at most 2 under automatic dynamic (the first values, then inputs) and
1 under dynamic=True. Before, both operands were specialised: 6 to 8 traces, under dynamic=True too.
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit

_VALUES = [(1.5, 3), (2.25, 4), (0.1, 7), (-3.5, 2), (1e300, 10), (2.0, 2 ** 53 + 1), (0.5, 5), (3.0, -4)]


def _iadd(x, a, n):
    a += n
    return a * 2


def _item_plus_step(x, a, n):
    total = x.sum().item()  # a break: the resume function adds the step counter to the float
    return total * a + n


_PROGRAMS = {
    "add": lambda x, a, n: a + n,
    "radd": lambda x, a, n: n + a,
    "rsub": lambda x, a, n: n - a,
    "mul": lambda x, a, n: a * n,
    "div": lambda x, a, n: a / n,
    "rdiv": lambda x, a, n: n / a,
    "pow": lambda x, a, n: a ** n,
    "iadd": _iadd,
    "scaled_tensor": lambda x, a, n: x * (a + n),
    "floor": lambda x, a, n: math.floor(a * n),
    "int_of": lambda x, a, n: int(a / n),
    "in_list": lambda x, a, n: [a * n, n, a],
    "item_plus_step": _item_plus_step,
}


def _outcome(fn, *args):
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001 (compared with eager's)
        return "raised", type(e)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan()) and \
            torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or a != a and b != b)


def _run(fn, dynamic, values) -> int:
    framejit.reset()
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, dynamic=dynamic)
    for a, n in values:
        x = torch.arange(5.0)
        want, got = _outcome(fn, x, a, n), _outcome(compiled, x, a, n)
        assert want[0] == got[0] and _same(want[1], got[1]), (a, n, want, got)
    return sum(f["cache"] == "miss" for f in framejit.stats()["frames"][before:])


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_a_dynamic_float_with_a_symbolic_int_compiles_once_per_regime(name, dynamic):
    traces = _run(_PROGRAMS[name], dynamic, _VALUES)
    frames = 2 if name == "item_plus_step" else 1  # the function and its resume function after .item()
    assert traces <= frames * (2 if dynamic is None else 1), traces


@pytest.mark.parametrize("dynamic", [None, True])
def test_division_by_a_symbolic_int_that_becomes_zero_raises_as_eager(dynamic):
    # 0 is a specialised int (never a symbol): the call with n == 0 must still raise eager's ZeroDivisionError
    _run(_PROGRAMS["div"], dynamic, [(1.5, 3), (2.5, 4), (3.5, 0), (4.5, 5)])
