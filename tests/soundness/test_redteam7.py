"""Adversarial differential programs, seventh round (issue 12, red team): classes with their own
`__getattribute__` read by guards, version counters of inputs written twice on lowered backends, and
state an ML engineer's code changes between calls. Each runs eagerly and compiled on separate but equal
state over several calls, changing the state between calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


# ---- a class with its own __getattribute__ (NOTE [Raw attribute reads]) ----------------------------------

class _Aliased:
    """A config mapping attribute aliases (transformers' PretrainedConfig does), counting its hook's runs."""

    __slots__ = ("runs", "k", "alias", "__dict__")

    def __init__(self):
        object.__setattr__(self, "runs", [])
        self.k, self.alias, self.w = 2, {"kk": "k"}, 3.0

    def __getattribute__(self, name):
        object.__getattribute__(self, "runs").append(name)
        if name == "kk":
            name = super().__getattribute__("alias")["kk"]
        return object.__getattribute__(self, name)


def _reads_aliases(x, c):
    y = x * c.kk + c.w
    if hasattr(c, "extra"):
        y = y + c.extra
    return y


def test_guards_read_past_a_custom_getattribute():
    # before: every guard line and the graph-input reload read `c.k`, `c.alias` through the hook (14 runs over
    # 2 calls where eager ran 2; 6 more while tracing); the hook's own runs are a side effect the user sees
    compiled = framejit.compile(_reads_aliases, backend=CountingBackend())
    c_e, c_c = _Aliased(), _Aliased()
    for i in range(4):
        x = torch.randn(3)
        assert_same(compiled(x, c_c), _reads_aliases(x, c_e))
        runs_e, runs_c = object.__getattribute__(c_e, "runs"), object.__getattribute__(c_c, "runs")
        assert runs_c == runs_e
        runs_e.clear()
        runs_c.clear()
        for c in (c_e, c_c):  # state changed between calls: the slot, the dict entry, a new attribute
            c.k = i + 3
            c.w = float(i)
            if i == 1:
                c.extra = 5
