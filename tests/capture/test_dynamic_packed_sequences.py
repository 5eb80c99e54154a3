"""Packed sequences into nn.LSTM / nn.GRU with lengths that change between calls (issue 13): the result of the
data-dependent break at pack_padded_sequence was static in the resume function's first trace, so the next
call's lengths recompiled it, and with `data`/`batch_sizes` symbolic the packed LSTM kernel and
`_pad_packed_sequence` pinned the longest length again: [2, 1, 2, 1, 1, 1] graphs over 6 calls. Now NOTE [Results
shaped by data are dynamic in resume functions] (carried_loops.py) and NOTE [Packed kernels with symbolic sizes]
(packed_sequences.py): recompiles only where stock torch.compile recompiles ([1, 0, 1, 0, 0, 0] there; framejit
also compiles the part after the break).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import framejit
from tests.helpers import CountingBackend, eager_frames


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


CALLS = [([5, 3, 4], 6, 0), ([6, 2, 4], 6, 1), ([7, 7], 8, 2), ([3, 5, 2, 4], 6, 3), ([8, 1], 8, 4), ([4, 4, 4], 5, 5)]


def _inputs(lengths, steps, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 20, (len(lengths), steps), generator=g)
    for i, n in enumerate(lengths):
        x[i, n:] = 0
    return x, torch.tensor(lengths)


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
def test_packed_rnn_recompiles_only_when_the_batch_changes(cell):
    torch.manual_seed(0)
    emb, rnn = nn.Embedding(20, 8, padding_idx=0), cell(8, 6, batch_first=True)

    def packed(x, lengths):
        p = pack_padded_sequence(emb(x), lengths, batch_first=True, enforce_sorted=False)
        o, h = rnn(p)
        return pad_packed_sequence(o, batch_first=True, total_length=x.shape[1])[0], h

    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(packed, backend=backend)
    per_call = []
    with torch.no_grad():
        for spec in CALLS:
            x, lengths = _inputs(*spec)
            start = backend.graph_count
            got, expected = compiled(x, lengths), packed(x, lengths)
            per_call.append(backend.graph_count - start)
            torch.testing.assert_close(got, expected)
    assert eager_frames() == before
    assert per_call == [2, 0, 2, 0, 0, 0]  # parent: LSTM [2, 1, 2, 1, 1, 1], GRU [2, 1, 2, 1, 0, 1]


def _masked(x):
    y = x[x > 0]  # its length depends on the data: a break
    return y * 2, y.sum()


def test_a_boolean_mask_result_is_symbolic_in_its_resume_function():
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(_masked, backend=backend)
    per_call = []
    for seed in range(6):
        x = torch.randn(12, generator=torch.Generator().manual_seed(seed))
        start = backend.graph_count
        got, expected = compiled(x), _masked(x)
        per_call.append(backend.graph_count - start)
        torch.testing.assert_close(got, expected)
    assert eager_frames() == before
    assert sum(per_call[1:]) == 0, per_call  # the resume function's first trace serves every length


def test_packed_lstm_with_a_given_state_is_traced_once_per_batch():
    # review revAB HIGH-1: with sizes symbolic, pad_packed_sequence read int(batch_sizes[i]) of the real input
    # under the trace's fake mode (AssertionError): every call ran eagerly and was traced again (traced
    # [2, 2, 2, 1, 1, 1, 1], graphs all 0)
    torch.manual_seed(0)
    lstm = nn.LSTM(2, 3, batch_first=True)

    def hx(x, lengths, h0, c0):
        p = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        o, h = lstm(p, (h0, c0))
        return pad_packed_sequence(o, batch_first=True)[0], h

    backend = CountingBackend()
    compiled = framejit.compile(hx, backend=backend)
    traced, graphs = [], []
    with torch.no_grad():
        for i, lengths in enumerate([[5, 3, 4], [6, 2, 4], [7, 7], [3, 5, 2, 4], [8, 1], [4, 4, 4], [2, 1, 1]]):
            g = torch.Generator().manual_seed(i)
            args = (torch.randn(len(lengths), max(lengths), 2, generator=g), torch.tensor(lengths),
                    torch.randn(1, len(lengths), 3, generator=g), torch.randn(1, len(lengths), 3, generator=g))
            start, start_graphs = framejit.stats()["frames_traced"], backend.graph_count
            got, expected = compiled(*args), hx(*args)
            torch.testing.assert_close(got, expected)
            traced.append(framejit.stats()["frames_traced"] - start)
            graphs.append(backend.graph_count - start_graphs)
    assert sum(graphs) >= 2 and traced[3:] == [0, 0, 0, 0], (traced, graphs)
