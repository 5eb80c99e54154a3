"""`n in CACHE` with n a symbolic int absent from a dict or set from outside that grows between calls (issue 13):
all its keys were read and guarded, so each new key missed the entry, and the recompile limit then ran the frame
eagerly (stock torch.compile the same: 8 graphs and its limit). Now only `(n in CACHE) is False` is guarded (NOTE
[Symbolic ints absent from containers from outside] in comparisons.py): one symbolic entry serves every absent n
however the container grows, and a call whose n is present misses it.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

CACHE: dict = {}
SEEN: set = set()


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    CACHE.clear()
    SEEN.clear()
    yield
    framejit.reset()


def _scaled(x, n):
    x = x + 1
    if n in CACHE:
        return x * CACHE[n]
    return x * n


def _flagged(x, n):
    x = x + 1
    return x * (2 if n not in SEEN else 3)


def _run(fn, values, grow):
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend)
    for i, n in enumerate(values):
        grow(i, n)
        torch.testing.assert_close(compiled(torch.ones(2), n), fn(torch.ones(2), n), rtol=0, atol=0)
    assert eager_frames() == before
    return backend.graph_count


SIZES = [3, 5, 7, 4, 9, 6, 8, 10, 11, 12]


def test_a_dict_that_grows_between_calls_keeps_one_symbolic_entry():
    graphs = _run(_scaled, SIZES, lambda i, n: CACHE.__setitem__(100 + i, 2.0))
    assert graphs == 2  # parent: 8 and the recompile limit (an eager frame)


def test_a_set_that_grows_between_calls_keeps_one_symbolic_entry():
    graphs = _run(_flagged, SIZES, lambda i, n: SEEN.add(1000 + i))
    assert graphs == 2  # parent: 8 and the recompile limit


def _grow_then_hold(i, n):
    CACHE[200 + i] = 1.0
    if i in (4, 7):
        CACHE[n] = 4.0  # now present: the absent entry must miss
    if i == 6:
        CACHE[float(n)] = 5.0  # an equal float key holds the int too


def test_a_key_equal_to_n_added_later_misses_the_absent_entry():
    graphs = _run(_scaled, SIZES, _grow_then_hold)
    assert graphs <= 5


def _offset(x, state):
    x = x + 1
    n = state.last + 1  # a computed int: guarded through its input's expression
    if n in CACHE:
        return x * CACHE[n]
    return x * n


class _State:
    last = 0


def test_a_computed_int_absent_then_present():
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(_offset, backend=backend)
    state = _State()
    for i, last in enumerate([3, 4, 5, 6, 8, 9, 10]):
        state.last = last
        CACHE[last * 100] = 1.0
        if i == 4:
            CACHE[9] = 7.0  # 8 + 1: present from this call on
        torch.testing.assert_close(compiled(torch.ones(2), state), _offset(torch.ones(2), state), rtol=0, atol=0)
    assert eager_frames() == before
    assert backend.graph_count == 3  # static, symbolic absent, 9 present (parent: 7)
