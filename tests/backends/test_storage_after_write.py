"""NOTE [Storage read after a write] (backends/symbolic.py), review revY F1: a graph that writes a tensor in place
and then reads storage positions (`as_strided`) or the storage offset ran on onnxrt and triton over the written
value as a new dense tensor at offset 0. Differential: rows and columns of a base at changing offsets, the base
compared after each call too."""
from __future__ import annotations

import pytest
import torch

import framejit


def _write_then_strided(r):
    r.mul_(2)
    return r.as_strided((2,), (1,), 0) * 1, r * r.storage_offset()


def _add_then_offset(c):
    c += 1
    return c * c.storage_offset()


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("fn, pick", [(_write_then_strided, lambda base, i: base[i]),
                                      (_add_then_offset, lambda base, i: base[:, i])], ids=["row_as_strided", "column_offset"])
def test_storage_reads_after_an_in_place_write_follow_eager(backend, fn, pick):
    compiled = framejit.compile(fn, backend=backend)
    for rows in (3, 3, 4):
        for i in range(3):
            want_base, got_base = torch.arange(rows * 4.0).reshape(rows, 4), torch.arange(rows * 4.0).reshape(rows, 4)
            want, got = fn(pick(want_base, i)), compiled(pick(got_base, i))
            for w, g in zip(want, got) if isinstance(want, tuple) else [(want, got)]:
                assert torch.equal(w, g), (rows, i, w, g)
            assert torch.equal(want_base, got_base)
