"""Idioms from a side-by-side sweep of framejit against stock torch.compile (issue 11, helper h11sweep).

Each program is written as model code writes it, runs eagerly and compiled on fresh inputs over several
calls, and asserts the graph count (equal to what stock torch.compile captures) and that no frame ran
wholly eagerly.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


# ---- itertools.pairwise over a layer list (stock: 1 graph; framejit before: 0 graphs, an eager frame) -------
def test_pairwise_over_a_module_list_is_one_graph():
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])

    def f(x):
        return sum((a(x) * b(x)).sum() for a, b in itertools.pairwise(layers))

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = _eager_frames()
    for seed in range(3):
        x = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x), f(x))
    assert backend.graph_count == 1
    assert _eager_frames() == eager_before


def test_pairwise_follows_the_list_it_was_made_from():
    """pairwise is lazy: a list appended to before the loop draws its rows gives one more pair."""
    def f(x, items):
        pairs = itertools.pairwise(items)
        items.append(x * 5)
        return [a * b for a, b in pairs]

    compiled = framejit.compile(f, backend=CountingBackend())
    for n in (2, 3):
        x = torch.randn(3)
        want = f(x, [x + i for i in range(n)])
        got = compiled(x, [x + i for i in range(n)])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


# ---- a loop over an itertools object made by Python (passed in) ran wholly eagerly ('ObjectValue' has no
# attribute 'next' at FOR_ITER of the resume function); it now steps in Python, as generators do -----------
_ITERATORS = {
    "pairwise": lambda x: itertools.pairwise([x, x + 1, x + 2]),
    "islice": lambda x: itertools.islice([x, x + 1, x + 2], 2),
    "accumulate": lambda x: itertools.accumulate([x, x + 1, x * 3]),
    "starmap": lambda x: itertools.starmap(torch.mul, [(x, x), (x, 2)]),
}


@pytest.mark.parametrize("kind", sorted(_ITERATORS))
def test_a_loop_over_an_itertools_object_from_outside_runs_compiled(kind):
    make = _ITERATORS[kind]

    def f(x, it):
        s = x * 0
        for v in it:
            s = s + (v[0] * v[1] if isinstance(v, tuple) else v)
        return s

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = _eager_frames()
    for seed in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x, make(x)), f(x, make(x)))
    assert _eager_frames() == eager_before


def test_pairwise_with_a_break_in_the_loop_body():
    def f(x, items):
        s = x
        for a, b in itertools.pairwise(items):
            print("step")
            s = s + a * b
        return s

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = _eager_frames()
    for n in (3, 4):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x, [x + i for i in range(n)]), f(x, [x + i for i in range(n)]))
    assert _eager_frames() == eager_before
