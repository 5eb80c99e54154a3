"""Entries loaded from the frame cache and the recompile limit, over warm processes (issue 16, h13fixB; review
revB finding 7).

- NOTE [Persisted entries per code] (capture/frame_cache.py): loaded entries do not fill a frame's recompile
  limit (NOTE [Loaded entries and the limit], hook.py), so the cache bounds them: at most 2x the limit per
  code. Before, every warm process of a frame that keeps recompiling persisted the limit's worth more, and
  every later process loaded them all (0, 8, 16, 24 over four processes).
- A frame at its limit still loads entries that waited for an import (NOTE [Entries waiting for an import]).
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

RECOMPILING = textwrap.dedent('''
    import json, sys, torch, framejit
    from framejit import config
    config.recompile_limit = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    base = int(sys.argv[1])
    def f(x, n):
        return x * n + 1
    cf = framejit.compile(f, backend="eager", dynamic=False)
    ok, past_the_limit = True, sys.argv[2] == "past"
    for n in range(base, base + (6 if past_the_limit else 4)):  # 6 ints: 4 traces, then the limit (eager)
        for size in (2, 2):
            x = torch.arange(float(size)) - 0.5
            ok = ok and torch.equal(cf(x, n), f(x, n))
    if past_the_limit:  # eager values past the limit
        ok = ok and all(torch.equal(cf(x, -n), f(x, -n)) for n in range(1, 50))
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


def test_a_frame_that_keeps_recompiling_loads_a_bounded_number_of_entries(tmp_path):
    runs = [run_cache_program(tmp_path, "recompiling.py", RECOMPILING, str(base), "past")
            for base in (0, 100, 200, 300, 400)]
    assert all(r["ok"] for r in runs), runs
    assert [r["traced"] for r in runs] == [4] * 5, runs  # each process's own traces stop at the limit
    # the cache holds at most 2x the limit (8): the third process on loads 8, not 8 more per process
    assert [r["loaded"] for r in runs] == [0, 4, 8, 8, 8], runs


def test_entries_of_one_process_are_all_loaded_by_the_next_within_the_bound(tmp_path):
    # the bound does not cost a warm start: a cold process's entries (fewer than the bound) all load and
    # serve the same calls with no trace
    cold = run_cache_program(tmp_path, "recompiling.py", RECOMPILING, "0", "within")
    warm = run_cache_program(tmp_path, "recompiling.py", RECOMPILING, "0", "within")
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert (cold["traced"], cold["loaded"]) == (4, 0), cold
    assert (warm["traced"], warm["loaded"]) == (0, 4), warm


def test_a_process_with_a_lower_limit_loads_only_the_newest_entries_of_its_bound(tmp_path):
    # a cache filled under a limit of 8 (8 entries) read by a process whose limit is 2: it loads 4 (2x 2)
    cold = run_cache_program(tmp_path, "recompiling.py", RECOMPILING, "0", "past", "8")
    warm = run_cache_program(tmp_path, "recompiling.py", RECOMPILING, "0", "within", "2")
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert (cold["traced"], cold["loaded"]) == (8, 0), cold
    assert warm["loaded"] == 4, warm


WAITING = textwrap.dedent('''
    import json, sys, torch, framejit
    from framejit import config
    config.recompile_limit = 2
    LAZY = None  # the module, once this process has imported it
    def f(x, use):
        if use:
            return LAZY.g(x)
        return x * 2
    cf = framejit.compile(f, backend="eager", dynamic=False)
    ok = True
    def run(n, use):
        x = torch.arange(float(n))
        return torch.equal(cf(x, use), f(x, use))
    if sys.argv[1] == "cold":
        import lazy_mod
        LAZY = lazy_mod
        ok = run(3, True)
    else:
        ok = run(3, False) and run(4, False)  # two traces: the limit
        import lazy_mod
        LAZY = lazy_mod
        ok = ok and run(3, True) and run(3, True)
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                      "eager": s["eager_frames"]}))
''')


def test_a_frame_at_its_limit_still_loads_entries_that_waited_for_an_import(tmp_path):
    """The cold process persists an entry for f(x, True), which reads the module lazy_mod from a global:
    it needs lazy_mod. The warm process's first call (use=False) looks the entries up; that one waits
    (lazy_mod is not imported). Sizes 3 and 4 with use=False are traced: the frame is at its limit of 2.
    Then the process imports lazy_mod and calls f(x, True): before, the frame ran eagerly at the limit
    without looking at the waiting entry (loaded 0, 1 eager frame); now it loads it and runs it."""
    (tmp_path / "lazy_mod.py").write_text("import torch\ndef g(x):\n    return torch.sin(x) * 2\n")
    cold = run_cache_program(tmp_path, "waiting.py", WAITING, "cold")
    warm = run_cache_program(tmp_path, "waiting.py", WAITING, "warm")
    assert cold["ok"] and warm["ok"], (cold, warm)
    assert (cold["traced"], cold["eager"]) == (1, 0), cold
    assert (warm["traced"], warm["loaded"], warm["eager"]) == (2, 1, 0), warm
