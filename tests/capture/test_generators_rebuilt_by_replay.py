"""Generators run ahead in the trace that outlive the graph are rebuilt by calling the generator function again
and stepping it to the trace's position (NOTE [Generators rebuilt by replay], capture/lazy_combinators.py;
issue 11). They broke at the call that made them ("a generator made in the compiled region escapes it").
Each program runs eagerly and compiled on fresh inputs of changing shape; the returned generator must be a
real generator at eager's position, with eager's remaining items."""
from __future__ import annotations

import types

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames, logged_breaks

STATE = [1.0]


def _whoo(t):
    yield t + 1
    yield t * 2
    yield t - 3


def _rest(value):
    """A comparable form: tensors as lists, generators/iterators as (type, remaining items)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.tolist())
    if isinstance(value, (tuple, list)):
        return [_rest(v) for v in value]
    if hasattr(value, "__next__"):
        return (type(value), [_rest(v) for v in value])
    return value


def _run(f, calls=3):
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    before = eager_frames()
    with logged_breaks() as records:
        for i in range(calls):
            STATE[0] = 1.0
            expected = f(torch.arange(i + 1.0))
            STATE[0] = 1.0
            actual = compiled(torch.arange(i + 1.0))
            assert _rest(actual) == _rest(expected)
    assert eager_frames() == before
    return backend, list(records)


def test_returned_generators_are_real_generators_at_eagers_position():
    def fresh(t):
        return _whoo(t), t.sin()

    def advanced(t):
        g = _whoo(t)
        first = next(g)
        return g, first

    def exhausted(t):
        g = _whoo(t)
        return g, list(g)

    def two_made_here(t):
        g1, g2 = _whoo(t), _whoo(t + 1)
        next(g2)
        return (g1, g2), t.cos()

    for f in (fresh, advanced, exhausted, two_made_here):
        backend, records = _run(f)
        assert records == [], f.__name__
        assert backend.graph_count >= 1
    g, _ = framejit.compile(advanced, backend="eager")(torch.ones(2))
    assert type(g) is types.GeneratorType and g.gi_frame is not None


def test_one_generator_object_however_often_it_is_returned_and_zips_over_it():
    def same(t):
        g = _whoo(t)
        next(g)
        return g, g

    compiled = framejit.compile(same, backend="eager")
    g1, g2 = compiled(torch.ones(2))
    assert g1 is g2 and [v.tolist() for v in g1] == [[2.0, 2.0], [-2.0, -2.0]]

    def zipped(t):
        def local_gen(u, scale=2):  # made in the trace, with a default
            yield u * scale
            yield u + scale
        return zip(range(3), local_gen(t)), t.sin()

    backend, records = _run(zipped)
    assert records == []


def test_generators_replay_cannot_reproduce_still_break_where_made():
    def random_items(t):
        def draws(u):
            yield u + torch.rand(u.shape)
            yield u + torch.rand(u.shape)
        return draws(t)

    def reads_mutated_state(t):
        def reads(u):
            yield u * STATE[0]
            yield u * STATE[0]
        g = reads(t)
        next(g)
        STATE[0] += 1  # eager's generator already stepped past its first read
        return g

    torch.manual_seed(0)
    expected = list(random_items(torch.ones(2)))
    torch.manual_seed(0)
    actual = list(framejit.compile(random_items, backend="eager")(torch.ones(2)))
    assert [v.tolist() for v in actual] == [v.tolist() for v in expected]
    backend, records = _run(reads_mutated_state)
    assert any("mutated" in r for r in records)
