"""Two functions of one source in two modules, each reading its own module's global, reached through one root
that breaks inside them (review revI HIGH-1 of 8b439db): the nested break's resume functions were hashed by
their code alone, so the root's entries for `moda.same` and `modb.same` had one cache key and the second ran
with the first's globals (K = 2 where eager read 100), in the cold process and the warm one (NOTE [Function
constants hashed by their code] in capture/locators.py). Values and printed text compared with eager."""
from __future__ import annotations

import textwrap

from tests.cache.warm_programs import copy_framejit, run_warm

TWIN = textwrap.dedent('''
    K = {k}
    def same(x):
        y = x + 1
        print("same")
        return y * K
''')

PROGRAM = textwrap.dedent('''
    import contextlib, io, json, sys
    import torch
    import framejit
    import moda, modb

    def apply(f, x):
        return f(x - 1) * 3

    warm = len(sys.argv) > 2 and sys.argv[2] == "warm"
    fs = [modb.same, moda.same] if warm else [moda.same, modb.same]
    c = framejit.compile(apply, backend=sys.argv[1])
    equal = True
    for s in range(4):
        x = torch.randn(3, generator=torch.Generator().manual_seed(s))
        f = fs[s % 2]
        with contextlib.redirect_stdout(io.StringIO()) as got_text:
            got = c(f, x)
        with contextlib.redirect_stdout(io.StringIO()) as want_text:
            want = apply(f, x)
        equal = equal and torch.allclose(got, want) and got_text.getvalue() == want_text.getvalue()
    print(json.dumps({"equal": equal, **{k: framejit.stats()[k] for k in ("frames_traced", "eager_frames")}}))
''')


def test_twin_functions_of_two_modules_keep_their_own_globals_cold_and_warm(tmp_path):
    install = copy_framejit(tmp_path / "install")
    (tmp_path / "moda.py").write_text(TWIN.format(k=2))
    (tmp_path / "modb.py").write_text(TWIN.format(k=100))
    cold = run_warm(tmp_path, install, PROGRAM, backend="eager")
    assert cold["equal"] and cold["eager_frames"] == 0 and cold["frames_traced"] > 0, cold
    warm = run_warm(tmp_path, install, PROGRAM, "warm", backend="eager")
    assert warm["equal"] and warm["eager_frames"] == 0, warm
