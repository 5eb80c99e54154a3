"""`out=` into an unfold view on onnxrt (NOTE [Writes through unfold], review revM F5): the write is a keyword
argument of the aten op, and the graph must run eagerly as positional writes into unfold views do; before,
the functional inverse zeroed the elements no window covers."""
from __future__ import annotations

import pytest
import torch

import framejit


def out_kw(t):
    w = t.unfold(0, 2, 2)
    torch.mul(w, 3, out=w)
    return t


def out_of_fresh_view(t):
    torch.add(t.unfold(0, 2, 2), 1, out=t.unfold(0, 2, 2))
    return t * 1


@pytest.mark.parametrize("fn", [out_kw, out_of_fresh_view])
@pytest.mark.parametrize("dynamic", [None, True])
def test_out_into_unfold_view_keeps_uncovered_elements(fn, dynamic):
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for n in (9, 8, 11, 10):
        want_t, got_t = torch.arange(float(n)), torch.arange(float(n))
        want = fn(want_t)
        got = compiled(got_t)
        assert torch.equal(got_t, want_t), (n, got_t, want_t)
        assert torch.equal(got, want)
