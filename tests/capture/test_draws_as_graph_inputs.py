"""A number drawn from Python's `random` module used in tensor arithmetic (NOTE [Draws as graph inputs] in
capture/python_draws.py): `(x + 1) * random.uniform(0, 1)` broke at the multiplication (fullgraph raised); the
draw is now a float input of the graph, made by the transformed code before the graph call. Every program runs
eagerly and compiled after the same `random.seed`, on new inputs each call; results (values and dtypes) and the
random module's state afterwards must be eager's."""
from __future__ import annotations

import random

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, tuple):
        return type(b) is tuple and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _float_inputs(backend: CountingBackend, index: int) -> int:
    return sum(type(e) is float for e in backend.example_inputs[index])


def _check(fn, make, *, fullgraph: bool, calls: int = 3) -> tuple[CountingBackend, list]:
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    saved, results = random.getstate(), []
    try:
        for seed in range(calls):
            args = make(seed)
            random.seed(seed)
            want = fn(*args)
            want_state = random.getstate()
            random.seed(seed)
            got = compiled(*args)
            assert random.getstate() == want_state, f"seed {seed}: the random module's state differs"
            assert _same(got, want), (seed, got, want)
            results.append(got)
    finally:
        random.setstate(saved)
    return backend, results


def _scaled(x):
    return (x + 1) * random.uniform(0, 1)


def test_a_drawn_scale_is_one_graph_and_new_on_every_call():
    backend, results = _check(_scaled, lambda seed: (torch.ones(3) * (seed + 1),), fullgraph=True)
    assert backend.graph_count == 1
    assert sum(n.op == "placeholder" for n in backend.graphs[0].graph.nodes) == 2  # x and the draw
    assert len({r[0].item() / (i + 2) for i, r in enumerate(results)}) == 3  # each call draws its own number


def _mixed(x, n):
    p = random.random()
    y = p * x + n.sub(p)  # reflected and method forms
    mask = x < p
    for _ in range(2):
        y = torch.mul(y, random.uniform(2, 3)) / random.uniform(1, 2)
    return y, mask, n.to(torch.int32) * p, p


@pytest.mark.parametrize("fullgraph", [True, False])
def test_draws_in_arithmetic_comparisons_and_loops_stay_in_the_graph(fullgraph):
    backend, _ = _check(_mixed, lambda seed: (torch.randn(3 + seed), torch.randn(3 + seed) * 4),
                        fullgraph=fullgraph)
    assert all(_float_inputs(backend, i) == 5 for i in range(backend.graph_count))  # p and the loop's 4 draws


def _around_a_break(x):
    y = x * random.random()
    print("between")  # a break: the draw above is an input of the graph before it
    z = y + random.uniform(1, 2) * x
    if random.random() < 2.0:  # a branch on a draw is still a break, with eager's number
        z = z - 1
    return z


def test_draws_feeding_graphs_around_breaks(capsys):
    before = framejit.stats()["eager_frames"]
    backend, _ = _check(_around_a_break, lambda seed: (torch.randn(2 + seed),), fullgraph=False)
    assert framejit.stats()["eager_frames"] == before
    assert any(_float_inputs(backend, i) for i in range(backend.graph_count))  # the graph before the print
    assert capsys.readouterr().out.count("between") == 6  # eager and compiled, 3 calls each
