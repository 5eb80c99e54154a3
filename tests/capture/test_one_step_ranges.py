"""range(start, stop, step) with a symbolic step that yields one item (NOTE [Ranges of one step] in
capture/sym_arith.py): transformers' EncodecModel._encode loops `for offset in range(0, input_length, stride)`
with stride = input_length. Folding the range specialised the length: the frame compiled once per length
until the recompile limit ran it eagerly (as stock torch.compile does for this program)."""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend

SIZES = range(3, 15)


def _chunks(x):
    n = x.shape[-1]
    outs = []
    for offset in range(0, n, n):
        outs.append(x[..., offset:offset + n] * 2)
    return torch.stack(outs)


def _escaping_iterator(x):
    n = x.shape[-1]
    it = iter(range(0, n, n))
    return x + 1, it, type(it).__name__


def _other_uses(x):
    n = x.shape[0]
    r = range(0, n, n)
    return x * len(r), r.stop, r.step, list(r), [i for i in range(1, n, n + 2)], list(range(n - 1, n, n))


def _run(fn, check=None) -> tuple[int, int]:
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    for n in SIZES:
        x = torch.randn(n)
        got, want = compiled(x), fn(x)
        if check is not None:
            got, want = check(got, want)
        torch.testing.assert_close(got, want)
    return backend.graph_count, framejit.stats()["eager_frames"] - before


def test_a_loop_over_a_one_step_range_serves_every_length():
    graphs, eager = _run(_chunks)
    assert eager == 0 and graphs <= 2  # before: 8 graphs, then the frame ran eagerly (the recompile limit)


def test_an_escaping_iterator_is_a_range_iterator_over_the_right_items():
    def check(got, want):
        assert type(got[1]) is type(want[1]) and list(got[1]) == list(want[1]) and got[2] == want[2]
        return got[0], want[0]
    _run(_escaping_iterator, check)


def test_other_uses_of_the_range_read_its_values():
    _run(_other_uses)
