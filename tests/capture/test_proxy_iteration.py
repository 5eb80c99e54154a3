"""Iterating a mappingproxy reads the dict under it (NOTE [Proxies iterate their dict] in values/containers.py).

`for k in RO`, `list(RO)`, `sorted(RO)`, `for k in vars(C)` trace as the dict's key iteration (they were an
internal error that ran the frame eagerly, revAE H1), and `for k, v in RO.items()` while the frame grows the
dict raises "dictionary changed size during iteration" as in eager (it completed, revAE H4). Each program runs
eagerly and compiled, several calls, with the dict changed between calls.
"""
from __future__ import annotations

import types

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, call_capturing

CFG = {"a": 1.0, "b": 2.0}
RO = types.MappingProxyType(CFG)


class _C:
    w = 3.0


def _for_keys(x):
    for k in RO:
        x = x + RO[k]
    return x


def _listed(x):
    return x + len(list(RO)), sorted(RO), [k for k in RO], tuple(RO), "a" in RO


def _class_vars(x):
    return x + sum(1 for k in vars(_C) if not k.startswith("_")), [k for k in vars(_C) if k == "w"]


@pytest.mark.parametrize("fn", [_for_keys, _listed, _class_vars])
def test_iterating_a_proxy_is_traced(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    eager_before = framejit.stats()["eager_frames"]
    for i in range(3):
        CFG["a"] = float(i)
        x = torch.randn(2)
        want, got = fn(x), compiled(x)
        torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, want[0] if isinstance(want, tuple) else want)
        if isinstance(want, tuple):
            assert got[1:] == want[1:]
    assert framejit.stats()["eager_frames"] == eager_before
    assert backend.graph_count >= 1


def _grow_through_items(x):
    n = 0
    for k, v in RO.items():
        CFG["zz" + k] = 1
        n += 1
    return x + n


def _grow_through_keys(x):
    n = 0
    for k in RO:
        CFG["zz" + k] = 1
        n += 1
    return x + n


def _write_values_through_items(x):
    for k, v in RO.items():
        CFG[k] = v + 1.0  # no size change: allowed
    return x + RO["a"]


@pytest.mark.parametrize("fn", [_grow_through_items, _grow_through_keys, _write_values_through_items])
def test_growing_the_dict_while_iterating_its_proxy_raises(fn):
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i in range(3):
        x = torch.randn(2)
        CFG.clear()
        CFG.update(a=float(i), b=2.0)
        want = call_capturing(fn, (x,), {})
        want_cfg = dict(CFG)
        CFG.clear()
        CFG.update(a=float(i), b=2.0)
        got = call_capturing(compiled, (x,), {})
        assert dict(CFG) == want_cfg
        assert got[1:] == want[1:]
        if want[1] is None:
            torch.testing.assert_close(got[0], want[0])
        else:
            assert str(got[0]) == str(want[0])
    CFG.clear()
    CFG.update(a=1.0, b=2.0)
