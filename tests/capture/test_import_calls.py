"""Calls into Python's import machinery inside a compiled function (issue 11, h11imp).

NOTE [Import machinery at breaks] (capture/import_calls.py): `importlib.import_module`, `importlib.util.find_spec`,
`importlib.reload`, `importlib.metadata.version`, `pkgutil` run as plain Python at a graph break, never traced as
user frames and never compiled as frames of their own through a hook. Before, `import_module("mod")` traced 72
frames cold (2 of them run eagerly) and 29 again in a warm process.

Each program runs in a fresh process (the module must not be imported yet), twice with one cache folder: cold,
then warm (tests/helpers.run_cache_program). Values are compared with what eager computes with the imported
module; the module's top-level code records each execution, so an import run twice (or not at all) shows.
"""
from __future__ import annotations

import textwrap

import torch

import framejit
from tests.helpers import run_cache_program

IMPORTED_MOD = textwrap.dedent('''
    import builtins
    builtins.__dict__.setdefault("h11imp_runs", []).append(__name__)
    def h(x):
        return x * 2 + 1
''')

PROGRAM = textwrap.dedent('''
    import builtins, importlib, importlib.util, importlib.metadata, json, sys, torch, framejit
    case = sys.argv[1]

    def by_import_module(x):
        m = importlib.import_module("imp_target")
        return m.h(x) + 1

    def load(name):
        return importlib.import_module(name)

    def through_a_helper(x):
        y = x.sin()
        return load("imp_target").h(y) - 1

    def under_no_grad(x):
        with torch.no_grad():
            m = importlib.import_module("imp_target")
            return m.h(x) * x

    def by_find_spec(x):
        spec = importlib.util.find_spec("imp_target")
        return x + (1 if spec is not None else 2)

    def by_version(x):
        v = importlib.metadata.version("torch")
        return x + len(v.split("."))

    def by_import_statement(x):
        import imp_target
        return imp_target.h(x) + 2

    def no_grad(thunk):
        with torch.no_grad():
            return thunk()

    def expected(x):
        m = sys.modules.get("imp_target")
        return {"by_import_module": lambda: m.h(x) + 1, "through_a_helper": lambda: m.h(x.sin()) - 1,
                "under_no_grad": lambda: no_grad(lambda: m.h(x) * x), "by_find_spec": lambda: x + 1,
                "by_version": lambda: x + len(importlib.metadata.version("torch").split(".")),
                "by_import_statement": lambda: m.h(x) + 2}[case]()

    fn = globals()[case]
    cf = framejit.compile(fn, backend="eager")
    s0 = dict(framejit.stats())
    imported_before = "imp_target" in sys.modules
    ok = True
    for n in (3, 4, 5):
        x = torch.randn(n, requires_grad=(case == "under_no_grad"))
        out = cf(x)
        ok = ok and torch.allclose(out, expected(x)) and out.requires_grad == expected(x).requires_grad
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"] - s0["frames_traced"],
                      "graphs": s["graphs"] - s0["graphs"], "eager": s["eager_frames"] - s0["eager_frames"],
                      "imported_before": imported_before, "imported": "imp_target" in sys.modules,
                      "runs": getattr(builtins, "h11imp_runs", [])}))
''')

IMPORTING = ("by_import_module", "through_a_helper", "under_no_grad", "by_import_statement")


def _cold_and_warm(tmp_path, case: str) -> tuple[dict, dict]:
    (tmp_path / "imp_target.py").write_text(IMPORTED_MOD)
    cold = run_cache_program(tmp_path, "prog.py", PROGRAM, case)
    warm = run_cache_program(tmp_path, "prog.py", PROGRAM, case)
    return cold, warm


def _check(case: str, cold: dict, warm: dict, most_traced: int = 4) -> None:
    for run in (cold, warm):
        assert run["ok"] and run["eager"] == 0, (case, cold, warm)
        assert not run["imported_before"], (case, cold, warm)
        if case in IMPORTING:  # imported once, by the call, as eager does
            assert run["imported"] and run["runs"] == ["imp_target"], (case, cold, warm)
        else:
            assert not run["imported"] and run["runs"] == [], (case, cold, warm)
    # the user's frame, its resume function and one recompile for the new size; nothing of importlib
    assert cold["traced"] <= most_traced and cold["graphs"] >= 1, (case, cold, warm)
    assert warm["traced"] == 0, (case, cold, warm)


def test_import_module_runs_at_a_break_cold_and_warm(tmp_path):
    """Before: 72 frames traced cold (2 eager frames), 29 traced again warm."""
    _check("by_import_module", *_cold_and_warm(tmp_path, "by_import_module"))


def test_import_module_in_a_helper(tmp_path):
    """The helper runs through its hook at the break (its frame and its resume function, per size)."""
    _check("through_a_helper", *_cold_and_warm(tmp_path, "through_a_helper"), most_traced=6)


def test_import_module_under_no_grad(tmp_path):
    _check("under_no_grad", *_cold_and_warm(tmp_path, "under_no_grad"))


def test_find_spec_imports_nothing(tmp_path):
    """Before: 45 frames traced cold (1 eager frame), 14 warm; find_spec must not import the module."""
    _check("by_find_spec", *_cold_and_warm(tmp_path, "by_find_spec"))


def test_metadata_version(tmp_path):
    """Before: 16 frames traced cold, 4 warm."""
    _check("by_version", *_cold_and_warm(tmp_path, "by_version"))


def test_import_statement_of_a_module_not_imported(tmp_path):
    _check("by_import_statement", *_cold_and_warm(tmp_path, "by_import_statement"))


def test_reload_runs_the_module_at_every_call(tmp_path, monkeypatch):
    """`importlib.reload` executes the module again at each call, as eager does (no frame of importlib traced)."""
    import builtins
    import importlib
    import sys
    (tmp_path / "imp_reloaded.py").write_text(textwrap.dedent('''
        import builtins
        COUNT = builtins.__dict__.setdefault("h11imp_reloads", [0])
        COUNT[0] += 1
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(builtins, "h11imp_reloads", [0], raising=False)
    mod = importlib.import_module("imp_reloaded")
    try:
        def f(x):
            m = importlib.reload(mod)
            return x + m.COUNT[0]

        cf = framejit.compile(f, backend="eager")
        s0 = dict(framejit.stats())
        for n in (3, 4, 5, 6):
            x = torch.randn(n)
            runs = builtins.h11imp_reloads[0]
            assert torch.equal(cf(x), x + (runs + 1))
            assert builtins.h11imp_reloads[0] == runs + 1
        s = framejit.stats()
        assert s["eager_frames"] == s0["eager_frames"]
        assert s["frames_traced"] - s0["frames_traced"] <= 4, s["frames_traced"] - s0["frames_traced"]
    finally:
        sys.modules.pop("imp_reloaded", None)


def test_import_machinery_is_recognised():
    import importlib
    import importlib.util
    import pkgutil
    from framejit.capture.import_calls import import_machinery
    assert import_machinery(importlib.import_module) and import_machinery(importlib.util.find_spec)
    assert import_machinery(importlib.reload) and import_machinery(pkgutil.iter_modules)
    assert import_machinery(importlib._bootstrap._find_and_load)
    assert not import_machinery(torch.nn.functional.relu) and not import_machinery(test_import_machinery_is_recognised)
