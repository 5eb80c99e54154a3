"""Regular expressions folded at trace time (NOTE [Regular expressions on constants] in
capture/library_substitutes.py) only where the result is a value: Pattern.finditer and Pattern.scanner make
stateful iterators and scanners, which folded once were shared by every later call (a second call's
finditer found nothing), and re.DEBUG prints on every eager call."""
from __future__ import annotations

import re

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

_DIGITS = re.compile(r"(\d+)")


def count_matches(x, s):
    return x * len([m.group(1) for m in _DIGITS.finditer(s)])


def scanned(x, s):
    return x * int(_DIGITS.scanner(s).search().group(1))


def module_finditer(x, s):
    return x + sum(int(m.group(0)) for m in re.finditer(r"\d+", s))


def test_stateful_results_are_made_per_call():
    for fn in (count_matches, scanned, module_finditer):
        compiled = framejit.compile(fn, backend="eager")
        for s in ("a1 b22", "a1 b22", "x7 y8 z9", "a1 b22"):
            x = torch.randn(3)
            assert_same(compiled(x, s), fn(x, s))


def test_value_results_still_fold():
    def f(x, name):
        m = _DIGITS.search("layers.12.weight")
        return x * int(m.group(1)) + len(_DIGITS.findall("1 2 3")) + len(re.split(r"\.", "a.b.c"))

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    before = framejit.stats()["eager_frames"]
    for _ in range(3):
        x = torch.randn(2)
        assert_same(compiled(x, "n"), f(x, "n"))
    assert backend.graph_count == 1
    assert framejit.stats()["eager_frames"] == before


def test_debug_flag_prints_on_every_call(capsys):
    def f(x):
        p = re.compile(r"a+b", re.DEBUG)
        return x * len(p.pattern)

    compiled = framejit.compile(f, backend="eager")
    for _ in range(3):
        x = torch.randn(2)
        got = compiled(x)
        got_out = capsys.readouterr().out
        want = f(x)
        want_out = capsys.readouterr().out
        assert_same(got, want)
        assert got_out == want_out and want_out
