"""Objects distinct when traced stay distinct for a warm process (review revE E6; NOTE [Distinct objects stay
distinct] in capture/frame_cache.py).

A cold process traces with two module globals A and B that are distinct objects; a warm process whose B is A
(another configuration) must not load the entries that relied on A is not B: it traces them again and answers
as eager does in that process. A warm process with the same configuration still loads the entries.
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

MOD = textwrap.dedent('''
    import os, torch

    class Obj:
        pass

    A = Obj()
    B = A if os.environ.get("DISTINCT_SAME") == "1" else Obj()

    def ids_in_a_set(x):
        s = {id(A), id(B)}
        return x * len(s)

    def dict_get(x):
        d = {id(A): 3}
        return x * d.get(id(B), 5)

    def is_same(x):
        return x * (2 if A is B else 3)
''')

PROGRAM = textwrap.dedent('''
    import json, os, sys, torch, framejit
    os.environ["DISTINCT_SAME"] = sys.argv[1]
    import distinct_mod as m

    ok = True
    for fn in (m.ids_in_a_set, m.dict_get, m.is_same):
        compiled = framejit.compile(fn, backend="eager")
        for size in (2, 3):
            x = torch.arange(float(size))
            ok = ok and torch.equal(compiled(x), fn(x))
    s = framejit.stats()
    names = sorted({f["function"] for f in s["frames"] if f["cache"] != "hit"})
    print(json.dumps({"ok": ok, "traced_names": names, "loaded": s["frames_loaded"]}))
''')


def test_objects_distinct_when_traced_are_not_taken_as_one(tmp_path):
    (tmp_path / "distinct_mod.py").write_text(MOD)
    cold = run_cache_program(tmp_path, "distinct.py", PROGRAM, "0")
    same = run_cache_program(tmp_path, "distinct.py", PROGRAM, "1")
    again = run_cache_program(tmp_path, "distinct.py", PROGRAM, "0")
    names = ["dict_get", "ids_in_a_set", "is_same"]
    assert cold["ok"] and cold["traced_names"] == names, cold
    assert same["ok"], same  # B is A here: eager's answers, so every function is traced again
    assert same["traced_names"] == names, same
    # ids in a set keep their entry in memory only (NOTE [Ids as keys inside the trace]); the others load
    assert again["ok"] and again["traced_names"] == ["ids_in_a_set"] and again["loaded"] >= 4, again
