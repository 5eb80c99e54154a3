"""Warm starts of issue 16 (h14h16): a warm process (a new process with the cold one's FRAMEJIT_CACHE_DIR) traces
nothing.

- NOTE [Namedtuple methods by their class] (capture/locators.py): a namedtuple's generated methods are found
  through `tuple.__subclasses__()`, not the garbage collector's referrers, which miss everything gc.freeze()
  moved to the permanent generation: entries calling them were kept in memory only in a frozen process.
- NOTE [Entries waiting for an import] (capture/hook.py): a user module the compiled function imports itself
  is not imported when the frame's persisted entries are looked up; entries that need it were dropped and
  traced again in every warm process.
"""
from __future__ import annotations

import collections
import gc
import textwrap

import pytest

from tests.helpers import run_cache_program

FROZEN_NAMEDTUPLE = textwrap.dedent('''
    import gc, json, sys, torch, framejit
    import shapes_mod
    gc.freeze()  # a server that froze after importing, before serving
    def f(p):
        d = p._asdict()
        return d["a"] * d["b"] + p._replace(b=2).b + len(repr(p))
    cf = framejit.compile(f, backend="eager")
    ok = True
    for n in (3, 4):
        p = shapes_mod.P(torch.arange(float(n)), n)
        ok = ok and torch.equal(cf(p), f(p))
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


def test_namedtuple_methods_of_a_frozen_process_start_warm(tmp_path):
    """Before: `_replace` (its stand-in, NOTE [namedtuple._replace]) and `_asdict` of a namedtuple defined in
    another module were located through gc referrers only: the entry was kept in memory only (warm: traced 1)."""
    (tmp_path / "shapes_mod.py").write_text("import collections\nP = collections.namedtuple('P', 'a b')\n")
    cold = run_cache_program(tmp_path, "frozen.py", FROZEN_NAMEDTUPLE)
    warm = run_cache_program(tmp_path, "frozen.py", FROZEN_NAMEDTUPLE)
    assert cold["ok"] and cold["traced"] >= 1, cold
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] >= 1, warm


Frozen = collections.namedtuple("Frozen", "a b")


def test_namedtuple_method_locators_need_no_collector_scan():
    """Before: every locator below was None after gc.freeze() (the referrers scan finds no frozen object)."""
    from framejit.capture import locators
    gc.freeze()
    try:
        for name in ("_asdict", "__repr__", "_replace", "_make"):
            entry = Frozen.__dict__[name]
            qualname = (entry.__func__ if name == "_make" else entry).__qualname__
            locator = locators._namedtuple_method_locator(entry, "collections", qualname)
            assert locator == ("classdict", __name__, "Frozen", name), (name, locator)
            assert locators.resolve(locator, None) is entry
        make_fn = Frozen.__dict__["_make"].__func__
        assert locators._namedtuple_method_locator(make_fn, "collections", make_fn.__qualname__) == \
            ("classdict", __name__, "Frozen", "_make", "__func__")
    finally:
        gc.unfreeze()


LAZY_IMPORTS = textwrap.dedent('''
    import json, sys, torch, framejit
    import helpers_mod

    def through_a_helper(x):
        return helpers_mod.helper(x) * 2

    class Lazy(torch.nn.Module):
        def forward(self, x):
            import lazy_mod
            return lazy_mod.g(x) - 1

    def after_some_work(x):
        y = x * 2
        import lazy_mod
        return lazy_mod.g(y).sum() + y

    def from_a_package(x):
        from lazy_pkg import sub
        return sub.k(x)

    fn = {"helper": through_a_helper, "module": Lazy(), "after_work": after_some_work,
          "package": from_a_package}[sys.argv[1]]
    cf = framejit.compile(fn, backend="eager")
    ok = True
    for n in (3, 3, 5, 6):  # a new size after the module was imported: a second entry in the cold process
        x = torch.arange(float(n))
        ok = ok and torch.equal(cf(x), fn(x))
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


@pytest.mark.parametrize("variant", ["helper", "module", "after_work", "package"])
def test_a_module_imported_inside_the_compiled_function_starts_warm(tmp_path, variant):
    """Before: helper, module and after_work traced 1 frame again in the warm process (the entry made for
    the new size needs `lazy_mod`, not imported yet when the entries were looked up)."""
    (tmp_path / "lazy_mod.py").write_text("import torch\ndef g(x):\n    return torch.sin(x) * 2\n")
    (tmp_path / "helpers_mod.py").write_text("def helper(x):\n    import lazy_mod\n    return lazy_mod.g(x) + 1\n")
    (tmp_path / "lazy_pkg").mkdir()
    (tmp_path / "lazy_pkg" / "__init__.py").write_text("")
    (tmp_path / "lazy_pkg" / "sub.py").write_text("from . import inner\ndef k(x):\n    return inner.c(x) + 2\n")
    (tmp_path / "lazy_pkg" / "inner.py").write_text("def c(x):\n    return x.cos()\n")
    cold = run_cache_program(tmp_path, "lazy.py", LAZY_IMPORTS, variant)
    warm = run_cache_program(tmp_path, "lazy.py", LAZY_IMPORTS, variant)
    assert cold["ok"] and cold["traced"] >= 2, cold
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] == cold["traced"], (cold, warm)


def test_an_entry_waiting_for_a_module_that_is_never_imported_is_not_used(tmp_path):
    """The waiting entry stays unused while its module is absent: a process that takes the other branch
    compiles its own entry and never imports the module."""
    program = textwrap.dedent('''
        import json, sys, torch, framejit
        def f(x, use):
            if use:
                import lazy_mod
                return lazy_mod.g(x)
            return x - 1
        cf = framejit.compile(f, backend="eager")
        use = sys.argv[1] == "use"
        ok = all(torch.equal(cf(torch.arange(float(n)), use), f(torch.arange(float(n)), use)) for n in (3, 3, 5))
        s = framejit.stats()
        print(json.dumps({"ok": ok, "traced": s["frames_traced"], "imported": "lazy_mod" in sys.modules}))
    ''')
    (tmp_path / "lazy_mod.py").write_text("import torch\ndef g(x):\n    return torch.sin(x) * 2\n")
    cold = run_cache_program(tmp_path, "wait.py", program, "use")
    other = run_cache_program(tmp_path, "wait.py", program, "skip")
    warm = run_cache_program(tmp_path, "wait.py", program, "use")
    assert cold["ok"] and other["ok"] and warm["ok"], (cold, other, warm)
    assert not other["imported"] and other["traced"] >= 1, other
    assert warm["traced"] == 0, warm
