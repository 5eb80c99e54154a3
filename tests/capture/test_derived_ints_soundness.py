"""Python values read from 0-d tensors computed from sizes must be eager's exactly (issue 11, review revE).

NOTE [Ints of tensors computed from sizes] answers `int(t)`, `bool(t)`, `max(a, b)` and slice bounds of
such tensors without a break. A first version (58b2d3e, reverted in bd3c3c7) was wrong where eager's
arithmetic is not Python's: an int64 operand mixed with a float is rounded to the float's type (E1), int64
wraps around (E2), `max(a, b)` returns one of its operands, whose identity the program can test (E3), and a
tensor written in place after a value was derived from it still holds the old value in the derived one (E5);
two programs ran their frame wholly eagerly (E8). Each program here runs eagerly and compiled (eager
backend) over calls with changing sizes; results must be equal exactly (dtype, shape, every value) and no
frame may run wholly eagerly, except where a slice takes a tensor bound that derivation does not answer
(`x[..., :t]` cannot break: the frame runs eagerly, which is right, not fast). Programs are revE's (/tmp/revE/t1, t2, t5b, t18, t19, t21, t27).
"""
from __future__ import annotations

import operator

import pytest
import torch

import framejit

BIG = torch.tensor(16777216)  # 2 ** 24: float32 steps of 2 above it
OV = torch.tensor(1 << 62)
S2, K3 = torch.tensor(2), torch.tensor(3)
M_NEG, B250 = torch.tensor(-10), torch.tensor(250)


def _same(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape and \
            torch.equal(got, want)
    if isinstance(want, (tuple, list)):
        return type(got) is type(want) and len(got) == len(want) and all(map(_same, got, want))
    return type(got) is type(want) and got == want


def _outcome(fn, args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception type is compared
        return ("raises", type(e))


def _check(fn, shapes, dynamic=None, *, no_eager_frame=True) -> None:
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    eager0 = framejit.stats()["eager_frames"]
    for shape in shapes:
        x = torch.ones(shape)
        want, got = _outcome(fn, (x,)), _outcome(compiled, (x.clone(),))
        assert _same(got, want), (shape, got, want)
    if no_eager_frame:
        assert framejit.stats()["eager_frames"] == eager0


# E1: an int64 operand mixed with a float is rounded to the float's type first.
def float_sum_of_divided(x):
    n = x.shape[0] + BIG
    m = (x.shape[1] - torch.tensor(3)) / 1
    return x.sum() * 0 + int((n + m).long())


def float_sum_of_converted(x):
    n = x.shape[0] + BIG
    m = (x.shape[1] - torch.tensor(3)).to(torch.float32)
    return x.sum() * 0 + int((n + m).long())


def branch_on_rounded_float(x):
    n = x.shape[0] + BIG
    m = (x.shape[1] + BIG - 1) / 1
    if n > m:
        return x + 1
    return x - 1


def ceil_of_large_quotient(x):
    n = x.shape[0] + BIG
    return x.sum() * 0 + int(torch.ceil(n / 1).long())


def bfloat16_slice(x):
    n = x.shape[-1] + B250
    k = (n + M_NEG.to(torch.bfloat16)).long()
    return x[..., :k - 240]


def float16_branch(x):
    n = x.shape[-1] + B250
    m = (x.shape[0] + M_NEG).to(torch.float16)
    if n + m > 250:
        return x + 1
    return x - 1


E1_BIG_SHAPES = [(1, 1), (1, 1), (3, 1), (4, 2), (5, 1), (2, 3)]
E1_SMALL_SHAPES = [(1, 5), (1, 7), (1, 9), (1, 11), (1, 7), (2, 6)]


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [float_sum_of_divided, float_sum_of_converted, branch_on_rounded_float,
                                ceil_of_large_quotient])
def test_int64_operands_of_float32_are_rounded(fn, dynamic):
    _check(fn, E1_BIG_SHAPES, dynamic)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [bfloat16_slice, float16_branch])
def test_half_precision_rounding_of_small_sizes(fn, dynamic):
    _check(fn, E1_SMALL_SHAPES, dynamic, no_eager_frame=fn is not bfloat16_slice)


# E2: int64 wraps around.
def wrapped_product_branch(x):
    t = OV * x.shape[0]
    if t == 0:
        return x + 1
    return x - 1


def wrapped_product_int(x):
    t = OV * x.shape[0]
    return x.sum() * 0 + int(t)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [wrapped_product_branch, wrapped_product_int])
def test_int64_wraps_around(fn, dynamic):
    _check(fn, [(1, 1), (1, 1), (3, 1), (4, 2), (5, 1), (8, 1)], dynamic)


# E3: max()/min() return one of their operands.
def max_is_first(x):
    length = x.shape[-1]
    a, b = length % S2, length % K3
    m = max(a, b)
    return x * (2 if m is a else 3)


def max_is_second(x):
    length = x.shape[-1]
    a, b = length % S2, length % K3
    m = max(a, b)
    return x * (2 if m is b else 3)


def min_of_max(x):
    length = x.shape[-1]
    a, b = length % S2, length % K3
    m = max(a, b)
    m2 = min(m, b)
    return x * (10 if m2 is b else 1) + (5 if m is m2 else 0)


def max_identity_by_operator(x):
    length = x.shape[-1]
    a, b = length % K3, length % S2
    m = max(a, b)
    return x * (2 if operator.is_(m, a) else 3) + (5 if m is not b else 7)


IDENTITY_SHAPES = [(1, n) for n in (4, 5, 6, 7, 8, 9, 11, 3)]


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [max_is_first, max_is_second, min_of_max, max_identity_by_operator])
def test_identity_of_an_extremum(fn, dynamic):
    _check(fn, IDENTITY_SHAPES, dynamic)


# E5: a tensor written in place after a value was derived from it.
def _written_after(write):
    def f(x):
        c = torch.tensor(1)
        n = x.shape[-1] - c
        write(c)
        return x[..., :n], int(n)
    return f


WRITES = {
    "add_": lambda c: c.add_(1),
    "fill_": lambda c: c.fill_(5),
    "iadd": lambda c: c.__iadd__(4),
    "setitem": lambda c: c.__setitem__(..., 5),
    "copy_": lambda c: c.copy_(torch.tensor(5)),
    "out": lambda c: torch.add(c, 4, out=c),
    "mul_": lambda c: c.mul_(5),
    "zero_": lambda c: c.zero_(),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_derived_value_is_not_changed_by_a_later_write(write, dynamic):
    _check(_written_after(WRITES[write]), [(1, n) for n in (5, 6, 7, 4, 9)], dynamic, no_eager_frame=False)


def branch_after_fill(x):
    c = torch.tensor(1)
    n = x.shape[-1] - c
    c.fill_(5)
    if n > 3:
        return x + 1
    return x - 1


def buffer_written_before(x):
    c = torch.tensor(1)
    c.add_(2)
    n = x.shape[-1] - c
    return x[..., :n]


@pytest.mark.parametrize("fn", [branch_after_fill, buffer_written_before])
def test_writes_and_branches(fn):
    _check(fn, [(1, n) for n in (5, 6, 7, 4, 9, 3)], no_eager_frame=fn is branch_after_fill)


# E8: derived booleans compared or used as a divisor (they ran the frame wholly eagerly).
def bool_divisor(x):
    length = x.shape[-1] + torch.tensor(0)
    n = torch.ceil(length / (length > 3)).long()
    return x.sum() * 0 + int(n)


def bools_compared(x):
    length = x.shape[-1] + torch.tensor(0)
    b = (length % 2 == 0)
    return x * (10 if b == (length > 4) else 20)


def bool_products(x):
    length = x.shape[-1] + torch.tensor(0)
    n = (length > 3) * length + (length <= 3) * 7
    return x[..., :n]


def negative_floor(x):
    length = x.shape[-1] + torch.tensor(0)
    n = torch.floor(-length / K3 - 1).long()
    return x.sum() * 0 + int(n)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [bool_divisor, bools_compared, bool_products, negative_floor])
def test_derived_booleans(fn, dynamic):
    _check(fn, [(1, n) for n in (5, 6, 2, 3, 8, 4)], dynamic, no_eager_frame=fn is not bool_products)
