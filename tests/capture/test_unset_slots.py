"""A `__slots__` entry that holds no value reads as eager's AttributeError, with the slot guarded unset (NOTE
[Unset slots] in capture/descriptors.py): `hasattr`, `getattr` with a default and `try/except` see it, and
assigning or deleting the slot later recompiles."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class Opt:
    __slots__ = ("base", "extra")

    def __init__(self):
        self.base = 1.0


class Lazy(Opt):
    __slots__ = ()

    def __getattr__(self, name):  # called for an unset slot too: the read is the user's code (a break)
        return 10.0


def _fn(o):
    def f(x):
        out = x * o.base
        if hasattr(o, "extra"):
            out = out + o.extra
        try:
            out = out * o.extra
        except AttributeError as e:
            out = out - len(str(e))
        return out, getattr(o, "extra", "none")
    return f


def _check(f, compiled, n):
    x = torch.randn(n)
    want, got = f(x), compiled(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]


@pytest.mark.parametrize("cls", [Opt, Lazy])
def test_unset_slot_reads_as_eager_and_its_assignment_recompiles(cls):
    o = cls()
    f = _fn(o)
    be = CountingBackend()
    compiled = framejit.compile(f, backend=be)
    before = framejit.stats()["eager_frames"]
    for step, n in enumerate((2, 2, 3, 3, 2, 4)):
        if step == 2:
            o.extra = 5.0
        if step == 4:
            del o.extra
        if step == 5:
            o.extra = 2.0
        _check(f, compiled, n)
    assert framejit.stats()["eager_frames"] == before  # no frame ran wholly eagerly
    assert be.graph_count >= 1


def test_unset_slot_in_a_loop_is_one_graph():
    o = Opt()

    def f(x):
        for _ in range(3):
            x = x * o.base
            if hasattr(o, "extra"):
                x = x + o.extra
        return x

    be = CountingBackend()
    compiled = framejit.compile(f, backend=be)
    for n in (2, 2):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))
    assert be.graph_count == 1
    o.extra = 1.5
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), f(x))
    assert be.graph_count == 2
