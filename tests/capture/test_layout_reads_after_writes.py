"""NOTE [Layout reads after writes] in capture/graph_calls.py: a function writes an argument whose stride is
symbolic (rows `x[:, t]` of growing sequences, whose stride alone changes; rows of a tensor whose sizes
change) in place or with out=, then reads its stride. The graph read the stride as a node after the write,
and the triton backend, whose functional write has a contiguous layout, answered 4 for every call where
eager's stride is 12, 16, ...; it went into values (`o * o.stride(0)`) and shapes (`o.new_zeros(...)`).
Each program is compared with eager over several calls on the eager, onnxrt and triton backends."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same, reset_with_triton_interpreted

BACKENDS = ["eager", "onnxrt", "triton"]


_reset = pytest.fixture(autouse=True)(reset_with_triton_interpreted)


def _row(n: int, m: int = 2):
    return torch.randn(m, n, 4)[:, 1]


def _compare(fn, makers: list, backend: str) -> None:
    compiled = framejit.compile(fn, backend=backend)
    for make in makers:
        torch.manual_seed(0)
        want_args = make()
        torch.manual_seed(0)
        got_args = make()
        want, got = fn(*want_args), compiled(*got_args)
        assert_same(got, want)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            if isinstance(w, torch.Tensor):
                assert g.stride() == w.stride()
        for w, g in zip(want_args, got_args):  # written in place: the row and its base
            assert_same(g, w)
            assert_same(g._base, w._base)


def _mul_by_stride(o):
    o.mul_(2)
    return o * o.stride(0), o.stride()


def _shape_from_stride(o):
    o.add_(1)
    return o.new_zeros(o.stride(0)), o.storage_offset()


def _views_after_write(o):
    o.mul_(2)
    return o.t().stride(), o[:, ::2].stride(), o.view(2, 2, 2).stride(), o.t()


def _out_then_stride(x, o):
    r = torch.add(x, 1, out=o)
    return o.stride(), r.stride()[0] + 0, r * 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_mul_by_stride, _shape_from_stride, _views_after_write])
def test_stride_read_after_in_place_write_is_eagers(fn, backend):
    _compare(fn, [lambda n=n: (_row(n),) for n in range(3, 9)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stride_read_after_out_write_is_eagers(backend):
    _compare(_out_then_stride, [lambda n=n: (torch.randn(2, 4), _row(n)) for n in range(3, 9)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_whose_sizes_also_change(backend):  # the stride symbolic through the size marking
    _compare(_mul_by_stride, [lambda n=n: (_row(n, m=n),) for n in range(3, 9)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stride_read_before_the_write_stays_in_one_graph(backend):
    def fn(o):
        s = o.stride(0)
        o.mul_(2)
        return o * s
    before = framejit.stats()["eager_frames"]  # process-wide: what earlier tests left counts too
    _compare(fn, [lambda n=n: (_row(n),) for n in range(3, 9)], backend)
    assert framejit.stats()["eager_frames"] == before
