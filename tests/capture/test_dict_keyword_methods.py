"""OrderedDict's own methods called on an OrderedDict subclass made in the frame take OrderedDict's arguments.

`d.setdefault(key="q", default=5)` / `d.pop(key="a")` on a subclass of OrderedDict with a method of its own
ran dict's argument check and raised "dict.setdefault() takes no keyword arguments" into the frame's
`except TypeError` (revAE H2); eager binds the keywords. NOTE [OrderedDict methods of dict objects] in
capture/dict_objects.py. Differential: eager vs compiled, several calls, the key read from the argument.
"""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class _Cfg(collections.OrderedDict):
    def helper(self):
        return 1


def _setdefault_kw(x, v):
    d = _Cfg(a=1)
    try:
        r = d.setdefault(key="q", default=v)
    except TypeError as e:
        return "caught " + str(e), x - 1
    return r, list(d.items()), x + 1


def _pop_kw(x, v):
    d = _Cfg(a=v)
    try:
        r = d.pop(key="a")
    except TypeError as e:
        return "caught " + str(e), x - 1
    return r, list(d.items()), x + 1


def _od_pop_kw(x, v):
    d = _Cfg(a=v, b=2)
    try:
        r = collections.OrderedDict.pop(d, key="b")
    except TypeError as e:
        return "caught " + str(e), x - 1
    return r, list(d.items()), x + 1


def _keys_arg(x, v):
    d = _Cfg(a=v)
    try:
        r = d.keys(1)
    except TypeError as e:
        return "caught " + str(e), x - 1
    return r, x + 1


@pytest.mark.parametrize("fn", [_setdefault_kw, _pop_kw, _od_pop_kw, _keys_arg])
def test_ordered_dict_subclass_methods_bind_as_eager(fn):
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i in range(3):
        x = torch.randn(2 + i)
        want, got = fn(x, i + 5), compiled(x, i + 5)
        assert got[:-1] == want[:-1]
        torch.testing.assert_close(got[-1], want[-1])
