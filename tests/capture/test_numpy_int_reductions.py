"""NOTE [NumPy reductions of constant ints] (issue 11, sweep h11fam).

LLaVA-NeXT's pack_image_features checks `np.prod(image_feature.shape) % (...) != 0`: np.prod of a
torch.Size was traced as a torch._numpy op, a 0-d array whose truth value is data, so each check was a graph
break (LlavaNextForConditionalGeneration: 15 graphs over 3 calls where stock torch.compile makes 8). A
reduction of Python ints is now folded into the NumPy scalar eager computes.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


def _check_divisible(x):
    if np.prod(x.shape) % (x.shape[0] * 4) != 0:
        raise ValueError("shape")
    return x * 2


def _reductions(x):
    sizes = [x.shape[0], x.shape[1], 3]
    return x + 1, np.prod(x.shape), np.sum(sizes), np.max(sizes), np.min(x.shape), np.amax(tuple(sizes))


@pytest.mark.parametrize("fn", [_check_divisible, _reductions])
def test_reductions_of_static_sizes_are_folded(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    with logged_breaks() as breaks:
        for n in (4, 4, 8):
            x = torch.randn(2, n)
            got, want = compiled(x), fn(x)
            got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
            torch.testing.assert_close(got[0], want[0])
            for a, b in zip(got[1:], want[1:]):
                assert type(a) is type(b) and a == b
    assert breaks == []
    assert backend.graph_count <= 2


def test_an_empty_max_raises_eagers_error():
    def fn(x, sizes):
        try:
            return x + np.max(sizes)
        except ValueError as e:
            return x - 1, str(e)

    compiled = framejit.compile(fn, backend=CountingBackend())
    for sizes in ([], [], [3]):
        x = torch.randn(3)
        got, want = compiled(x, list(sizes)), fn(x, list(sizes))
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]
        else:
            torch.testing.assert_close(got, want)


def test_float_and_overflowing_reductions_keep_eagers_values():
    def fn(x):
        big = [2 ** 62, 4]  # int64 product wraps silently, as in eager
        return x * 2, np.prod(big), np.sum([1.5, x.shape[0]])

    compiled = framejit.compile(fn, backend=CountingBackend())
    for n in (3, 5):
        x = torch.randn(n)
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert type(got[1]) is type(want[1]) and got[1] == want[1]
        assert float(got[2]) == float(want[2])
