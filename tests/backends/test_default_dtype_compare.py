"""Comparisons of an integer tensor with a Python float under a default dtype the function sets inside compare in
that default, as eager does (NOTE [Comparisons under a default dtype set inside] in capture/default_dtype_compare.py):
`n == 16777216.0` with n = 16777217 is False in float64 and True in float32. onnxrt and triton lowered the graph
under the caller's default and compared in it (hfixD's known gap). Eager vs compiled on fresh values each call,
the compared float changing between calls, inference and training graphs."""
from __future__ import annotations

import pytest
import torch

import framejit

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
