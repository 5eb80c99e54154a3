"""A computed float rebuilt in Python (NOTE [Computed floats rebuilt in Python]) whose operations raise for a
later value: the call reruns eagerly, so the user's own code raises and handles it (NOTE [Rebuilt floats that
raise], hhuntG4 HIGH-1).

Before, the float was preloaded at the top of the transformed function, before the frame's effects and
outside the user's try: `try: r = 1.0 / v except ZeroDivisionError: r = 0.0` raised ZeroDivisionError to the
caller at v = 0.0, and a store made before the division (`d["k"] = v`) was lost.
"""
from __future__ import annotations

import math
import textwrap

import pytest
import torch

import framejit
from tests.helpers import assert_same, run_cache_program


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return (type(e), str(e))


def _differential(fn, calls, fresh):
    """Runs `fn` eagerly and compiled on each call's arguments, each with its own `fresh()` state; compares
    the results (or exceptions) and the states after the call."""
    compiled = framejit.compile(fn, backend="eager")
    for args in calls:
        eager_state, state = fresh(), fresh()
        expected = _outcome(fn, torch.ones(2), *args, eager_state)
        actual = _outcome(compiled, torch.ones(2), *args, state)
        assert_same(actual, expected)
        assert state == eager_state, (args, state, eager_state)


def _safe_division(x, v):
    try:
        r = 1.0 / v
    except ZeroDivisionError:
        r = 0.0
    return x, r


def test_safe_division_idiom_takes_its_except_and_does_not_recompile_per_call():
    framejit.reset()
    graphs = framejit.stats()["graphs"]  # a process-wide count: earlier tests' graphs are in it
    compiled = framejit.compile(_safe_division, backend="eager")
    traced = []
    for call in range(8):
        v = 0.0 if call % 2 else 2.0 + call
        x = torch.randn(2)
        assert_same(compiled(x, v), _safe_division(x, v))
        traced.append(framejit.stats()["frames_traced"])
    assert traced[-1] == traced[3], traced  # a raising value reruns that call eagerly; the entries stay
    assert framejit.stats()["graphs"] == graphs  # nothing captured anew: the float is still rebuilt in Python


def _store_then_divide(x, v, d):
    try:
        d["k"] = v
        return x, 1.0 / v
    except ZeroDivisionError:
        return "caught", dict(d)


def _ops(x, v, d):
    try:
        d.append(v)
        return x, math.log(v), 2.5 % v, math.sqrt(v - 0.5), math.exp(v * 100.0), (v * 1e150) ** 2
    except (ZeroDivisionError, ValueError, OverflowError) as e:
        d.append(type(e).__name__)
        return "caught", list(d)


def _int_divisor(x, a, n, d):
    try:
        d.append(n)
        return x, a / n
    except ZeroDivisionError:
        return "caught", list(d)


def test_stores_before_a_raising_float_are_made_and_its_except_runs():
    _differential(_store_then_divide, [(2.0,), (4.0,), (0.0,), (8.0,), (0.0,)], dict)
    # log of 0.0, float modulo by 0.0, sqrt of a negative, exp and ** overflowing, in the middle of good values
    _differential(_ops, [(2.0,), (3.0,), (0.0,), (4.0,), (0.25,), (5.0,), (9.0,), (2.5,)], list)
    _differential(_int_divisor, [(2.0, 3), (4.0, 5), (3.0, 0), (5.0, 1)], list)


def _uncaught(x, v, d):
    d["k"] = v
    return x, 1.0 / v


def test_an_uncaught_raise_comes_from_the_users_line_after_its_effects():
    _differential(_uncaught, [(2.0,), (4.0,), (0.0,), (8.0,)], dict)
    compiled = framejit.compile(_uncaught, backend="eager")
    with pytest.raises(ZeroDivisionError) as info:
        compiled(torch.ones(1), 0.0, {})
    last = info.traceback[-1]
    assert last.name == "_uncaught" and "1.0 / v" in str(last.statement)


def _print_in_try(x, v, d):
    try:
        d["k"] = v
        y = 1.0 / v
        print("y", y)  # a break: the float is rebuilt by the break's code
        return x + y
    except ZeroDivisionError:
        return "caught", dict(d)


def _append_in_try(x, v, o):
    try:
        o.append(1.0 / v)
    except ZeroDivisionError:
        o.append("zde")
    return x, list(o)


def test_a_float_rebuilt_at_a_break_or_appended_raises_in_the_try(capsys):
    for fn, fresh in ((_print_in_try, dict), (_append_in_try, list)):
        compiled = framejit.compile(fn, backend="eager")
        for v in (2.0, 4.0, 0.0, 8.0, 0.0):
            eager_state, state = fresh(), fresh()
            expected = _outcome(fn, torch.ones(2), v, eager_state)
            eager_out = capsys.readouterr().out
            assert_same(_outcome(compiled, torch.ones(2), v, state), expected)
            assert state == eager_state and capsys.readouterr().out == eager_out


class _Opt:
    lr = 1.0


G = {"lr": 1.0}


def _scheduler(x, o, d):
    G["lr2"] = G["lr"] * 0.5
    try:
        return x, math.sqrt(G["lr"] - 0.5), math.log(o.lr)
    except ValueError:
        d["caught"] = G["lr2"]
        return "caught", G["lr2"]


def _from_str(x, s, d):
    try:
        d["s"] = s
        return x, 1.0 / float(s)
    except ZeroDivisionError:
        return "caught", s


def test_floats_of_globals_attributes_and_strings():
    compiled = framejit.compile(_scheduler, backend="eager")
    for lr, olr in ((1.0, 2.0), (2.0, 3.0), (0.25, 4.0), (3.0, 5.0), (4.0, 0.0), (5.0, 6.0)):
        results = []
        for fn in (_scheduler, compiled):
            G.clear()
            G["lr"], _Opt.lr, d = lr, olr, {}
            results.append((_outcome(fn, torch.ones(2), _Opt, d), dict(G), d))
        assert_same(results[1], results[0])
    _differential(_from_str, [("2.0",), ("4.0",), ("0",), ("8",), ("-0.0",)], dict)


class _Box:
    lr = 1.0


def _class_store_then_divide(x, v, d):
    _Box.lr = v * 2  # a break (the class's __setattr__): the rest is a resume function, called handing its arguments
    try:
        return x, 1.0 / _Box.lr
    except ZeroDivisionError:
        return "caught", _Box.lr


def test_a_resume_function_called_with_its_arguments_handed_over_reruns():
    _differential(_class_store_then_divide, [(2.5,), (4.5,), (0.0,), (1.0,), (0.0,)], dict)


_WARM = textwrap.dedent('''
    import json, sys, torch, framejit
    def f(x, v, d):
        try:
            d["k"] = v
            return x, 1.0 / v
        except ZeroDivisionError:
            return "caught", dict(d)
    def run(fn, v):
        d = {}
        try:
            r = fn(torch.ones(1), v, d)
        except Exception as e:
            r = type(e).__name__
        return [r if isinstance(r, str) else [repr(i) for i in r], d]
    cf = framejit.compile(f, backend="eager")
    values = [2.0, 4.0, 6.0] if sys.argv[1] == "cold" else [0.0, 8.0, 0.0]
    same = [run(f, v) == run(cf, v) for v in values]
    s = framejit.stats()
    print(json.dumps({"same": same, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


def test_a_warm_process_reruns_a_loaded_entry_whose_float_raises(tmp_path):
    cold = run_cache_program(tmp_path, "warm.py", _WARM, "cold")
    warm = run_cache_program(tmp_path, "warm.py", _WARM, "warm")
    assert all(cold["same"]) and cold["traced"] >= 2, cold
    assert all(warm["same"]) and warm["traced"] == 0 and warm["loaded"] >= 1, warm
