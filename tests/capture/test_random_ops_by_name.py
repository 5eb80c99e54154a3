"""Which graph ops draw random numbers, judged by name (NOTE [Random ops by name], issue 11, h11hf6).

A data check that only raises (`if not torch._is_all_true(valid): raise ValueError`, as torch.distributions'
argument validation) is speculated to pass when a failing graph can be rerun eagerly with the same random
draws (NOTE [Speculated checks]). Substring matching made `permute` ("perm") and `F.normalize` ("normal")
random ops, so a check after them was a graph break (transformers' Autoformer likelihood head: 4 breaks where
stock torch.compile has none); `rrelu` and `torch._standard_gamma` were not counted as random at all, so a
failing check after them reran the frame with other random numbers than eager drew.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, logged_breaks


def _checked(y):
    if not torch._is_all_true(y.abs().sum() < 1e6):
        raise ValueError("too large")
    return y


@pytest.mark.parametrize("op", [lambda x: x.permute(1, 0), lambda x: F.normalize(x, dim=-1),
                                lambda x: F.pixel_shuffle(x.reshape(1, 4, 1, 2), 2).reshape(4, 2)])
def test_a_check_after_a_deterministic_op_is_speculated(op):
    def f(x):
        return _checked(op(x) * 2 + x.sum()) + 1

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager0 = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for seed in range(3):
            x = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(compiled(x), f(x))
        big = torch.full((4, 2), 1e7)
        with pytest.raises(ValueError, match="too large"):
            f(big)
        with pytest.raises(ValueError, match="too large"):
            compiled(big)
    assert breaks == []
    assert backend.graph_count == 1
    assert framejit.stats()["eager_frames"] == eager0


@pytest.mark.parametrize("draw", [lambda x: F.rrelu(x, training=True),
                                  lambda x: torch._standard_gamma(x.abs() + 1)])
def test_a_failing_check_after_a_random_op_draws_as_eager(draw):
    """The check fails on the second input: eager draws once and raises; the compiled call must leave the
    generator where eager leaves it (a rerun after a speculated check would draw twice)."""
    def f(x):
        return _checked(draw(x) * x)

    compiled = framejit.compile(f, backend=CountingBackend())
    for x in (torch.randn(4, 2), torch.full((4, 2), 1e4), torch.randn(4, 2)):
        results = []
        for fn in (f, compiled):
            torch.manual_seed(7)
            try:
                out = fn(x)
            except ValueError:
                out = "raised"
            results.append((out, torch.rand(3)))
        (want, want_next), (got, got_next) = results
        assert type(got) is type(want)
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_next, want_next)
