"""popitem and the dict slots called with arguments that do not bind raise eager's TypeError, and change nothing.

`d.popitem(1)`, `d.popitem(last=False)` on a dict / defaultdict, `od.popitem(1, 2)` on an OrderedDict
returned an item and removed it in the trace where eager raises (revAE H3); `d.__len__(1)` on a dict
subclass made in the frame returned its length. NOTE [Argument errors of container methods]
(capture/container_slots.py). Differential: the compiled function catches the TypeError and returns its
message and the dict's size; several calls.
"""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class _SD(dict):
    def own(self):
        return 1


class _SOD(collections.OrderedDict):
    def own(self):
        return 1


CALLS = {
    "dict_popitem1": (dict, lambda d: d.popitem(1)),
    "dict_popitem_last": (dict, lambda d: d.popitem(last=False)),
    "dd_popitem1": (lambda **k: collections.defaultdict(int, **k), lambda d: d.popitem(1)),
    "od_popitem2": (collections.OrderedDict, lambda d: d.popitem(1, 2)),
    "od_popitem_both": (collections.OrderedDict, lambda d: d.popitem(False, last=False)),
    "od_popitem_other": (collections.OrderedDict, lambda d: d.popitem(first=False)),
    "od_popitem_last": (collections.OrderedDict, lambda d: d.popitem(last=False)),
    "od_popitem_pos": (collections.OrderedDict, lambda d: d.popitem(False)),
    "dict_popitem": (dict, lambda d: d.popitem()),
    "sub_popitem1": (_SD, lambda d: d.popitem(1)),
    "sub_popitem_last": (_SD, lambda d: d.popitem(last=False)),
    "odsub_popitem2": (_SOD, lambda d: d.popitem(1, 2)),
    "sub_len1": (_SD, lambda d: d.__len__(1)),
    "sub_contains0": (_SD, lambda d: d.__contains__()),
}


def _program(make, call):
    def f(x, v):
        d = make(a=v, b=2)
        try:
            r = call(d)
        except TypeError as e:
            return "caught " + str(e), len(d), x - 1
        return r, sorted(d.items()), x + 1
    return f


@pytest.mark.parametrize("name", list(CALLS))
def test_popitem_and_slots_bind_as_eager(name):
    fn = _program(*CALLS[name])
    compiled = framejit.compile(_program(*CALLS[name]), backend=CountingBackend())
    for i in range(3):
        x = torch.randn(2 + i)
        want, got = fn(x, i), compiled(x, i)
        assert got[:-1] == want[:-1]
        torch.testing.assert_close(got[-1], want[-1])
