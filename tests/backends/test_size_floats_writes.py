"""Writes of floats of sizes on triton (TRITON_INTERPRET=1, conftest), eager vs framejit over 4 shapes
(NOTE [Floats of sizes as inputs], backends/size_floats.py; reviewer revB findings 3 and 4).

Before: split() ran torch.fx's eliminate_dead_code on the inner graph, which drops in-place methods and
`out=` calls whose results are unused: `y.mul_(x.size(1) / 3)` on a clone returned the clone unchanged,
an input's `x.mul_(...)` was lost, `torch.mul(..., out=o)` left o zero; `y[0] = x.size(1) / 3` stored the
first shape's value at every shape (the float stayed a program constant); and an exception in the prefix
(a ZeroDivisionError of sizes) printed torch.fx's "Call using an FX-traced Module" block to stderr.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same

_SHAPES = [(2, 5), (3, 3), (4, 2), (2, 9)]


def _mul_clone(x):
    y = x.clone()
    y.mul_(x.size(1) / 3)
    return y


def _add_relation(x):
    y = x.clone()
    y.add_(x.size(0) > x.size(1))
    return y


def _fill(x):
    y = torch.zeros_like(x)
    y.fill_(x.size(1) / 3)
    return y


def _copy(x):
    y = torch.empty_like(x)
    y.copy_(x * (x.size(1) / 3))
    return y


def _mutate_input(x):
    x.mul_(x.size(1) / 3)
    return x.sum(1)


def _out(x, o):
    torch.mul(x, x.size(1) / 3, out=o)
    return x + 1


def _setitem(x):
    y = x.clone()
    y[0] = x.size(1) / 3
    return y


def _inputs(fn, shape, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return (x, torch.zeros(*shape)) if fn is _out else (x,)


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("fn", [_mul_clone, _add_relation, _fill, _copy, _mutate_input, _out, _setitem],
                         ids=lambda f: f.__name__.strip("_"))
def test_writes_of_floats_of_sizes_match_eager(fn, dynamic):
    framejit.reset()
    compiled = framejit.compile(fn, backend="triton", dynamic=dynamic)
    for seed, shape in enumerate(_SHAPES):
        eager_args, compiled_args = _inputs(fn, shape, seed), _inputs(fn, shape, seed)
        expected = fn(*eager_args)
        actual = compiled(*compiled_args)
        assert_same(actual, expected)
        for a, e in zip(compiled_args, eager_args):  # the writes to the inputs too
            assert_same(a, e)


def _div_by_size(x):
    return x * (1 / (x.size(0) - 3))


def test_a_zero_division_of_sizes_prints_nothing(capsys):
    framejit.reset()
    compiled = framejit.compile(_div_by_size, backend="triton", dynamic=True)
    for n in (5, 6):
        x = torch.randn(n, 2)
        assert_same(compiled(x), _div_by_size(x))
    capsys.readouterr()
    with pytest.raises(ZeroDivisionError) as eager_error:
        _div_by_size(torch.randn(3, 2))
    with pytest.raises(ZeroDivisionError) as compiled_error:
        compiled(torch.randn(3, 2))
    assert str(compiled_error.value) == str(eager_error.value)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
