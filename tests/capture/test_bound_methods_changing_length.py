"""A break inside the arguments of `select.append(...)` in a loop stepped as Python (ViLT's visual_embed,
hhuntHF MED-1): the bound method reached the resume function on the stack and its list was guarded by length
through `.__self__`, so that resume function compiled once per length, on every row of a batch and again on
the next call. Its list is opaque now from there too (NOTE [Bound methods of sequences of changing length]
in capture/carried_loops.py). Values compared with eager; graphs and traces counted."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def pick_rows(x, mask):
    rows = [x[r][mask[r] > 0] for r in range(x.size(0))]
    lens = [int(m.sum()) for m in mask]
    top = mask.sum(1).max()
    select = []
    for i, (n, row) in enumerate(zip(lens, rows)):
        if top - n <= 0:
            select.append(row[torch.multinomial(torch.ones(n), top)])
        else:
            select.append(torch.cat([row, row[:1].expand(top - n)]))
    return torch.stack(select) * 2


def _inputs(batch, short):
    x = torch.randn(batch, 6)
    mask = torch.ones(batch, 6, dtype=torch.long)
    mask[:short, -2:] = 0
    return x, mask


def _run(compiled, batch, short, seed):
    x, mask = _inputs(batch, short)
    torch.manual_seed(seed)
    expected = pick_rows(x, mask)
    before = framejit.stats()["frames_traced"]
    torch.manual_seed(seed)
    got = compiled(x, mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    return framejit.stats()["frames_traced"] - before


def test_a_batch_of_rows_appended_after_a_data_dependent_step_compiles_once_per_frame():
    counter = CountingBackend()
    compiled = framejit.compile(pick_rows, backend=counter)
    _run(compiled, 9, 0, 0)
    assert counter.graph_count <= 8  # parent: 14 (the resume function once per length of `select`)
    assert _run(compiled, 9, 0, 1) == 0  # the same shapes: nothing traced again
    first = counter.graph_count
    _run(compiled, 5, 0, 2)
    assert _run(compiled, 5, 0, 3) == 0
    assert counter.graph_count - first <= 3  # parent: +2 here, but from 14


def test_rows_of_both_branches_match_eager_over_calls():
    compiled = framejit.compile(pick_rows, backend=CountingBackend())
    for seed, (batch, short) in enumerate([(4, 2), (4, 1), (6, 3), (3, 0)]):
        _run(compiled, batch, short, seed)
