"""`it.__next__()` and `it.__iter__()` of an iterator made in the trace are next(it) and iter(it) (attributes.py,
the IteratorValue case). Before, reading either attribute was a graph break ("attribute '__iter__' of
IteratorValue"), so fullgraph raised where eager steps the iterator."""

import torch

from tests.helpers import run_differential


def _step_by_hand(x, items):
    it = items.__iter__()
    first = it.__next__()
    same = it.__iter__()
    second = next(same)
    rest = [v * x for v in it]
    try:
        it.__next__()
        end = "more"
    except StopIteration:
        end = "stopped"
    return first * x, second, rest, end, same is it


def _generator_by_hand(x, items):
    doubled = (v * 2 for v in items)
    return x + doubled.__next__(), list(doubled.__iter__())


def _bound_next_across_a_break(x, items):
    step = iter(items).__next__
    print("a break")
    return x * step(), step()


def _inputs(seed):
    return torch.randn(2), [1.0 + seed, 2.0, 3.0 + seed]


def test_iterator_dunders_step_like_next_and_iter():
    backend = run_differential(_step_by_hand, _inputs, seeds=(0, 1), fullgraph=True)
    assert backend.graph_count >= 1


def test_generator_dunders():
    run_differential(_generator_by_hand, _inputs, seeds=(0, 1), fullgraph=True)


def test_bound_next_live_at_a_break():
    run_differential(_bound_next_across_a_break, _inputs, seeds=(0, 1), fullgraph=False)
