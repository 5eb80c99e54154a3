"""Dynamic shapes, issue 13: where a trace specialises what was meant to stay symbolic. A loop over a
symbolic range whose body breaks on data (the owner frame recompiled per size), and `mark_dynamic`
contracts the code breaks (a ConstraintViolationError at compile time, as torch.compile raises).
Differential: eager vs compiled on fresh inputs of changing sizes; compile counts asserted."""
from __future__ import annotations

import torch

import framejit
from tests.helpers import assert_same

SIZES = [3, 5, 7, 4, 9, 6, 11, 12, 13, 14]  # more sizes than the recompile limit (8)


def _frames(before: int, name: str) -> int:
    return sum(1 for row in framejit.stats()["frames"][before:] if row["function"] == name)


def _loop_with_a_break(x):
    acc = x[0]
    for i in range(1, x.shape[0]):
        if acc.sum() > 1e9:  # data-dependent: a break inside the loop's body
            acc = acc * 0
        acc = acc + x[i] * i
    return acc * 2


def _loop_that_breaks_out(x):
    y = x * 2
    out = []
    for i in range(x.size(0)):
        if y[i].sum() > 0:
            break
        out.append(y[i] + 1)
    return y.sum() + len(out), out


def test_loop_over_a_symbolic_range_that_breaks_does_not_recompile_per_size():
    for fn in (_loop_with_a_break, _loop_that_breaks_out):
        before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
        compiled = framejit.compile(fn, backend="eager")
        for i, n in enumerate(SIZES):
            torch.manual_seed(i)
            x = torch.randn(n, 3)
            assert_same(compiled(x), fn(x))
        # before: the owner frame unrolled the range (size guarded by value) and recompiled per size
        # until the recompile limit sent it to eager (8 entries, 1 eager frame); stock runs it eagerly
        assert _frames(before, fn.__qualname__) == 2  # static, then symbolic: the loop runs as Python
        assert framejit.stats()["eager_frames"] == eager
