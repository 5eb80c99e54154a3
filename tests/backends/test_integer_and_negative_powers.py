"""Powers whose values depend on the exponent being an integer, eager vs the triton and onnxrt backends.

triton: an integer exponent beyond 8 (a constant, or a size expression the size-generic module fits)
was exp2(n * log2(x)), NaN for every negative base (NOTE [Integer powers of negative floats]).
onnxrt: integer pow ran as ORT's Pow, a double pow cast back: INT_MIN for 0 ** -2 and on overflow
(NOTE [Integer powers in torch]); it now runs in torch.
"""
import math

import pytest
import torch

import framejit

BASES = [-3.0, -2.0, -1.5, -1.0, -0.7, -0.0, 0.0, 0.7, 1.0, 1.5, 2.0, 3.0, math.inf, -math.inf, math.nan]


def _floats(shape, dtype, shift=0.0):
    n = shape[0] * shape[1]
    values = (BASES * (n // len(BASES) + 1))[:n]
    return (torch.tensor(values, dtype=dtype) + shift).reshape(shape)


def _close(expected, got, dtype):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    rtol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.equal(expected.isnan(), got.isnan()), (expected, got)
    assert torch.equal(expected.isinf() & (expected > 0), got.isinf() & (got > 0)), (expected, got)
    torch.testing.assert_close(got, expected, rtol=rtol, atol=0, equal_nan=True)


def size_exponent(x):
    return x ** (x.size(1) - 6)


def constant_exponents(x):
    return x ** 9, x ** -11, x ** 12, x ** 2.5, x.pow(-13) * 2


@pytest.mark.parametrize("dynamic", [None, True])
def test_triton_size_exponent_of_negative_bases(dynamic):
    framejit.reset()
    compiled = framejit.compile(size_exponent, backend="triton", dynamic=dynamic)
    for shape in [(4, 5), (3, 6), (2, 7), (2, 17), (3, 2), (2, 15)]:
        x = _floats(shape, torch.float32)
        _close(size_exponent(x), compiled(x), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_triton_constant_integer_exponents_of_negative_bases(dtype):
    framejit.reset()
    compiled = framejit.compile(constant_exponents, backend="triton")
    for shape, shift in [((3, 5), 0.0), ((2, 8), 0.0), ((3, 5), -0.25)]:
        x = _floats(shape, dtype, shift)
        for expected, got in zip(constant_exponents(x), compiled(x)):
            _close(expected, got, dtype)


def tensor_exponent(x, e):
    return x ** e + 0


def scalar_exponent(x):
    return x ** 41 - x.pow(3)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_onnxrt_integer_powers_follow_eager(dtype, dynamic):
    framejit.reset()
    compiled = framejit.compile(tensor_exponent, backend="onnxrt", dynamic=dynamic)
    bases = torch.tensor([0, 0, 1, -1, -1, 2, -2, 3, 7, -3, 5, 0], dtype=dtype)
    exponents = torch.tensor([-2, -1, -5, -3, -4, -1, -2, 41, 25, 41, 20, 0], dtype=dtype)
    for n in (12, 8):  # two shapes
        expected = tensor_exponent(bases[:n].repeat(2, 1), exponents[:n].repeat(2, 1))
        got = compiled(bases[:n].repeat(2, 1), exponents[:n].repeat(2, 1))
        assert got.dtype == expected.dtype and torch.equal(got, expected), (expected, got)
    compiled = framejit.compile(scalar_exponent, backend="onnxrt", dynamic=dynamic)
    for n in (12, 7):
        x = bases[:n] * 3 + 1
        assert torch.equal(compiled(x), scalar_exponent(x))


def negative_number_bases(e):
    b = -3.0
    b **= e
    return (-2.0) ** e + (-2) ** e.size(0) + b


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_negative_number_base_is_not_negated(backend):
    # fx printed `(-2.0) ** e` as `-2.0 ** e`, i.e. -(2.0 ** e) (NOTE [Powers of negative numbers in graph code])
    framejit.reset()
    compiled = framejit.compile(negative_number_bases, backend=backend)
    for e in (torch.tensor([10.0, -2.0, 2.5, 3.0]), torch.tensor([1.0, 9.0, 0.5])):
        _close(negative_number_bases(e), compiled(e), torch.float32)
