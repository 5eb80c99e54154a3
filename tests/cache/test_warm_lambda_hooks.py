"""Warm starts for modules with lambda hooks made at a script's top level (issue 16; NOTE [Code found through the
call's arguments] in capture/call_located.py).

`m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))` at a script's top level: no name imports the
lambda and nothing keeps its code, so the entry of the module call was kept in memory only ("function '<lambda>'
cannot be imported by name") and every warm process traced it again (tools/warm_gaps.py module_hooks: 1 frame).
Now the lambda is guarded by its code, and the code is found again through the module call's own arguments,
checked by its hash: a warm process traces nothing. A process whose hooks are other lambdas (another body, a
default, one hook removed) traces again and gets eager's values.
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

PROGRAM = textwrap.dedent('''
    import json, sys, torch, framejit
    from torch import nn

    variant = sys.argv[1]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if variant == "other_body":
        m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 3,))
    elif variant == "default":
        m[0].register_forward_pre_hook(lambda mod, args, k=2: (args[0] * k,))
    else:
        m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    if variant != "removed":
        m[2].register_forward_hook(lambda mod, args, out: out + 1)
    c = framejit.compile(m, backend="eager")
    ok = True
    for n in (3, 5):
        x = torch.randn(n, 4)
        ok = ok and torch.allclose(c(x), m(x))
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                      "eager": s["eager_frames"]}))
''')


def test_lambda_hooks_start_warm(tmp_path):
    cold = run_cache_program(tmp_path, "hooks.py", PROGRAM, "same")
    assert cold["ok"] and cold["eager"] == 0 and cold["traced"] > 0, cold
    warm = run_cache_program(tmp_path, "hooks.py", PROGRAM, "same")
    assert warm["ok"] and warm["eager"] == 0, warm
    assert warm["traced"] == 0 and warm["loaded"] >= 1, warm
    for variant in ("other_body", "default", "removed"):
        other = run_cache_program(tmp_path, "hooks.py", PROGRAM, variant)
        assert other["ok"] and other["eager"] == 0, (variant, other)
        assert other["traced"] > 0, (variant, other)


DOUBLE = lambda t: t * 2  # noqa: E731 - top-level lambdas, as dict keys and set elements below
HALF = lambda t: t / 2  # noqa: E731
TABLE = {DOUBLE: 3.0, HALF: 5.0}


def test_top_level_lambdas_as_keys_stay_in_the_graph():
    import torch

    import framejit

    def f(x, fn):
        seen = {fn, DOUBLE}
        return fn(x) * TABLE[fn] + len(seen)

    framejit.reset()
    c = framejit.compile(f, backend="eager", fullgraph=True)
    for fn, n in ((DOUBLE, 3), (HALF, 4), (DOUBLE, 5)):
        x = torch.randn(n)
        assert torch.allclose(c(x, fn), f(x, fn))
