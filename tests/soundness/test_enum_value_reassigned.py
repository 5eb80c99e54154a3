"""An enum member's `_value_` / `_name_` reassigned after compiling is seen (hunt hhuntG2 LOW-4, NOTE [Enum
values reassigned] in capture/enum_attributes.py)."""
from __future__ import annotations

import enum

import torch

import framejit


def _run(compiled, change):
    class Level(enum.Enum):
        A = (1,)
        B = 2

    def f(x):
        return x + len(Level.A.value) + Level.A.value[0] + Level.B.value + len(Level.B.name)
    g = framejit.compile(f, backend="eager") if compiled else f
    out = []
    for step in range(4):
        change(Level, step)
        out.append(g(torch.ones(2)).tolist())
    return out


def _change(Level, step):
    if step == 1:
        Level.A._value_ = (4, 5)  # another tuple
    if step == 2:
        Level.B._value_ = [7]  # not a constant: guarded by identity
        Level.B._value_ = 7
    if step == 3:
        Level.B._name_ = "BEE"


def test_a_reassigned_enum_value_or_name_is_seen():
    # before: eager [6, 6], [12, 12], [17, 17], [19, 19]; framejit kept [6, 6] (value folded unguarded)
    assert _run(True, _change) == _run(False, _change)


def test_a_mutable_enum_value_replaced_is_seen():
    def change(Level, step):
        if step == 0:
            Level.A._value_ = [1]
        if step == 2:
            Level.A._value_ = [3, 4]
    assert _run(True, change) == _run(False, change)
