"""Training graphs (forward + backward halves, joint.py) under a default dtype the function sets inside:
the halves are aten graphs that AOT autograd traced while `torch.set_default_dtype` ran, so their factories
(`aten.ones([2])`, `aten.arange`, `aten.full`) leave `dtype` unset; onnxrt and triton lowered them again
under the caller's float32 (issue 12/14: float32 results where eager makes float64). Compiled results,
their dtypes, the default dtype after the call and the gradients equal eager's, on fresh values each call
(NOTE [Default dtype in the lowered graph] in backends/state.py)."""
from __future__ import annotations

import logging

import pytest
import torch

import framejit
from framejit import logs
from framejit.backends import joint


@pytest.fixture
def fallback_log(caplog):
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    yield caplog
    logs.set_logs("")


def sets_float64_inside(x):
    torch.set_default_dtype(torch.float64)
    try:
        a = torch.ones(2)
        b = (torch.arange(0.0, 3.0) * x).sum() + torch.zeros(3)
        c = torch.full((3,), 2.5) * x + torch.tensor(1.5)
        return a, b, c, torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)


def promotes_ints_under_float64(x, n):
    torch.set_default_dtype(torch.float64)
    try:
        return x * (n / 3) + torch.where(n > 1, n, 0.5), torch.sqrt(n), n * 1.5
    finally:
        torch.set_default_dtype(torch.float32)


def plain_factories(x):
    return (x * torch.ones(3) + torch.arange(3.0)).sin() * torch.full((3,), 2.0), torch.get_default_dtype()


def _run(fn, args, backward_dtype):
    out = fn(*args)
    torch.set_default_dtype(backward_dtype)  # a backward taken under another default dtype than the call's
    sum(t.sum() for t in out if isinstance(t, torch.Tensor) and t.requires_grad).backward()
    return out


def _check_same(fn, backend, call_dtype, backward_dtype, with_ints=False):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend)
    traced = joint.STATS["traced"]
    try:
        for step in range(3):
            torch.set_default_dtype(call_dtype)
            x = torch.randn(3, dtype=call_dtype, requires_grad=True)
            x_compiled = x.detach().clone().requires_grad_()
            ints = (torch.arange(3) + step,) if with_ints else ()
            expected = _run(fn, (x, *ints), backward_dtype)
            torch.set_default_dtype(call_dtype)
            got = _run(compiled, (x_compiled, *ints), backward_dtype)
            for e, g in zip(expected, got, strict=True):
                if isinstance(e, torch.Tensor):
                    assert (g.dtype, g.requires_grad) == (e.dtype, e.requires_grad), (step, e, g)
                    torch.testing.assert_close(g.detach(), e.detach())
                else:
                    assert g == e
            assert x_compiled.grad.dtype == x.grad.dtype
            torch.testing.assert_close(x_compiled.grad, x.grad)
    finally:
        torch.set_default_dtype(torch.float32)
    assert joint.STATS["traced"] == traced + 1  # the calls ran through one compiled joint, not eagerly


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_default_dtype_set_inside_a_training_graph(backend):
    # before: onnxrt and triton returned float32 for the ones, arange, zeros and full (eager: float64)
    _check_same(sets_float64_inside, backend, torch.float32, torch.float32)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_promotions_of_ints_under_a_default_dtype_set_inside(backend, fallback_log):
    # before: `n / 3`, `torch.where(n > 1, n, 0.5)`, `torch.sqrt(n)`, `n * 1.5` of an int n were float32 on
    # onnxrt and triton (NOTE [Default dtype of promotions in joint halves]); then onnxrt ran the halves
    # eagerly (NOTE [Promotions under a default dtype set inside] in onnxrt/translate.py)
    _check_same(promotes_ints_under_float64, backend, torch.float32, torch.float32, with_ints=True)
    assert not [r.getMessage() for r in fallback_log.records if "eager" in r.getMessage()]


def test_promotions_under_a_default_dtype_set_inside_compile_on_onnxrt(fallback_log):
    # before: correct, but the whole inference graph ran eagerly (InsertTypePromotion asserted float32)
    framejit.reset()
    compiled = framejit.compile(promotes_ints_under_float64, backend="onnxrt")
    for step in range(2):
        x, n = torch.randn(3), torch.arange(3) + step
        for e, g in zip(promotes_ints_under_float64(x, n), compiled(x, n), strict=True):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e)
    assert torch.get_default_dtype() is torch.float32
    assert not [r.getMessage() for r in fallback_log.records if "eager" in r.getMessage()]


def test_default_dtype_of_the_call_and_another_at_backward():
    # the backward half runs (onnxrt recomputes the factories there: NOTE [Recomputation for ORT programs])
    # after the caller went back to float32: it keeps the call's float64
    _check_same(plain_factories, "onnxrt", torch.float64, torch.float32)
