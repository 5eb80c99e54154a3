"""A generator whose run ahead draws from an iterator from outside (a global here) is traced lazily, so the
iterator is advanced as far as eager advances it (NOTE [Run aheads that step an iterator from outside] in
framejit/capture/unstarted_generators.py). Before, the run ahead drew it all at the generator's call and that
position was replayed on the real iterator: `g = gen(); return x + 1` left it drained (eager: untouched), and
`next(g)` left it at its end (eager: one item on). Differential: eager vs compiled on fresh iterators and inputs;
the results and the global iterator's remaining items are compared.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

OUTSIDE = None


def over_outside():
    for v in OUTSIDE:
        yield v * 10


def dropped_unstarted(x):
    g = over_outside()  # never drawn: only its liveness to the return is read
    return x + 1, g is None


def drawn_once(x):
    g = over_outside()
    return x + next(g)


def drawn_whole(x):
    s = x
    for v in over_outside():
        s = s + v
    return s


def test_run_ahead_over_an_outside_iterator_advances_it_as_eager():
    global OUTSIDE
    for fn in (dropped_unstarted, drawn_once, drawn_whole):
        compiled = framejit.compile(fn, backend=CountingBackend())
        for n in (2, 3, 3):
            runs = []
            for call in (fn, compiled):
                OUTSIDE = iter(range(n))
                out = call(torch.ones(n))
                runs.append((out, list(OUTSIDE)))
            assert_same(runs[1][0], runs[0][0])
            assert runs[1][1] == runs[0][1]
