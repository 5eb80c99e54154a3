"""Dynamic shapes, issue 13: ints made from a dynamic float (`math.floor(t)`, `int(t)`, `round(t)`,
`math.ceil(t)`, `math.trunc(t)`) are SymInts of the trace's env, guarded by relations on the int, not by the
float's value (NOTE [Ints of dynamic floats] in capture/sym_arith.py). Differential: eager vs compiled over
more values than the recompile limit (8); compile counts asserted (before: one compilation per value until
the limit sent the frame to eager)."""
from __future__ import annotations

import math
import textwrap

import pytest
import torch

import framejit
from tests.helpers import assert_same, run_cache_program

VALUES = [0.3, 0.7, 1.2, 2.5, 3.9, 1.7, 0.9, 2.2, 3.1, 0.1, 5.5, 4.5, -1.5, -0.5]  # 14 values, 9 distinct floors


def _frames(before: int, name: str) -> int:
    return sum(1 for row in framejit.stats()["frames"][before:] if row["function"] == name)


def _int_scale(x, t):
    return x * int(t)


def _round_shift(x, t):
    return x + round(t)


def _floor_scale(x, t):
    return x * math.floor(t) + math.ceil(t)


def _computed(x, t):
    return x * math.floor(t * 2 + 0.5) - math.trunc(t / 3)


def _floor_slice(x, t):
    return x[: math.floor(t)] * t


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("fn", [_int_scale, _round_shift, _floor_scale, _computed], ids=lambda f: f.__name__)
def test_ints_of_a_dynamic_float_compile_twice(fn, backend):
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend=backend)
    for i, t in enumerate(VALUES):
        torch.manual_seed(i)
        x = torch.randn(8)
        assert_same(compiled(x, t), fn(x, t))
    # the first value specialised; then the float is a graph input and its ints symbols (stock: 2)
    assert _frames(before, fn.__qualname__) == 2
    assert framejit.stats()["eager_frames"] == eager
    assert "t ==" not in compiled.entries[0].guard.source.replace("t == 0.3", "")


def test_a_slice_to_the_floor_of_a_float_is_guarded_by_relations():
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(_floor_slice, backend="eager")
    for i, t in enumerate(VALUES):
        x = torch.randn(8)
        assert_same(compiled(x, t), _floor_slice(x, t))
    # static 0.3; then the slice's end: in [0, 8] with a result size 0, 1 or >= 2 (0 and 1 stay specialised,
    # as for sizes), and negative (counted from the end). Stock torch.compile: 4.
    assert _frames(before, _floor_slice.__qualname__) == 5
    assert "math.floor(t) >= 0" in compiled.entries[-2].guard.source


def test_a_value_that_needs_the_int_guards_the_int_not_the_float():
    def fn(x, t):
        for i in range(math.floor(t)):
            x = x + i
        return x

    before = len(framejit.stats()["frames"])
    # fullgraph: the loop unrolls (without it, a loop over a symbolic range runs as Python: NOTE [Loops over
    # symbolic ranges]), so each int needs its own entry, guarded on the int
    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    values = [0.5, 2.25, 2.5, 2.75, 1.1, 1.9, 2.0, 1.0, 3.5, 3.25]  # floors 0 | 2 2 2 | 1 1 | 2 1 | 3 3
    for t in values:
        x = torch.zeros(3)
        assert_same(compiled(x, t), fn(x, t))
    assert _frames(before, "test_a_value_that_needs_the_int_guards_the_int_not_the_float.<locals>.fn") == 4
    assert "math.floor(t) == 3" in compiled.entries[0].guard.source


def test_a_computed_float_is_guarded_as_the_code_computes_it():
    def fn(x, t):
        for _ in range(math.floor((t + 0.1) * 10)):  # (0.7 + 0.1) * 10 == 7.999999999999999, not 8.0
            x = x + 1
        return x

    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, backend="eager", fullgraph=True)  # the loop unrolls: one entry per int
    for t in (0.5, 0.72, 0.75, 0.7, 0.71, 0.69):  # floors 6 | 8 8 | 7 | 8 | 7
        x = torch.zeros(3)
        assert_same(compiled(x, t), fn(x, t))
    # the env's arithmetic would guard 10*t + 1.0 (8.0 for 0.7): the guard recomputes the code's own operations
    assert _frames(before, "test_a_computed_float_is_guarded_as_the_code_computes_it.<locals>.fn") == 3


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_ints_of_floats_that_have_none_raise_as_eager(value):
    seen = []

    def fn(x, t):
        seen.append(t)
        return x[: math.floor(t)] + int(t)

    compiled = framejit.compile(fn, backend="eager")
    for t in (0.5, 1.5, 2.5, value, 3.5):
        x = torch.randn(8)
        results = []
        for run in (compiled, fn):
            seen.clear()
            try:
                results.append((run(x, t), list(seen)))
            except (ValueError, OverflowError) as e:
                results.append((type(e), str(e), len(seen)))
        if isinstance(results[1][0], torch.Tensor):
            assert_same(results[0][0], results[1][0])
        else:
            assert results[0] == results[1]


PROGRAM = textwrap.dedent('''
    import json, math
    import torch
    import framejit

    def f(x, t):
        return x[: math.floor(t)] * int(t * 2)

    compiled = framejit.compile(f, backend="eager")
    ok = True
    for t in (2.5, 3.25, 4.75, 3.5, 2.1):
        x = torch.randn(8)
        ok = ok and torch.equal(compiled(x, t), f(x, t))
    stats = framejit.stats()
    print(json.dumps({"ok": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def test_a_warm_process_serves_new_floats_from_the_symbolic_entry(tmp_path):
    cold = run_cache_program(tmp_path, "float_ints.py", PROGRAM)
    assert cold["ok"] and cold["traced"] == 2  # static 2.5, then symbolic
    warm = run_cache_program(tmp_path, "float_ints.py", PROGRAM)
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] == 2
