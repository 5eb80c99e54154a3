"""A warm process keeps the exact rerun of a graph that fails inside the traced code's own handler (NOTE [Failing
graphs inside handlers] in capture/handler_reruns.py: the restore plan is persisted with the entry,
frame_cache.Persisted.restore, and the loaded callable is wrapped again)."""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

PROGRAM = textwrap.dedent('''
    import json, torch, framejit
    import torch.nn.functional as F
    def f(x, idx, buf):
        try:
            buf.add_(1)
            return F.dropout(x, 0.5)[idx] * 2
        except IndexError:
            return buf * 10
    cf = framejit.compile(f, backend="eager")
    same = []
    for call, idx in enumerate((1, 7, 2, 9)):
        seen = []
        for fn in (f, cf):
            torch.manual_seed(call)
            buf = torch.zeros(1)
            try:
                value = fn(torch.arange(4.0 + call % 2), torch.tensor([idx]), buf).tolist()
            except Exception as e:
                value = type(e).__name__
            seen.append((value, buf.tolist(), buf._version, torch.rand(2).tolist()))
        same.append(seen[0] == seen[1])
    s = framejit.stats()
    print(json.dumps({"same": same, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


def test_a_warm_process_reruns_a_failing_graph_inside_its_handler(tmp_path):
    """Calls 2 and 4 index out of range after buf.add_ and a dropout: eager returns buf * 10 with buf written
    once and the random stream advanced by the dropout; before, a loaded entry was not rerun (IndexError)."""
    cold = run_cache_program(tmp_path, "handler.py", PROGRAM)
    warm = run_cache_program(tmp_path, "handler.py", PROGRAM)
    assert all(cold["same"]) and cold["traced"] >= 1, cold
    assert all(warm["same"]) and warm["traced"] == 0 and warm["loaded"] >= 1, warm
