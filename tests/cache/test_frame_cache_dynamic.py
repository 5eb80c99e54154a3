"""The frame cache keeps entries compiled with different dynamic modes apart (NOTE [Dynamic mode in the key]
in capture/frame_cache.py): a process compiled with dynamic=False never serves new sizes from a symbolic
entry another process persisted, and a process compiled with dynamic=True never loads a static entry (it
would compile once more for the next size). Each run is a new process sharing one cache folder; every
result is compared with eager."""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def f(x, scale):
        return (x * scale).view(x.shape[0], -1).sum(1) + x.shape[0]

    dynamic = {"none": None, "true": True, "false": False}[sys.argv[1]]
    compiled = framejit.compile(f, backend="eager", dynamic=dynamic)
    ok = True
    for i, n in enumerate(int(s) for s in sys.argv[2].split(",")):
        x = torch.randn(n, 3, 2)
        ok = ok and torch.equal(compiled(x, 2.0), f(x, 2.0))
    stats = framejit.stats()
    print(json.dumps({"ok": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def run(tmp_path, mode: str, sizes: str) -> dict:
    return run_cache_program(tmp_path, "dynamic_modes.py", PROGRAM, mode, sizes)


def test_each_dynamic_mode_loads_only_its_own_entries(tmp_path, monkeypatch):
    cold = run(tmp_path, "none", "3,5")  # automatic dynamic: a static entry, then a symbolic one
    assert cold["ok"] and cold["traced"] == 2
    static = run(tmp_path, "false", "7,9")  # none loaded: one static entry per size
    assert static["ok"] and static["loaded"] == 0 and static["traced"] == 2
    dynamic = run(tmp_path, "true", "7,4,6")  # none loaded: one symbolic entry for all sizes
    assert dynamic["ok"] and dynamic["loaded"] == 0 and dynamic["traced"] == 1
    warm = run(tmp_path, "true", "8,11")  # its own entry serves new sizes without tracing
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] == 1
    monkeypatch.setenv("FRAMEJIT_AUTOMATIC_DYNAMIC", "0")  # dynamic=None without automatic dynamic: static
    off = run(tmp_path, "none", "12")
    assert off["ok"] and off["loaded"] == 0 and off["traced"] == 1
