"""framejit names a module without calling its PEP 562 `__getattr__` (hunt hhuntG2 LOW-3): repr() of a module
reads `__spec__`, `__loader__` and `__file__` through the module's attribute lookup."""
from __future__ import annotations

import types

import torch

import framejit
from framejit.guards.codegen import short_repr


def _counting_module():
    module = types.ModuleType("counted")
    calls = []

    def __getattr__(name):
        calls.append(name)
        return len(calls)
    module.__getattr__ = __getattr__
    return module, calls


def _run(compiled):
    module, calls = _counting_module()

    def f(x):
        return x + module.anything
    g = framejit.compile(f, backend="eager") if compiled else f
    return [g(torch.ones(2)).tolist() for _ in range(3)], calls


def test_a_module_getattr_runs_as_often_as_eager():
    # before: eager 2, 3, 4 and 3 calls; framejit 4, 5, 6 (two more calls while naming the module)
    assert _run(True) == _run(False)


def test_a_module_is_written_without_its_getattr():
    module, calls = _counting_module()
    assert short_repr(module) == "<module 'counted'>" and calls == []
    module.__file__ = "/x/counted.py"
    assert short_repr(module) == "<module 'counted' from '/x/counted.py'>" and calls == []
    assert short_repr(torch) == repr(torch)
