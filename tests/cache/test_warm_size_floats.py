"""Warm starts for graphs whose floats of sizes are passed as inputs on triton (NOTE [Persisted size floats],
backends/size_floats.py): `x * (1 / x.size(-1) ** 0.5)` and a relation of sizes used as a number compiled
with dynamic=True serve every width from one size-generic module; before, the SizeFloatsGraph had no artifact
(`save` returned None), so a warm process traced and compiled the frame again. A cold process compiles, a
warm one (the same cache folder) loads the entry and compiles nothing, with values equal to eager's at widths
the cold process never saw, in both. Each program runs in a forked child (tests/cache/warm_programs.py)."""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def scaled(x):
        return x * (1 / x.size(-1) ** 0.5) + (x.size(0) >= x.size(1)) - x.size(1) / 3

    compiled = framejit.compile(scaled, backend=sys.argv[1], dynamic=True)
    widths = [int(w) for w in sys.argv[2].split(",")]
    equal = []
    for w in widths:
        x = torch.randn(3, w, generator=torch.Generator().manual_seed(w))
        equal.append(torch.allclose(compiled(x), scaled(x), rtol=1e-6, atol=1e-6))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "compiles": stats["backend_compiles"]}))
''')


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    return copy_framejit(tmp_path_factory.mktemp("install"))


def test_size_floats_start_warm_on_triton(tmp_path, install):
    cold = run_warm(tmp_path, install, PROGRAM, "4,7,2", backend="triton")
    warm = run_warm(tmp_path, install, PROGRAM, "9,5,3", backend="triton")
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert (cold["traced"], cold["compiles"]) == (1, 1), cold
    assert (warm["traced"], warm["loaded"], warm["compiles"]) == (0, 1, 0), warm  # before: traced 1, loaded 0
