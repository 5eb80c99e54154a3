"""A frame reader after a graph break sees eager's locals: no `Unbound` marker, no `___stack` argument.

NOTE [Unbound hidden from eager runs] (resume.py) and NOTE [Frame readers reached by value] (frame_locals.py);
review revG G1. Differential: eager vs framejit.compile over three calls with new values and sizes; what the
reader returns (the sorted names of its caller's locals and the type of `z`) must be eager's.
"""
import builtins
import sys

import torch

import framejit


@framejit.disable
def _opaque(t):
    return t * 1


@framejit.disable
def _peek_disabled():
    f = sys._getframe(1).f_locals
    return sorted(f), type(f.get("z")).__name__


def _peek_traced():
    f = sys._getframe(1).f_locals
    return sorted(f), type(f.get("z")).__name__


_LOCALS = locals  # an alias: the code never names `locals`
_VARS = vars


def _disabled_reader_in_loop(x):
    out = []
    for i in range(3):
        y = _opaque(x + i)
        out.append(_peek_disabled())
        z = y * 2
    return out, z


def _traced_reader_in_loop(x):
    out = []
    for i in range(3):
        y = _opaque(x + i)
        out.append(_peek_traced())
        z = y * 2
    return out, z


def _aliased_locals(x):
    y = _opaque(x + 1)
    names = sorted(_LOCALS())
    z = y * 2
    return names, z


def _builtins_locals_in_loop(x):
    out = []
    for i in range(2):
        y = _opaque(x + i)
        out.append(sorted(builtins.locals()))
        z = y * 2
    return out, z


def _aliased_vars_in_loop(x):
    out = []
    for i in range(3):
        y = _opaque(x + i)
        out.append("z" in _VARS())
        z = y * 2
    return out, z


def _reader_in_a_loop_run_as_python(x, n):
    out = []
    for i in range(n):
        y = _opaque(x + i)
        out.append(_peek_disabled())
        z = y * 2
    return out


def _plain(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.tolist())
    if isinstance(v, (list, tuple)):
        return [_plain(a) for a in v]
    return v


def _check(fn):
    compiled = framejit.compile(fn, backend="eager")
    for n in (2, 3, 4):
        x = torch.arange(float(n)) * n
        assert _plain(compiled(x)) == _plain(fn(x))


def test_reader_in_a_loop_run_as_python():
    # a long loop breaking on every pass runs as Python (NOTE [Loops run as Python]): its frame is a tail function
    compiled = framejit.compile(_reader_in_a_loop_run_as_python, backend="eager")
    for n in (3, 12, 30):
        x = torch.arange(2.0) * n
        assert _plain(compiled(x, n)) == _plain(_reader_in_a_loop_run_as_python(x, n))


def test_disabled_reader_after_a_break_in_a_loop():
    _check(_disabled_reader_in_loop)


def test_traced_reader_after_a_break_in_a_loop():
    _check(_traced_reader_in_loop)


def test_locals_reached_through_an_alias():
    _check(_aliased_locals)


def test_builtins_locals_in_a_loop():
    _check(_builtins_locals_in_loop)


def test_vars_reached_through_an_alias_in_a_loop():
    _check(_aliased_vars_in_loop)
