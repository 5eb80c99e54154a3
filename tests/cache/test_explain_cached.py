"""framejit.explain on a frame whose entries come from the persistent frame cache (issue 11, h11ctx).

Before: a warm process (entries restored by frame_cache.restore) reported "Graph break count: 0" and no
break reasons for a frame that breaks, because the GraphBreak record was not persisted with the entry; the
cold process reported the break. The report must not depend on where the entry came from.
"""
from __future__ import annotations

from tests.helpers import run_cache_program

PROGRAM = r'''
import json, sys
import torch
import framejit

SCALE = float(sys.argv[1])

def fn(x):
    y = x * SCALE
    print("at the break")
    with torch.no_grad():
        z = y.sin()
        print("inside the block")
        z = z + 1
    return y + z

x = torch.arange(4.0)
report = framejit.explain(fn)(x)
compiled = framejit.compile(fn)(x)
print(json.dumps({
    "graphs": report.graph_count,
    "breaks": report.graph_break_count,
    "reasons": sorted([b.kind.value, b.explanation, b.location.rsplit(":", 1)[-1]] for b in report.break_reasons),
    "ops": report.ops_per_graph,
    "same": bool(torch.equal(compiled, fn(x))),
}))
'''


def test_explain_reports_breaks_of_entries_loaded_from_the_cache(tmp_path):
    runs = [run_cache_program(tmp_path, "prog.py", PROGRAM, scale) for scale in ("2.0", "2.0", "3.0", "3.0")]
    cold = runs[0]
    assert cold["breaks"] == 2 and cold["graphs"] == 3 and cold["same"]
    assert runs[1] == cold, (runs[1], cold)  # every entry loaded from the cache
    for run in runs[2:]:  # another SCALE: a new root entry (the 3rd run), loaded again by the 4th
        assert (run["breaks"], run["reasons"], run["same"]) == (cold["breaks"], cold["reasons"], True), run
