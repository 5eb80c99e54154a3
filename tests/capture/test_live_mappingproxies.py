"""A mappingproxy is a live view of the dict it wraps (NOTE [Mappingproxies] in capture/mappings.py).

A write through the dict inside the compiled frame shows through the proxy (item reads, `in`, `len`,
`get`, views, iteration), whether the proxy is a global beside its global dict, an argument beside its dict,
or made in the frame; the proxy was read as a snapshot of the call's start (hhuntG4 HIGH-2). Each program
runs eagerly and compiled on fresh dicts, several calls, with the dict changed between calls.
"""
from __future__ import annotations

import collections
import types

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

CFG = {"k": 0}
RO = types.MappingProxyType(CFG)


def _global_proxy(x, v):
    CFG["k"] = v
    CFG["new"] = v * 2
    r = (RO["k"], "new" in RO, len(RO), RO.get("new"), list(RO), list(RO.values()))
    del CFG["new"]
    return x + RO["k"], r, len(RO)


def _argument_proxy(x, mp, d, v):
    before = mp["k"]
    d["k"] = v
    d["n"] = 1
    got = (mp["k"], len(mp), "n" in mp, mp.get("k"), list(mp.keys()), list(mp.items()), dict(mp), mp.copy())
    del d["n"]
    return x + before + mp["k"], got, "n" in mp


def _made_in_frame(x, d, v):
    p = types.MappingProxyType(d)
    d["k"] = v
    print("k", p["k"])
    d["k"] = v + 1
    return x + p["k"], p


def _check(got, want):
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:]


def test_global_proxy_sees_the_frames_writes():
    compiled = framejit.compile(_global_proxy, backend=CountingBackend())
    for v in (1, 2, 3, 2.5):
        x = torch.randn(2)
        CFG.clear()
        CFG["k"] = 0
        want = _global_proxy(x, v)
        CFG.clear()
        CFG["k"] = 0
        _check(compiled(x, v), want)
        assert CFG == {"k": v}


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict])
def test_argument_proxy_beside_its_dict(kind):
    compiled = framejit.compile(_argument_proxy, backend=CountingBackend())
    for v in (1, 2, 3):
        x = torch.randn(2)
        d1, d2 = kind(k=-v), kind(k=-v)
        want = _argument_proxy(x, types.MappingProxyType(d1), d1, v)
        _check(compiled(x, types.MappingProxyType(d2), d2, v), want)
        assert d1 == d2


def test_proxy_made_in_the_frame_stays_live(capsys):
    compiled = framejit.compile(_made_in_frame, backend=CountingBackend())
    for v in (1, 2, 3):
        x = torch.randn(2)
        d1, d2 = {"k": 0}, {"k": 0}
        want = _made_in_frame(x, d1, v)
        printed = capsys.readouterr().out
        got = compiled(x, d2, v)
        assert capsys.readouterr().out == printed == f"k {v}\n"
        torch.testing.assert_close(got[0], want[0])
        d1["z"] = d2["z"] = v  # the returned proxy shows its own dict, changed after the call
        assert dict(got[1]) == dict(want[1]) == {"k": v + 1, "z": v}
