"""Warm starts for frames that read a class attribute holding a tuple of scalars (issue 16; NOTE [Scalar class
entries by value] in capture/lookup.py).

A config class default such as recurrent_gemma's `block_types = ("recurrent", "recurrent", "attention")`,
shadowed by the instance's own list or read as it is, was pinned by identity; a tuple is another object in
every process, so the persisted entry failed that guard and a warm process traced the frame again. It is now
pinned by its type, its items' types and its value: a warm process traces nothing, and a process whose class
holds another tuple (other items, or equal items of other types: (1,) == (True,)) traces again and gets eager's
values.
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

MOD = textwrap.dedent('''
    import torch

    class Config:
        kinds = ("recurrent", "attention")
        scales = (1, 2.5)

        def __init__(self, own):
            if own:
                self.kinds = ["attention"] * 3

    def shadowed(cfg, x):
        return x * len(cfg.kinds) + (cfg.kinds[-1] == "attention")

    def read(cfg, x):
        return x * cfg.scales[0] + cfg.scales[1], type(cfg.scales[0]).__name__, cfg.kinds[0]
''')

PROGRAM = textwrap.dedent('''
    import json, torch, framejit
    import tuple_mod as m

    ok = True

    def same(a, b):
        if isinstance(a, tuple):
            return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
        return torch.allclose(a, b) if isinstance(a, torch.Tensor) else a == b

    for fn, own in ((m.shadowed, True), (m.read, False)):
        compiled = framejit.compile(fn, backend="eager")
        for size in (2, 3):
            x = torch.randn(size)
            ok = ok and same(fn(m.Config(own), x), compiled(m.Config(own), x))
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"], "eager": s["eager_frames"]}))
''')


def test_class_tuples_start_warm_and_are_guarded_by_value(tmp_path):
    (tmp_path / "tuple_mod.py").write_text(MOD)
    cold = run_cache_program(tmp_path, "tuples.py", PROGRAM)
    warm = run_cache_program(tmp_path, "tuples.py", PROGRAM)
    assert cold["ok"] and cold["traced"] >= 2 and cold["eager"] == 0, cold
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] >= 2, warm
    for old, new in (('kinds = ("recurrent", "attention")', 'kinds = ("attention", "attention")'),
                     ("scales = (1, 2.5)", "scales = (True, 2.5)"),
                     ("scales = (1, 2.5)", "scales = (1.0, 2.5)")):
        (tmp_path / "tuple_mod.py").write_text(MOD.replace(old, new))
        changed = run_cache_program(tmp_path, "tuples.py", PROGRAM)
        assert changed["ok"] and changed["traced"] >= 1, (new, changed)
