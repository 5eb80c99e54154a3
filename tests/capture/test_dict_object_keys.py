"""Dicts from outside keyed by immutable values of the standard library (namedtuples, frozensets, complex
numbers, ranges, dates) are captured, their keys guarded by type and value (NOTE [Immutable values as
dict keys] in capture/values/immutable_keys.py).

Before, such a dict argument was "non-constant keys", where no graph break could be taken: the whole frame ran
eagerly (hhuntG6 M1: `y = x * 2 + 1; return y * scales[Key(0, 1)]` gave 0 graphs, 1 eager frame; even `len(d)`).
"""
from __future__ import annotations

import collections
import datetime

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

Key = collections.namedtuple("Key", "layer head")

KEYS = {
    "namedtuple": (Key(0, 1), Key(1, 0), Key(2, 2)),
    "nested": ((Key(0, 1), "q"), (Key(1, 0), "k"), (Key(2, 2), "v")),
    "frozenset": (frozenset({1, 2}), frozenset({"a"}), frozenset()),
    "complex": (1j, complex(2, -0.0), complex(0.5, 3)),
    "range": (range(3), range(1, 9, 2), range(5, 5)),
    "date": (datetime.date(2020, 1, 2), datetime.date(1999, 12, 31), datetime.timedelta(days=3)),
}


def _f(x, scales, first):
    y = x * 2 + 1
    total = 0.0
    for k, v in scales.items():
        total += v * len(str(k))
    return y * scales[first] + total + len(scales), [repr(k) for k in scales]


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_dict_argument_with_immutable_keys_is_captured(kind):
    a, b, c = KEYS[kind]
    backend = CountingBackend()
    compiled = framejit.compile(_f, backend=backend)
    before = _eager_frames()
    eager_d, jit_d = {a: torch.tensor(2.0), b: torch.tensor(3.0)}, {a: torch.tensor(2.0), b: torch.tensor(3.0)}
    for i in range(3):  # values (tensors) changed between calls: one graph
        x = torch.full((2,), float(i))
        expected, actual = _f(x, eager_d, a), compiled(x, jit_d, a)
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1], (kind, i)
        eager_d[b] = jit_d[b] = torch.tensor(float(i + 4))
        eager_d[a] = jit_d[a] = torch.rand(())
    assert backend.graph_count == 1
    for change, key in (("add", c), ("remove", b), ("add", b)):  # a graph per key set, never eager
        if change == "add":
            eager_d[key] = jit_d[key] = torch.tensor(7.0)
        else:
            del eager_d[key], jit_d[key]
        x = torch.randn(3)
        expected, actual = _f(x, eager_d, a), compiled(x, jit_d, a)
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1], (kind, change)
    assert backend.graph_count == 4
    assert _eager_frames() == before


def test_namedtuple_key_made_in_the_frame():
    def f(x, scales):
        y = x * 2 + 1
        return y * scales[Key(0, 1)] + len(scales)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    before = _eager_frames()
    scales = {Key(0, 1): torch.tensor(2.0), Key(1, 0): torch.tensor(3.0)}
    for i in range(3):
        x = torch.full((3,), float(i))
        assert torch.equal(compiled(x, scales), f(x, scales)), i
        scales[Key(0, 1)] = torch.tensor(float(i) + 0.5)
    assert backend.graph_count == 1
    scales.pop(Key(1, 0))
    assert torch.equal(compiled(torch.ones(2), scales), f(torch.ones(2), scales))
    del scales[Key(0, 1)]
    with pytest.raises(KeyError):
        f(torch.ones(2), scales)
    with pytest.raises(KeyError):
        compiled(torch.ones(2), scales)
    assert _eager_frames() == before


# keys that `==` equates (and hash alike) but that read differently: an entry made for one must miss the other
LOOKALIKES = [
    (Key(0, 1), (0, 1)), (Key(0, 1), Key(0, 1.0)), (Key(0, 1), Key(0, True)), (Key(0, 0.0), Key(0, -0.0)),
    (range(0), range(5, 5)), (range(0, 3), range(0, 3, 1)),
    (frozenset({1}), frozenset({True})), (frozenset({1, 9}), frozenset({9, 1})),
    (0j, complex(-0.0, 0)), (0j, complex(0, -0.0)), ((Key(1, 2), 3), ((1, 2), 3)),
]


def _describe(x, d):
    k = next(iter(d))
    parts = [type(k).__name__, str(k), repr(k), len(d)]
    if isinstance(k, range):
        parts.append((k.start, k.stop, k.step))
    if isinstance(k, (tuple, frozenset)):
        parts.append([type(v).__name__ for v in k])
        parts.append([str(v) for v in k])
    return x + len(d), parts


@pytest.mark.parametrize("pair", LOOKALIKES, ids=repr)
def test_keys_equal_by_eq_are_told_apart(pair):
    compiled = framejit.compile(_describe, backend=CountingBackend())
    before = _eager_frames()
    for i, key in enumerate([*pair, *pair]):
        x = torch.full((2,), float(i))
        expected, actual = _describe(x, {key: i}), compiled(x, {key: i})
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1], (i, key)
    assert _eager_frames() == before
