"""map / starmap / accumulate whose function is a builtin (abs, pow, sum, max) that computes on tensors, made
under no_grad and drawn with grad on, give eager's rows (with grad): the builtin computes at each draw (review
revV HIGH-3; NOTE [Torch state at each draw] in capture/generator_reach.py)."""
import itertools

import pytest
import torch

import framejit
from tests.helpers import run_differential


def map_abs(x):
    with torch.no_grad():
        m = map(abs, [x, -x])
    return [(t, t.requires_grad) for t in m]


def starmap_pow(x):
    with torch.no_grad():
        p = itertools.starmap(pow, [(x, 2), (x, 3)])
    return [(t, t.requires_grad) for t in p]


def map_sum(x):
    with torch.no_grad():
        s = map(sum, [[x, x], [x, x * 2]])
    return [(t, t.requires_grad) for t in s]


def accumulate_pow(x):
    with torch.no_grad():
        a = itertools.accumulate([x, x + 1], pow)
    return [(t, t.requires_grad) for t in a]


def map_abs_drawn_without_grad(x):
    m = map(abs, [x, -x])
    with torch.no_grad():
        return [(t, t.requires_grad) for t in m]


def leaf(seed):
    n = 2 + seed
    return (torch.arange(1.0, n + 1).requires_grad_(True),)


@pytest.mark.parametrize("fn", [map_abs, starmap_pow, map_sum, accumulate_pow, map_abs_drawn_without_grad],
                         ids=lambda f: f.__name__)
def test_builtins_over_tensors_compute_under_the_state_of_their_draw(fn):
    run_differential(fn, leaf, seeds=(0, 0, 1), fullgraph=False)


def over_constants(x):
    with torch.no_grad():
        m = map(abs, [1, -2])
        p = itertools.starmap(pow, [(2, 3)])
    return x * sum(m) + sum(p)


def test_builtins_over_constants_stay_one_graph():
    run_differential(over_constants, leaf, seeds=(0, 1), fullgraph=True)
    framejit.reset()
    explained = framejit.explain(over_constants)(*leaf(0))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
