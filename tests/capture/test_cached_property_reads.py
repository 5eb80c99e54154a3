"""The first read of a functools.cached_property inside compiled code (issue 11, NOTE [cached_property's
first read] in framejit/capture/library_substitutes.py).

Before, `o.prop` of a cached property not yet computed broke: on 3.11 at `with self.lock:` inside
cached_property.__get__, on 3.12 at its `instance.__dict__[name] = val`. Each test runs eagerly on one
object and compiled on an identical twin over several calls and compares the results, the instance dicts
afterwards (the cached value is stored as eager stores it) and how often the property's function ran.
"""
from __future__ import annotations

import functools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks

RUNS = []


class Scaled:
    def __init__(self, n):
        self.n = n

    @functools.cached_property
    def table(self):
        RUNS.append(self.n)  # counts how often the property's function runs
        return torch.arange(self.n, dtype=torch.float32) * self.n


def reads_twice(x, o):
    return x * o.table.sum() + o.table[-1]


def _twins(make, fn, calls):
    """Eager on one object per call, compiled on its twin; (graphs, breaks, eager frames)."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for args in calls:
            mine, twin = make(*args), make(*args)
            RUNS.clear()
            x = torch.randn(3)
            expected = fn(x, mine)
            eager_runs = list(RUNS)
            RUNS.clear()
            torch.testing.assert_close(compiled(x, twin), expected)
            assert RUNS == eager_runs
            assert vars(twin).keys() == vars(mine).keys()
            for key, value in vars(mine).items():
                torch.testing.assert_close(vars(twin)[key], value)
    return backend.graph_count, list(breaks), framejit.stats()["eager_frames"] - before


def test_the_first_read_is_traced_and_stores_the_value():
    graphs, breaks, eager = _twins(Scaled, reads_twice, [(3,), (3,), (4,)])
    assert breaks == [] and eager == 0 and graphs <= 2


def test_a_read_after_the_value_is_cached_uses_it():
    o_eager, o_compiled = Scaled(3), Scaled(3)
    compiled = framejit.compile(reads_twice)
    RUNS.clear()
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, o_compiled), reads_twice(x, o_eager))
    assert RUNS == [3, 3]  # once per object, as eager
    o_compiled.__dict__["table"] = torch.ones(2)  # replaced by hand: read from the dict, not computed
    o_eager.__dict__["table"] = torch.ones(2)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, o_compiled), reads_twice(x, o_eager))
    assert RUNS == [3, 3]


class Guarded:
    """A __setattr__ that refuses writes: cached_property writes the instance dict past it."""

    def __init__(self, n):
        object.__setattr__(self, "n", n)

    def __setattr__(self, name, value):
        raise AttributeError("read-only")

    @functools.cached_property
    def doubled(self):
        RUNS.append(self.n)
        return self.n * 2


class Slotted:
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    doubled = Guarded.__dict__["doubled"]  # a cached_property on a class without instance dicts


def uses_doubled(x, o):
    try:
        return x + o.doubled
    except TypeError:
        return x - 1


def test_a_class_with_its_own_setattr_caches_past_it():
    graphs, breaks, eager = _twins(Guarded, uses_doubled, [(2,), (5,)])
    assert eager == 0


def test_a_class_without_instance_dicts_raises_as_eager():
    for n in (2, 3):
        x = torch.randn(3)
        torch.testing.assert_close(framejit.compile(uses_doubled)(x, Slotted(n)), uses_doubled(x, Slotted(n)))


class Head(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    @functools.cached_property
    def mask(self):
        RUNS.append(self.n)
        return torch.tril(torch.ones(self.n, self.n))

    def forward(self, x):
        return x @ self.mask


@pytest.mark.parametrize("n", [3, 4])
def test_a_module_caching_a_tensor_in_forward_matches_eager(n):
    m_eager, m_compiled = Head(n), Head(n)
    compiled = framejit.compile(m_compiled)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for _ in range(3):
            x = torch.randn(2, n)
            RUNS.clear()
            expected = m_eager(x)
            eager_runs = list(RUNS)
            RUNS.clear()
            torch.testing.assert_close(compiled(x), expected)
            assert RUNS == eager_runs
    torch.testing.assert_close(vars(m_compiled)["mask"], vars(m_eager)["mask"])
    assert list(breaks) == [] and framejit.stats()["eager_frames"] == before
