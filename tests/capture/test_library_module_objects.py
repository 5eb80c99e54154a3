"""Plain objects kept at module level by a library (NOTE [Objects held by library modules], issue 11).

`torch.distributions.constraints.real` is a `_Real` instance that every Transform's `domain`/`codomain`
returns; transformers' time-series likelihood heads (TimeSeriesTransformer, Informer, Autoformer) read it
through `TransformedDistribution.log_prob`. Reading it was a graph break ("cannot model the object _Real"),
8 graphs per forward where stock torch.compile has 1. Each test runs eagerly and compiled over fresh
inputs and compares values, identities, graph and break counts, and that no frame ran eagerly.
"""
from __future__ import annotations

import torch
from torch.distributions import AffineTransform, Normal, TransformedDistribution, constraints

import framejit
from tests.helpers import CountingBackend, logged_breaks, eager_frames


def _compiled(fn):
    backend = CountingBackend()
    return framejit.compile(fn, backend=backend), backend


def test_transformed_distribution_log_prob_is_one_graph():
    def log_prob(loc, scale, value):
        base = Normal(loc, scale, validate_args=False)
        dist = TransformedDistribution(base, [AffineTransform(loc=1.0, scale=2.0)], validate_args=False)
        return dist.log_prob(value), dist.base_dist.mean

    compiled, backend = _compiled(log_prob)
    eager0 = eager_frames()
    gen = torch.Generator().manual_seed(0)
    with logged_breaks() as breaks:
        for n in (4, 4, 4):
            args = (torch.randn(n, generator=gen), torch.rand(n, generator=gen) + 0.5, torch.randn(n, generator=gen))
            want, got = log_prob(*args), compiled(*args)
            torch.testing.assert_close(got, want)
    assert breaks == []
    assert backend.graph_count == 1
    assert eager_frames() == eager0


def test_library_object_is_returned_as_itself_and_its_methods_are_traced():
    def f(x):
        c = constraints.positive
        return x * (c.event_dim + 2), c.check(x), c, constraints.real

    compiled, backend = _compiled(f)
    with logged_breaks() as breaks:
        for x in (torch.randn(5), torch.randn(5).abs(), torch.randn(5)):
            want, got = f(x), compiled(x)
            torch.testing.assert_close(got[:2], want[:2])
            assert got[2] is constraints.positive and got[3] is constraints.real
    assert breaks == []
    assert backend.graph_count == 1


def test_replacing_or_changing_the_library_object_is_seen(monkeypatch):
    def f(x):
        c = constraints.real
        return x * (c.event_dim + 1) + getattr(c, "tag", 0.0)

    compiled, _ = _compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    monkeypatch.setattr(constraints, "real", constraints.independent(constraints.real, 1))  # event_dim 1
    torch.testing.assert_close(compiled(x), f(x))
    monkeypatch.setattr(constraints.real, "tag", 5.0, raising=False)  # an attribute of the object itself
    torch.testing.assert_close(compiled(x), f(x))
    monkeypatch.undo()
    torch.testing.assert_close(compiled(x), f(x))
