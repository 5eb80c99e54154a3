"""Comparisons and arithmetic of an integer tensor with a Python float under a default dtype the function sets
inside compute in that default, as eager does (NOTE [Comparisons under a default dtype set inside] in
capture/default_dtype_scalars.py): `n == 16777216.0` with n = 16777217 is False in float64 and True in float32, and
`n * 0.5` is float16 under a float16 default. onnxrt and triton lowered the graph under the caller's default and
computed in it (hfixD's known gap, review revZ MED-3). Eager vs compiled on fresh values each call, the compared
float changing between calls, inference and training graphs."""
from __future__ import annotations

import logging

import pytest
import torch

import framejit
from framejit import logs

BIG = 16777217  # the first int float32 cannot hold: it rounds to 16777216.0


def float64_inside(n, v, x):
    torch.set_default_dtype(torch.float64)
    try:
        flags = (n == 16777216.0, 16777216.0 == n, torch.eq(n, 16777216.0), n.gt(16777216.5), n <= v,
                 n.ne(16777216.0), (n > 0.5) & (n < v))
        return flags, (x * 2).sum()
    finally:
        torch.set_default_dtype(torch.float32)


def float32_inside(n, v, x):
    torch.set_default_dtype(torch.float32)
    try:
        return (n == 16777216.0, n > v, torch.lt(n, v)), (x * 3).sum()
    finally:
        torch.set_default_dtype(torch.float64)


def _compare(fn, backend, outer, requires_grad):
    compiled = framejit.compile(fn, backend=backend)
    previous = torch.get_default_dtype()
    try:
        for call, v in enumerate((16777216.0, 16777216.5, 3.0)):
            torch.set_default_dtype(outer)
            n = torch.tensor([BIG, 3 + call, BIG - call])
            runs = []
            for run in (fn, compiled):
                x = torch.ones(2 + call, dtype=outer, requires_grad=requires_grad)
                flags, loss = run(n, v, x)
                if requires_grad:
                    loss.backward()
                runs.append(([f.tolist() for f in flags], loss.item(), torch.get_default_dtype()))
            assert runs[1] == runs[0], (call, runs[1], runs[0])
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_comparisons_under_float64_set_inside(backend, requires_grad):
    _compare(float64_inside, backend, torch.float32, requires_grad)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_comparisons_under_float32_set_inside_a_float64_caller(backend):
    _compare(float32_inside, backend, torch.float64, False)


def reduced_inside(dtype):
    def fn(x, n):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        o = torch.ones(3) * 1.5 + torch.arange(3.0) + n * 0.5
        results = (o, n / 3, torch.sqrt(n), n ** 0.5, torch.where(n > 1, n, 0.5), 2.0 ** n)
        loss = (x * o.float()).sum()
        torch.set_default_dtype(previous)
        return results, loss
    return fn


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_reduced_precision_default_set_inside(backend, dtype, requires_grad):
    """review revZ MED-3: onnxrt returned `n * 0.5` (and `n / 3`, `torch.sqrt(n)`) as float32 where eager gives
    float16 / bfloat16."""
    fn = reduced_inside(dtype)
    compiled = framejit.compile(fn, backend=backend)
    for call in range(3):
        n, x0 = torch.arange(3) + call, torch.randn(3)
        runs = []
        for run in (fn, compiled):
            x = x0.clone().requires_grad_(requires_grad)
            results, loss = run(x, n)
            if requires_grad:
                loss.backward()
            runs.append(([(r.dtype, r.double().tolist()) for r in results], loss.item(), x, x.grad))
        assert runs[1][0] == runs[0][0], (call, runs[1][0], runs[0][0])
        assert runs[1][1] == pytest.approx(runs[0][1])
        if requires_grad:
            assert torch.allclose(runs[1][3], runs[0][3])
        assert torch.get_default_dtype() is torch.float32


def test_triton_compiles_constants_cast_for_a_float16_default(caplog):
    """NOTE [Casts of literals] (backends/triton/codegen.py): `torch.ones(3) * 1.5` under a float16 default set
    inside computes the constant 1 in float32; the kernel read `1.to(tl.float32)`, did not import, and the graph
    ran eagerly (logged). It compiles now and gives eager's values and dtype."""
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    try:
        fn = reduced_inside(torch.float16)
        compiled = framejit.compile(fn, backend="triton")
        for call in range(2):
            n, x = torch.arange(3) + call, torch.randn(3)
            want, got = fn(x, n)[0], compiled(x, n)[0]
            assert [(t.dtype, t.tolist()) for t in got] == [(t.dtype, t.tolist()) for t in want]
    finally:
        logs.set_logs("")
    assert not [r for r in caplog.records if "compiling failed" in r.getMessage()]
