"""`for e in reversed(lst)` whose body appends to `lst` (a Python autograd's tape walked backwards while the
backward pass records onto it): CPython's reverse iterator never reads the appended items, so the loop stays in
the graph (NOTE [reversed over a list] in capture/lazy_combinators.py). Before, any change to the list was a
graph break where reversed() was made ("what reversed() reads changed while it is consumed")."""

import pytest
import torch

from tests.helpers import run_differential


class Entry:
    def __init__(self, scale):
        self.scale = scale

    def __eq__(self, other):  # the tapes of the eager and the compiled call are compared item by item
        return type(other) is Entry and other.scale == self.scale


def _backward_over_tape(x, tape):
    grads = []
    for entry in reversed(tape):
        grads.append(x * entry.scale)
        tape.append(Entry(entry.scale + 1))  # recorded while walking back: never visited
    return grads, len(tape), [e.scale for e in tape]


def _appended_before_drawn(x, lst):
    r = reversed(lst)
    lst.append(x * 9)
    return [e * x for e in r], len(lst)


def _pops_while_consumed(x, lst):  # CPython stops early once the index passes the shorter list
    out = []
    for e in reversed(lst):
        out.append(e * x)
        if len(lst) > 2:
            lst.pop(0)
    return out


def _replaces_an_item_still_to_come(x, lst):
    out = []
    for i, e in enumerate(reversed(lst)):
        out.append(e * x + i)
        lst[0] = x * 100
    return out


def _inserts_at_the_front(x, lst):
    r = reversed(lst)
    lst.insert(0, x * 7)
    return [e * x for e in r]


def test_appends_while_walking_back_stay_in_one_graph():
    backend = run_differential(_backward_over_tape, lambda seed: (torch.randn(2), [Entry(s) for s in range(2 + seed)]),
                               seeds=(1, 2), fullgraph=True)
    assert backend.graph_count == 2  # one per tape length


def test_append_before_the_first_row():
    run_differential(_appended_before_drawn, lambda seed: (torch.randn(2), [torch.randn(2) for _ in range(3)]),
                     seeds=(0, 1), fullgraph=True)


@pytest.mark.parametrize("fn", [_pops_while_consumed, _replaces_an_item_still_to_come, _inserts_at_the_front])
def test_other_changes_still_run_lazily(fn):
    run_differential(fn, lambda seed: (torch.randn(2), [torch.randn(2) for _ in range(4 + seed)]), seeds=(0, 1),
                     fullgraph=False)
