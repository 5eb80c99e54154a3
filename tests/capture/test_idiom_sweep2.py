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
from tests.helpers import CountingBackend, eager_frames


# ---- itertools.pairwise over a layer list (stock: 1 graph; framejit before: 0 graphs, an eager frame) -------
def test_pairwise_over_a_module_list_is_one_graph():
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])

    def f(x):
        return sum((a(x) * b(x)).sum() for a, b in itertools.pairwise(layers))

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for seed in range(3):
        x = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x), f(x))
    assert backend.graph_count == 1
    assert eager_frames() == eager_before


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
    eager_before = eager_frames()
    for seed in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x, make(x)), f(x, make(x)))
    assert eager_frames() == eager_before


def test_pairwise_with_a_break_in_the_loop_body():
    def f(x, items):
        s = x
        for a, b in itertools.pairwise(items):
            print("step")
            s = s + a * b
        return s

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = eager_frames()
    for n in (3, 4):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x, [x + i for i in range(n)]), f(x, [x + i for i in range(n)]))
    assert eager_frames() == eager_before


# ---- a module (or object) whose class defines its own __getattr__ (config values served from a dict, falling
# back to nn.Module's): stock 1 graph; framejit before broke at every such read (2 graphs, 5 frames) ----------
class ConfigModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self._extra = {"scale": 2.0}

    def __getattr__(self, name):
        if name != "_extra" and name in self.__dict__.get("_extra", {}):
            return self._extra[name]
        return super().__getattr__(name)

    def forward(self, x):
        return self.lin(x) * self.scale + (1.0 if hasattr(self, "offset") else 0.0)


def test_a_module_with_its_own_getattr_is_one_graph_and_follows_its_dict():
    torch.manual_seed(0)
    m = ConfigModule()
    backend = CountingBackend()
    compiled = framejit.compile(m.forward, backend=backend)
    eager_before = eager_frames()
    for step in range(4):
        if step == 2:
            m._extra["scale"] = 5.0  # the dict __getattr__ reads changed: the guard on it recompiles
        if step == 3:
            m._extra["offset"] = 1  # hasattr now finds it through __getattr__
        x = torch.randn(3, 2)
        torch.testing.assert_close(compiled(x), m(x))
    assert backend.graph_count == 3
    assert eager_frames() == eager_before


class Delegating:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_an_instance_attribute_set_later_shadows_getattr():
    class Inner:
        k = 3

    d = Delegating(Inner())

    def f(x):
        return x * d.k

    compiled = framejit.compile(f, backend=CountingBackend())
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    d.k = 7  # now in the instance dict: __getattr__ is not called
    torch.testing.assert_close(compiled(x), x * 7)
    del d.k
    Inner.k = 11
    torch.testing.assert_close(compiled(x), x * 11)
