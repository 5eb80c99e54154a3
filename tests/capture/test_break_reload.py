"""Values read from outside containers before a graph break keep the value they had when read, even when
the call at the break changes the container (NOTE [Reload before the break's call])."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

L: list = []
D: dict = {}
T: list = []


@framejit.disable
def mutate():
    L[0] = L[0] + 100
    L.append(5)
    D["k"] = D.get("k", 0) + 1
    T[0] = T[0] * 2


def reset(n=2):
    L[:] = list(range(1, n + 1))
    D.clear()
    D["a"] = 1
    T[:] = [torch.ones(2)]


def read_then_call(x):
    a = L[0]
    n = len(L)
    mutate()
    return x + L[0] + a + len(L) * 10 + n * 100


def dict_get_then_call(x):
    g = D.get("k")
    mutate()
    return x + (0 if g is None else g) + D.get("k", -1)


def iterator_across_call(x):
    it = iter(L)
    a = next(it)
    mutate()
    b = next(it)
    c = next(it)
    return x + a + b + c


def tensor_item_then_call(x):
    t = T[0]
    mutate()
    return x + t + T[0]


def loop_with_call(x):
    total = x
    for i in range(2):
        v = L[i]
        mutate()
        total = total + v + L[i]
    return total


def prepare(call: int) -> None:
    """The state before call `call`: two lengths, and an item changed between calls."""
    reset(2 if call < 2 else 3)
    L[1] += 7 * call


@pytest.mark.parametrize("fn", [read_then_call, dict_get_then_call, iterator_across_call, tensor_item_then_call,
                                loop_with_call])
def test_value_read_before_the_break_call_is_not_reread(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for call in range(4):
        x = torch.randn(2)
        prepare(call)
        expected = fn(x)
        state = (list(L), dict(D), T[0].clone())
        prepare(call)
        got = compiled(x)
        torch.testing.assert_close(got, expected)
        assert L == state[0] and D == state[1]
        torch.testing.assert_close(T[0], state[2])
    assert backend.graph_count >= 1  # captured, not run eagerly
