"""Objects made while tracing as dict keys and set elements (issue 11, PyTorch's test_dicts.py): an instance
of a user class keeping object's __eq__ and __hash__, a functools.partial, and a tuple or namedtuple holding
one (NOTE [Objects made in the trace as keys], identity_keys.py).

Each was "New(CustomKey) as a set element or dict key (only constants and tensors are modelled)" (or
PartialValue, Container(PartialValue, ...)): a break, or where none could be taken (BUILD_MAP) the frame ran
eagerly. The programs run eagerly and compiled on fresh inputs with no break and no frame run eagerly; a dict
keyed so that escapes is rebuilt with the objects themselves as keys; a class with its own __eq__ stays a break.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch

import framejit
from tests.capture.test_idiom_sweep5 import _run  # eager vs compiled on fresh arguments, break records
from tests.helpers import CountingBackend


class _Key:
    def __init__(self, value):
        self.value = value


class _EqKey(_Key):
    def __eq__(self, other):
        return isinstance(other, _EqKey) and other.value == self.value

    __hash__ = object.__hash__


class _Pair(NamedTuple):
    fn: Callable
    const: int


def _add(x, y):
    return x + y


def test_user_objects_made_in_the_trace_key_by_identity():
    def f(x, n):
        keys = [_Key(i) for i in range(3)]
        d = {keys[0]: x * 2}
        d[keys[1]] = x * n
        d[_Key(0)] = x  # another object: another key
        d[keys[0]] = d[keys[0]] + 1
        s = {keys[2]}
        return (sum(d.values()), len(d), [k.value for k in d], keys[1] in d, _Key(1) in d, keys[2] in s,
                d.get(keys[2], n), d.pop(keys[1]) * 2, len(d))

    backend, records = _run(f, lambda i: (torch.randn(i + 2), i + 1))
    assert not records and 1 <= len(backend.graphs) <= 3


def test_partials_and_namedtuples_holding_them_key_by_identity_and_items():
    def f(x, c):
        p = functools.partial(_add, x=1)
        d = {p: c, _Pair(p, 4): x * c}
        other = _Pair(functools.partial(_add, x=1), 4)
        return (x * d[p], d[_Pair(p, 4)], (p, 4) in d, other in d, d.get(other, -1),
                functools.partial(_add, x=1) in d, p in {p})

    backend, records = _run(f, lambda i: (torch.randn(i + 2), i + 2))
    assert not records and 1 <= len(backend.graphs) <= 3


def test_an_escaping_dict_is_rebuilt_with_the_objects_as_keys():
    def f(x):
        k = _Key(7)
        return {k: x + 1, "s": 2}, k

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend, fullgraph=True)
    for i in range(2):
        x = torch.randn(i + 2)
        d, k = compiled(x)
        assert type(k) is _Key and k.value == 7 and list(d) == [k, "s"]
        torch.testing.assert_close(d[k], x + 1)
    assert len(backend.graphs) == 2


def test_a_class_with_its_own_eq_stays_a_break_and_equals_eager():
    def f(x):
        d = {_EqKey(1): x, _EqKey(1): x + 1}
        return len(d), x + 2

    compiled = framejit.compile(f, backend=CountingBackend())
    for i in range(2):
        x = torch.randn(i + 2)
        n, y = compiled(x)
        assert n == f(x)[0] == 2
        torch.testing.assert_close(y, x + 2)
