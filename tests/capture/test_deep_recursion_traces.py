"""A compiled function recursing deep into the stack that misses its guards there (its trace runs out of stack)
runs that call eagerly and installs nothing: no internal-error eager entry, no eager-frames record for good
(NOTE [Traces out of stack] in framejit/capture/deep_traces.py; hhuntG4 MED-2). Differential: eager vs compiled
values on shallow and deep calls."""
import sys

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


def _rec(x, n):
    if n == 0:
        return x
    return _rec(x + 1, n - 1)


def _depth():
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_deep_miss_runs_eagerly_without_an_internal_error_entry():
    backend = CountingBackend()
    compiled = framejit.compile(_rec, backend=backend)
    deep = (sys.getrecursionlimit() - _depth()) * 3 // 4  # room for eager's frames and the hooks', not a trace's
    before = eager_frames()
    for n in (5, 40, deep, 20):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x, n), _rec(x, n))
    assert eager_frames() == before  # was: one "[internal_error] RecursionError" record per deep miss
    reasons = [r["reason"] for r in framejit.stats()["eager_frame_reasons"]]
    assert not any("RecursionError" in r for r in reasons[before:])
    assert backend.graph_count >= 2  # the shallow calls compiled (static, then symbolic n)
