"""A function that sets a float16, bfloat16 or float64 default dtype inside itself gives eager's results on every
call, the first (numbers in the graph as constants) and the later ones (dynamic floats) alike (review revB).
- Comparisons of an integer tensor with a Python float compare in that default (`n.to(float16) == s`), and
  the triton lowering compared with the number unrounded: the first call gave other booleans (HIGH; NOTE
  [Operands of comparisons in the promoted dtype] in backends/triton/lowering_pointwise.py).
- `torch.clamp(n, min=s)` is bfloat16 / raises float16's overflow error as eager (onnxrt gave float32, triton
  inf: NOTE [Clamps under a default dtype set inside] in capture/default_dtype_scalars.py).
- `torch.tensor(s)` of a dynamic float, `torch.tensor([size, 1.5])` and an empty `torch.tensor(range(...))` take
  the default in force at the call, not the caller's (NOTE [Default dtype changes])."""
from __future__ import annotations

import logging

import pytest
import torch

import framejit
from framejit import logs

BACKENDS = ["eager", "onnxrt", "triton"]
DTYPES = [torch.float16, torch.bfloat16, torch.float64]


def _outcome(fn, *args):
    try:
        result = fn(*args)
    except Exception as e:  # eager's error is part of the result
        return type(e), str(e)
    return [(t.dtype, t.tolist()) for t in result]


def _differential(fn, backend, calls):
    compiled = framejit.compile(fn, backend=backend)
    for call, args in enumerate(calls):
        want = _outcome(fn, *args)
        assert _outcome(compiled, *args) == want, (call, args)
        assert torch.get_default_dtype() is torch.float32


def inside(dtype, body):
    def fn(*args):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            return body(*args)
        finally:
            torch.set_default_dtype(previous)
    return fn


def _compare(x, s):
    return x == s, x < s, x >= s, s > x, x != s


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_comparisons_with_a_float_on_every_call(backend, dtype):
    """revB dt3.py: x = [2048, 2049, 2050], s = 2049.0 under float16: eager eq [T, T, F] (2049 rounds to 2048),
    triton's first call [F, F, F]; the values overflowing float16 (inf == inf) were False on triton."""
    calls = [(torch.tensor([2048, 2049, 2050]), 2049.0), (torch.tensor([2050, 2051, 2052]), 2051.0),
             (torch.tensor([256, 257, 258], dtype=torch.int32), 257.0),
             (torch.tensor([16777215, 16777216, 16777217, 16777218]), 16777217.0)]
    _differential(inside(dtype, _compare), backend, calls)


def _floats_in_code(x):
    h, b = x.half(), x.bfloat16()
    return h == 2049.0, h < 2049.0, 2049.0 <= h, b < 257.0, b == 257.0, h == 16777217.0, h != 65520.0


def _ints_in_code(x):
    return x.to(torch.int8) == 300, x.to(torch.uint8) < -1, x.to(torch.int8) >= -129


def _float64_in_code(x):
    d = x.double() + 16776960.0  # 256 + 16776960 is 16777216
    return d < 16777217.0, d == 16777217.0, d > 16777216.5, (d - 16776960.0) * 0.5 == 128.5


def _mixed_in_code(x):
    b, h = torch.full((x.shape[0],), 9.0, dtype=torch.bfloat16), torch.full((x.shape[0],), 0.5, dtype=torch.float16)
    return b + x, x - b, b * x, torch.maximum(b, x.bfloat16()), h + x, b + x.float() / 7


def _mixed_divisions(x):
    b = x.bfloat16() * 0 + 9024.0  # 9024 is a bfloat16
    return b / x, x / b, torch.remainder(b, x), torch.remainder(x, b)


@pytest.mark.parametrize("fn", [_floats_in_code, _ints_in_code, _float64_in_code, _mixed_in_code, _mixed_divisions])
def test_triton_compares_in_the_promoted_dtype(fn, caplog):
    """The same without a default dtype: the numbers are constants of the kernel. Floats: every call was wrong;
    ints out of the narrow dtype's range: the kernel raised (`Scalar 300 is out of range for type int8`) and
    the call reran eagerly (logged); eager wraps them (300 is 44 in int8). Float64: Triton 3.8 (Python 3.13)
    compared with the literal rounded to float32 (NOTE [Float64 literals] in backends/triton/codegen.py). Mixed:
    `bfloat16 + int64` tensors added the int64 value unrounded (eager converts 2045 to 2048 first), and divided
    (`int64 / bfloat16`, remainder) the same way."""
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    try:
        base = torch.tensor([2048, 2049, 2050, 256, 257, 258, 44, 65504, 255])
        _differential(fn, "triton", [(base,), (base + 1,), (base * 2,)])
    finally:
        logs.set_logs("")
    assert not [r for r in caplog.records if "eager" in r.name]


def _clamps(x, s):
    return torch.clamp(x, min=s), x.clamp(max=s), torch.clip(x, s, s + 4.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_clamp_with_a_float_bound(backend, dtype):
    """revB dt1.py: under bfloat16 onnxrt's first call returned float32 [16777216, ..., 16777218] for eager's
    bfloat16 [16777216] * 4; under float16 eager raises the overflow of the bound, onnxrt and triton did not."""
    calls = [(torch.arange(4) + 16777215, 16777217.0), (torch.arange(4, dtype=torch.int32) + 2047, 2049.5),
             (torch.arange(4) + 255, 257.0), (torch.arange(4) + 65500, 65519.0)]
    _differential(inside(dtype, _clamps), backend, calls)


def _tensors(x, s):
    return torch.maximum(x, torch.tensor(s)), torch.tensor([x.shape[0], s]), torch.tensor(range(x.shape[0] - 3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_tensors_of_dynamic_numbers(backend, dtype):
    """`torch.tensor(s)` of a dynamic float was float32 from the second call on (1843778), a mixed list and an
    empty range of a symbolic size too."""
    calls = [(torch.arange(n) + 2045, s) for n, s in ((5, 2049.0), (6, 2051.5), (3, 257.0), (7, 2.5))]
    _differential(inside(dtype, _tensors), backend, calls)


def _factories(x, s):
    return torch.arange(s), torch.linspace(0, s, x.shape[0]), torch.full((2,), s) * 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_factories_of_a_float(backend, dtype):
    """triton lowered `torch.arange(s)` and `torch.linspace(0, s, n)` (`dtype=None` in the aten graph) under
    the caller's float32 (NOTE [Default dtype in the lowered graph], now also pinned in triton's to_aten)."""
    calls = [(torch.arange(n) + 2045, s) for n, s in ((3, 9.0), (4, 10.5), (5, 2049.0))]
    _differential(inside(dtype, _factories), backend, calls)
