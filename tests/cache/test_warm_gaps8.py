"""Warm starts of issue 16 for frames that make a nested function on every call (NOTE [Functions made per
call, persisted] in capture/frame_cache.py): a new process with the cold one's FRAMEJIT_CACHE_DIR traces
nothing, and the nested function's code and its cells' contents are guarded as in the cold process (another
closure value, another code: traced again, values right).

Before, every such entry was kept in memory only ("code <code object g> cannot be imported by name",
"function 'f.<locals>.g' cannot be imported by name" on the `cache` log): each warm process traced them all
again.
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

NESTED_MOD = textwrap.dedent('''
    import torch

    def inlined_and_at_a_break(x):
        k = x.shape[0]
        def g(a):
            return a * k + 1
        y = g(x)
        print("break")
        return g(y).sin()

    def lambdas_in_a_comprehension(x):
        scale = 2.0
        fs = [lambda t, i=i: t * i * scale for i in range(2)]
        print("b")
        return sum(fn(x) for fn in fs)

    def over_an_argument(x, n):
        def g(a):
            return a * n + OFFSET
        print("over", n)
        return g(x) + g(x * 2)

    def returned(x):
        t = x + 1
        def get():
            return t * 2
        print("b")
        return get

    OFFSET = 1
''')

PROGRAM = textwrap.dedent('''
    import contextlib, io, json, sys, torch, framejit
    import nested_mod as m
    n = int(sys.argv[1])
    ok = True

    def same(fn, *args):
        global ok
        outs = []
        for run in (fn, framejit.compile(fn, backend="eager")):
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                result = run(*args)
            if callable(result):
                result = result()
            outs.append((result, printed.getvalue()))
        ok = ok and torch.allclose(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]

    for size in (3, 4, 5):
        x = torch.arange(float(size))
        same(m.inlined_and_at_a_break, x)
        same(m.lambdas_in_a_comprehension, x)
        same(m.over_an_argument, x, n)
        same(m.returned, x)
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                      "eager": s["eager_frames"]}))
''')


def test_frames_making_nested_functions_start_warm(tmp_path):
    """Before: warm traced as many frames as cold (every entry kept in memory only)."""
    (tmp_path / "nested_mod.py").write_text(NESTED_MOD)
    cold = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    warm = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    assert cold["ok"] and cold["traced"] > 0 and cold["eager"] == 0, cold
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] >= cold["traced"] - 2 and warm["eager"] == 0, warm


def test_cell_contents_of_a_persisted_closure_are_guarded(tmp_path):
    """A warm process calling with another closure value (n = 3, then a changed module global read by the
    nested function) gets eager's values: the persisted entries for n = 2 do not serve it."""
    (tmp_path / "nested_mod.py").write_text(NESTED_MOD)
    cold = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    other = run_cache_program(tmp_path, "nested.py", PROGRAM, "3")
    assert cold["ok"] and other["ok"], (cold, other)
    assert other["traced"] > 0, other  # over_an_argument with n = 3 is traced anew
    (tmp_path / "nested_mod.py").write_text(NESTED_MOD.replace("OFFSET = 1", "OFFSET = 5"))
    changed = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    assert changed["ok"], changed


def test_a_changed_nested_function_is_not_served_from_the_cache(tmp_path):
    """The nested function's code changed between processes (its body, not the enclosing function's
    other code): its entries are refused (the code's hash), and values follow the new code."""
    (tmp_path / "nested_mod.py").write_text(NESTED_MOD)
    cold = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    (tmp_path / "nested_mod.py").write_text(NESTED_MOD.replace("return t * 2", "return t * 7")
                                            .replace("return a * k + 1", "return a * k + 4"))
    warm = run_cache_program(tmp_path, "nested.py", PROGRAM, "2")
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert warm["traced"] > 0, warm
