"""`proxy.copy()`, `proxy | d` and `d | proxy` of a mappingproxy over an OrderedDict make an OrderedDict, as
CPython does (mappingproxy delegates both to its mapping); the trace made plain dicts (found while fixing
review revAJ MED-2; NOTE [Mappingproxies] in mappings.py)."""
from __future__ import annotations

import collections
import types

import torch

import framejit
from tests.helpers import CountingBackend

OD = collections.OrderedDict


def _proxy(kind: type, i: int) -> types.MappingProxyType:
    od = OD(a=1, b=2, c=i)
    od.move_to_end("abc"[i % 3])
    return types.MappingProxyType(kind(od))


def _describe(d) -> tuple:
    return type(d).__name__, list(d.items()), list(dict.keys(d))


def test_copy_and_union_of_a_proxy_are_its_mappings():
    def f(x, ro):
        return x + len(ro), _describe(ro.copy()), _describe(ro | {"z": 1}), _describe({"z": 1} | ro)

    for kind in (dict, OD):
        compiled = framejit.compile(f, backend=CountingBackend())
        for i in range(3):
            x = torch.full((2,), float(i))
            expected, actual = f(x, _proxy(kind, i)), compiled(x, _proxy(kind, i))
            assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:], (kind, i, actual, expected)
