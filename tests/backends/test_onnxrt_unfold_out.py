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


def out_over_its_source(t):
    torch.add(t[:-1], 1, out=t[1:])
    return t


def out_is_its_source(t):
    torch.mul(t[1:], 2, out=t[1:])
    return t


@pytest.mark.parametrize("fn", [out_over_its_source, out_is_its_source])
@pytest.mark.parametrize("dynamic", [None, False])
def test_out_sharing_memory_with_a_source_as_eager(fn, dynamic):
    """Review revM F6: eager raises for an out= tensor that partially overlaps a source and leaves t as it was
    (NOTE [Writes over their own reads]); onnxrt returned normally and changed t. The same view is allowed."""
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for n in (3, 4, 3, 5):
        want_t, got_t = torch.arange(float(n * n)).view(n, n), torch.arange(float(n * n)).view(n, n)
        try:
            want = ("ok", fn(want_t).clone())
        except RuntimeError as e:
            want = ("raised", str(e).split("\n")[0])
        try:
            got = ("ok", compiled(got_t).clone())
        except RuntimeError as e:
            got = ("raised", str(e).split("\n")[0])
        assert got[0] == want[0] and (got[0] == "raised" and got[1] == want[1] or torch.equal(got[1], want[1]))
        assert torch.equal(got_t, want_t)


def max_into_a_row(t):
    v, i = t[0], torch.zeros(t.shape[1], dtype=torch.long)
    torch.max(t, 0, out=(v, i))
    return t, i


@pytest.mark.parametrize("dynamic", [None, False])
def test_tuple_out_sharing_memory_with_a_source_as_eager(dynamic):
    """Review revM F10: `out=(v, i)` with v a row of the source: eager raises, onnxrt wrote t."""
    compiled = framejit.compile(max_into_a_row, backend="onnxrt", dynamic=dynamic)
    for n in (3, 4, 3, 5):
        want_t, got_t = torch.arange(float(n * n)).view(n, n), torch.arange(float(n * n)).view(n, n)
        outcomes = []
        for fn, t in ((max_into_a_row, want_t), (compiled, got_t)):
            try:
                outcomes.append(("ok", [r.clone() for r in fn(t)]))
            except RuntimeError as e:
                outcomes.append(("raised", str(e).split("\n")[0]))
        (kind_e, want), (kind_c, got) = outcomes
        assert kind_c == kind_e and (kind_e == "raised" and got == want or all(map(torch.equal, got, want)))
        assert torch.equal(got_t, want_t)


def overlapping_rows(t):
    t.as_strided((t.shape[0] - 1, 2), (1, 1)).mul_(2)
    return t


def plain_writes(t):
    t[:, 0].mul_(2)
    t.T.add_(1)
    t.view(-1)[::2].add_(3)
    return t.sum()


@pytest.mark.parametrize("fn", [overlapping_rows, plain_writes])
@pytest.mark.parametrize("dynamic", [None, True])
def test_writes_into_views_with_symbolic_layouts_as_eager(fn, dynamic):
    """Review revM F7: with a symbolic size, a view whose own elements share memory was taken as not
    overlapping (eager writes a shared element once per index, the functional graph once); plain_writes are
    views the shape environment proves apart."""
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for n in (4, 5, 6):
        want_t, got_t = torch.arange(float(n * n)).view(n, n), torch.arange(float(n * n)).view(n, n)
        assert torch.equal(compiled(got_t), fn(want_t))
        assert torch.equal(got_t, want_t)
