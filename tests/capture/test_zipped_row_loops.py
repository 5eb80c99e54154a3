"""A for loop over enumerate(zip(rows of tensors)) whose body breaks on data runs as Python
(NOTE [Rows zipped and enumerated] in capture/python_loops.py): HF FastSpeech2's length regulator."""
import torch

import framejit
from tests.helpers import CountingBackend


def length_regulator(embeddings, durations):
    if durations.sum() == 0:
        durations[durations.sum(dim=1).eq(0)] = 1
    max_len = torch.sum(durations, dim=1).max()
    out = torch.zeros((embeddings.size(0), max_len, embeddings.size(2)))
    for i, (emb, dur) in enumerate(zip(embeddings, durations)):
        repeated = torch.repeat_interleave(emb, dur, dim=0)
        out[i, : repeated.size(0)] = repeated
    return out * 2


def _inputs(seed, batch, seq):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, 4, generator=g), torch.randint(0, 3, (batch, seq), generator=g)


def _run(fn, calls):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    counts = []
    for args in calls:
        want = fn(*[a.clone() for a in args])
        got = compiled(*[a.clone() for a in args])
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        counts.append(backend.graph_count)
    return counts


def test_length_regulator_matches_eager_and_its_graphs_do_not_grow_with_rows():
    framejit.reset()
    two = _run(length_regulator, [_inputs(0, 2, 5), _inputs(1, 2, 5), _inputs(2, 3, 7)])
    framejit.reset()
    five = _run(length_regulator, [_inputs(3, 5, 5)])
    # stepped, every step of the loop was a resume function traced again (measured before: 5 graphs at 2 rows, 9 at 5)
    assert five[0] == two[0], (two, five)



def length_regulator_returning_the_buffer(embeddings, durations):
    max_len = torch.sum(durations, dim=1).max()
    out = torch.zeros((embeddings.size(0), max_len, embeddings.size(2)))
    for i, (emb, dur) in enumerate(zip(embeddings, durations)):
        repeated = torch.repeat_interleave(emb, dur, dim=0)
        out[i, : repeated.size(0)] = repeated
    return out


def test_the_rows_taken_before_a_loop_run_as_python_are_not_a_graph():
    """NOTE [Graphs that only select rows]: the frame after `torch.zeros` only takes the rows the loop run as
    Python steps over; they were a graph of subscripts compiled again for each data-dependent `max_len` and
    batch (3/4/7/7 graphs; stock torch.compile runs that frame as Python: 1/1/2/2 here, measured)."""
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(length_regulator_returning_the_buffer, backend=backend)
    counts = []
    for seed, batch, seq in ((0, 2, 5), (1, 2, 5), (2, 3, 7), (4, 3, 7)):  # max_len 8, 5, 8, 7
        args = _inputs(seed, batch, seq)
        want = length_regulator_returning_the_buffer(*[a.clone() for a in args])
        torch.testing.assert_close(compiled(*args), want, rtol=0, atol=0)
        counts.append(backend.graph_count)
    assert counts == [1, 1, 2, 2]  # the max_len graph, again for the new batch size
