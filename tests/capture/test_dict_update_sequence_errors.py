"""dict.update / `|=` / dict() of a sequence whose elements are not pairs raise CPython's own errors (issue 12:
hhuntG3 MED-3), differential (eager vs compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Dict update sequences] (framejit/capture/mappings.py): "cannot convert dictionary update sequence element #i
to a sequence" (TypeError) and "... element #i has length n; 2 is required" (ValueError); before, `d |= [1]` raised
"'int' object is not iterable" and `d |= "ab"` sent the frame eagerly after an internal error.
"""
from __future__ import annotations

import torch

from tests.helpers import run_differential

SEQUENCES = ([1], [(1, 2), 3], "ab", [(1, 2, 3)], [(1, 2), [3, 4]], [[5, x] for x in range(2)], [(1,), 2],
             [(0, 1), ([2], 3)])


def update_from(x, how, seq):
    a = {"k": 1}
    try:
        if how == 0:
            a |= seq
        elif how == 1:
            a.update(seq)
        else:
            a = dict(seq)
    except (TypeError, ValueError) as e:
        return x + 1, type(e).__name__, str(e), a
    return x * 2, a


def test_update_sequence_errors_match_eager():
    for how in range(3):
        run_differential(update_from, lambda seed: (torch.randn(2 + seed), how, list(SEQUENCES[seed])),
                         seeds=range(len(SEQUENCES)), fullgraph=False)
