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



# Issue 11 (h11loc): the persisted break record kept the file:line of the process that traced it, while
# the entry is keyed by the code's hash and `module.qualname` (neither names the file nor the lines): the
# same function in another script, or with lines added above it, was reported at the old file:line.
LOCATED = r'''
import json, sys
import torch
import framejit

def helper(y):
    print("in the helper")
    return y - 1

def fn(x, k):
    y = x * k
    print("at the break")
    z = helper(y)
    return y + z

x = torch.arange(4.0)
report = framejit.explain(fn)(x, 2.0)
stats = framejit.stats()
print(json.dumps({
    "file": __file__,
    "stacks": sorted([[f.filename, f.lineno, f.function, f.line] for f in b.user_stack] for b in report.break_reasons),
    "text": str(report),
    "traced": stats["frames_traced"],
    "frames": sorted({f["location"] for f in stats["frames"]}),
    "same": [bool(torch.equal(framejit.compile(fn)(x + i, i), fn(x + i, i))) for i in (1.0, 3.0)],
}))
'''


def _check_located(run: dict, source: str) -> None:
    """Every frame of every break names this run's script, at a line whose text is the frame's."""
    lines = source.splitlines()
    assert len(run["stacks"]) == 2 and run["same"] == [True, True], run
    for stack in run["stacks"]:
        for filename, lineno, function, line in stack:
            assert filename == run["file"] and lines[lineno - 1].strip() == line != "", (run, lineno)
            assert f"{filename}:{lineno} in {function}: {line}" in run["text"], run
    assert all(location.startswith(run["file"] + ":") for location in run["frames"]), run


def test_explain_names_the_file_of_the_process_that_loaded_the_entry(tmp_path):
    (tmp_path / "other").mkdir()
    first = run_cache_program(tmp_path, "a.py", LOCATED)
    second = run_cache_program(tmp_path, "other/b.py", LOCATED)  # the same __main__.fn: its entries load
    assert first["file"] != second["file"] and first["traced"] > 0 and second["traced"] == 0, (first, second)
    _check_located(first, LOCATED)
    _check_located(second, LOCATED)


def test_explain_names_the_current_lines_of_a_function_whose_lines_moved(tmp_path):
    first = run_cache_program(tmp_path, "prog.py", LOCATED)
    moved = LOCATED.replace("def fn(x, k):", "# a comment\n\n\ndef fn(x, k):").replace(
        '    print("at the break")', '    # a comment inside\n    print("at the break")')
    second = run_cache_program(tmp_path, "prog.py", moved)  # the code hash names no line: its entries load
    assert first["traced"] > 0 and second["traced"] == 0, (first, second)
    _check_located(first, LOCATED)
    _check_located(second, moved)
    assert [[f[1] for f in s] for s in second["stacks"]] != [[f[1] for f in s] for s in first["stacks"]]
