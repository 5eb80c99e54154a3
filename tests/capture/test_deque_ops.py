"""Arithmetic on deques keeps the deque type, as in CPython (`d *= n`, `d * n`, `n * d`, `d + d`)."""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def imul(x, n):
    d = collections.deque([1, 2])
    d *= n
    return x + len(d), d


def mul(x, n):
    d = collections.deque([x.sum().item() > 100, 3])
    return x * len(d * n), d * n, n * d


def add(x, n):
    d = collections.deque(range(n)) + collections.deque([7])
    d.appendleft(-1)
    return x + d[-1], d


def deque_plus_list(x, n):
    return x + n, collections.deque([1]) + [n]


G = collections.deque([1])


def global_imul(x, n):
    global G
    G *= n
    return x + len(G)


@pytest.mark.parametrize("fn", [imul, mul, add, deque_plus_list, global_imul])
def test_deque_arithmetic_matches_eager(fn):
    global G
    compiled = framejit.compile(fn, backend=CountingBackend())
    for n in (2, 3, 2):
        x = torch.randn(3)
        G = collections.deque([1])
        try:
            expected = fn(x, n)
        except TypeError as exc:
            expected = exc
        eager_g = collections.deque(G)
        G = collections.deque([1])
        if isinstance(expected, TypeError):
            with pytest.raises(TypeError, match=str(expected).split("(")[0]):
                compiled(x, n)
            continue
        got = compiled(x, n)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        torch.testing.assert_close(got[0], expected[0])
        for g, e in zip(got[1:], expected[1:]):
            assert type(g) is type(e) and list(g) == list(e)
        assert G == eager_g
