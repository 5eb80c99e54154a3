"""A function or module passed beside its own `__dict__` (NOTE [Functions and modules beside their dicts] in
capture/namespace_owners.py): an attribute store on the owner and a write through the dict are one state, as
in eager (hhuntG4 MED-4: `fn.k = v; d["k"] = v + 1; return x + fn.k` read v, eager reads v + 1). Each program
runs eagerly and compiled, several calls, the dict alternating between the owner's own and an unrelated one.
"""
from __future__ import annotations

import types

import torch

import framejit
from tests.helpers import CountingBackend


def _store_then_write(x, owner, d, v):
    owner.k = v
    d["k"] = v + 1
    return x + owner.k


def _write_then_read(x, owner, d, v):
    d["k"] = v + 1
    return x + owner.k, owner.k


def _function():
    def target():
        pass
    target.k = 0
    return target


def _module():
    m = types.ModuleType("owned")
    m.k = 0
    return m


def _run(fn, make_owner):
    compiled = framejit.compile(fn, backend=CountingBackend())
    for step, v in enumerate((1, 2, 3, 4)):
        x = torch.randn(2)
        runs = []
        for call in (fn, compiled):
            owner = make_owner()
            d = owner.__dict__ if step % 2 == 0 else {"k": -1}
            runs.append((call(x, owner, d, v), owner.k, dict(d)["k"]))
        (want, want_k, want_d), (got, got_k, got_d) = runs
        torch.testing.assert_close(got[0] if isinstance(got, tuple) else got, want[0] if isinstance(want, tuple) else want)
        assert (got_k, got_d) == (want_k, want_d)
        if isinstance(want, tuple):
            assert got[1] == want[1]


def test_function_and_its_dict():
    _run(_store_then_write, _function)
    _run(_write_then_read, _function)


def test_module_and_its_dict():
    _run(_store_then_write, _module)
    _run(_write_then_read, _module)
