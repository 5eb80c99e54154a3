"""Closures of one code over aliased cells never take another object's entry with the frame cache on (review
revG G5; NOTE [Aliased root cells persisted] in capture/closure_cells.py).

Function objects of one code alternate between two distinct cells and one cell for both variables; the
function writes one variable and returns the other, called at a graph break inside a comprehension and
directly. Differential: eager vs framejit over four calls with new values, frame cache on (a fresh folder).
"""
import types

import torch

import framejit


@framejit.disable
def _opaque(t):
    return t * 1


def _factory():
    t = None
    u = None

    def w(a):
        nonlocal t
        t = a * 2
        return u
    return w


_PROTO = _factory()


def _in_comprehension(x, fn):
    return [fn(_opaque(x + i)) for i in range(2)]


def _direct(x, fn):
    y = _opaque(x)
    return fn(y), fn(y + 1)


def _args(i):
    x = torch.ones(2) * (i + 1)
    if i % 2 == 0:
        cells = (types.CellType(x * 10), types.CellType(x * 100))
    else:
        cell = types.CellType(x * 10)
        cells = (cell, cell)
    return x, types.FunctionType(_PROTO.__code__, _PROTO.__globals__, "w", None, cells)


def _check(fn, monkeypatch, tmp_path):
    monkeypatch.setattr(framejit.config, "cache_enabled", True)
    monkeypatch.setattr(framejit.config, "cache_dir", str(tmp_path))
    compiled = framejit.compile(fn, backend="eager")
    for i in range(4):
        want = fn(*_args(i))
        got = compiled(*_args(i))
        assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want)), (i, got, want)


def test_aliased_cells_in_a_comprehension_with_the_cache(monkeypatch, tmp_path):
    _check(_in_comprehension, monkeypatch, tmp_path)


def test_aliased_cells_after_a_break_with_the_cache(monkeypatch, tmp_path):
    _check(_direct, monkeypatch, tmp_path)
