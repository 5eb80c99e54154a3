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


LOG: list = []


def loop_over_dict(x, y):
    d = {i: x[i] for i in range(x.size(0))}
    out = x.sum()
    for k, v in d.items():
        LOG.append(k)
        if k == 4:
            d[100] = v  # eager raises RuntimeError at the next step
        out = out + v.sum() * k + y
    return out


def _run(fn, x, y):
    LOG.clear()
    try:
        result = fn(x, y)
    except RuntimeError as e:
        result = str(e)
    return result, list(LOG)


def test_a_loaded_frame_gives_its_resume_functions_what_is_dynamic_there(tmp_path, monkeypatch):
    """NOTE [Persisted dynamic state of resume hooks] (review revX F3): the dict a comprehension makes is opaque in
    the resume function after it (its loop runs as Python). A second compile object loads the frame from the
    cache (as a warm process does) and meets a float64 `y`, which only the resume function guards: traced again,
    it must still take `d` as opaque. Before, it stepped the loop per key and hit the mutation: 3 traces and 2
    eager frames."""
    import torch
    import framejit
    from framejit import config
    from tests.helpers import assert_same
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    for dtype, sizes in ((torch.float32, (5,)), (torch.float64, (6, 2))):
        compiled = framejit.compile(loop_over_dict, backend="eager", dynamic=True)
        before, eager_before = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
        for n in sizes:
            x, y = torch.randn(n, 3), torch.randn(3, dtype=dtype)
            expected, got = _run(loop_over_dict, x, y), _run(compiled, x, y)
            assert_same(got, expected)
    stats = framejit.stats()
    rows = [(r["function"].rsplit(".", 1)[-1], r["cache"]) for r in stats["frames"][before:]]
    assert stats["eager_frames"] == eager_before
    assert ("loop_over_dict", "hit") in rows and ("loop_over_dict", "miss") not in rows
    assert sum(cache == "miss" for _, cache in rows) <= 2, rows  # the loop's resume function and the one after
