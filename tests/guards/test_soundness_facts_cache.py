"""Lookup facts survive the frame cache: an entry persisted by one process is not loaded by a new process
whose state differs in a fact the trace relied on (an instance attribute shadowing a class attribute, an
attribute that was absent, a class attribute, the function's defaults, the sign of a float zero, a
view's storage offset). Each mode runs in a fresh process against the same warm cache directory."""
from __future__ import annotations

import textwrap

import pytest

from tests.helpers import BACKEND_MODULES, run_cache_program

PROGRAM = textwrap.dedent('''
    import json, math, sys
    import torch
    import framejit

    class Cfg:
        k = 2

    cfg = Cfg()

    def f(x, a=1, z=0.0):
        extra = 10 if hasattr(cfg, "extra") else 0
        return x * cfg.k * a * math.copysign(1.0, z) + extra + x.storage_offset()

    mode = sys.argv[1]
    z, offset = 0.0, 0
    if mode == "shadow":
        cfg.k = 100
    elif mode == "extra":
        cfg.extra = 1
    elif mode == "class":
        Cfg.k = 7
    elif mode == "defaults":
        f.__defaults__ = (5, 0.0)
    elif mode == "negzero":
        z = -0.0
    elif mode == "offset":
        offset = 2
    compiled = framejit.compile(f, backend=sys.argv[2])
    base = torch.arange(8.0)
    x = base[offset:offset + 4]
    out, ref = compiled(x, z=z).tolist(), f(x, z=z).tolist()
    stats = framejit.stats()
    print(json.dumps({"out": out, "ref": ref, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def _run(tmp_path, mode: str, backend: str) -> dict:
    return run_cache_program(tmp_path, "facts_program.py", PROGRAM, mode, backend,
                             preload=BACKEND_MODULES[backend])


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_warm_cache_entry_is_not_loaded_when_a_fact_changed(tmp_path, backend):
    cold = _run(tmp_path, "plain", backend)
    assert cold["out"] == cold["ref"] and cold["traced"] >= 1
    warm = _run(tmp_path, "plain", backend)
    assert warm["out"] == warm["ref"] and warm["traced"] == 0 and warm["loaded"] >= 1  # the cache is used
    for mode in ("shadow", "extra", "class", "defaults", "negzero", "offset"):
        changed = _run(tmp_path, mode, backend)
        assert changed["ref"] != cold["ref"], mode  # the change matters to the program
        assert changed["out"] == changed["ref"], mode
