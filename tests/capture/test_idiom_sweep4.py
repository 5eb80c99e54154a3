"""Idioms from the fourth side-by-side sweep of framejit against stock torch.compile (issue 11, helper
h11sweep4; the sweep programs are in /tmp/h11s4/s*.py of that session).

Each program is written as library or model code writes it, runs eagerly and compiled over several calls
with inputs or state changed between them, and asserts equal values, the graph count where that is the
point, and that no frame ran wholly eagerly.
"""
from __future__ import annotations

import dataclasses
import enum

import torch

import framejit
from tests.helpers import CountingBackend


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


def _same(got, want):
    if isinstance(want, dict):
        assert type(got) is type(want) and got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


# ---- a library metaclass's __getattr__ (NOTE [Library metaclass __getattr__], lookup.py) -------------------
# dataclasses.astuple/asdict of a config holding an Enum asks hasattr(type(member), "__dataclass_fields__");
# on 3.11 EnumType has its own __getattr__, which the trace's absence guard said it had not: the guard failed
# on every call, 8 graphs then the frame ran eagerly from the 9th call (stock torch.compile: 2 graphs).
class _Act(enum.Enum):
    RELU = "relu"
    GELU = "gelu"


@dataclasses.dataclass
class _Cfg:
    act: _Act = _Act.GELU
    depth: int = 2


def test_astuple_of_a_config_holding_an_enum_is_not_traced_per_call():
    def f(x, cfg):
        fields = dataclasses.astuple(cfg)
        act = torch.relu if fields[0] is _Act.RELU else torch.tanh
        return act(x) * fields[1], dataclasses.asdict(cfg)["depth"], hasattr(_Act, "missing"), \
            getattr(_Act, "RELU").value

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = _eager_frames()
    for i in range(12):
        x = torch.randn(3)
        cfg = _Cfg(act=_Act.GELU, depth=i % 3)
        _same(compiled(x, cfg), f(x, cfg))
    assert _eager_frames() == eager_before
    assert backend.graph_count <= 2
