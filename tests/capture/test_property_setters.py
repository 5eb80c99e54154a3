"""`obj.name = v` through a property with a Python setter, on an object or module from outside (NOTE
[Property setters of objects from outside] in capture/translator.py): the setter is traced, its stores
replayed, the lookup guarded; was a graph break at every such store. Found by h11sweep."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Annealed(nn.Module):
    def __init__(self):
        super().__init__()
        self._t = 1.0
        self.sets = 0

    @property
    def temp(self):
        return self._t

    @temp.setter
    def temp(self, value):
        self.sets += 1
        self._t = value

    def forward(self, x):
        self.temp = self.temp * 0.5
        return x / self.temp


def test_a_module_property_setter_is_traced_not_a_break():
    eager_model, compiled_model = Annealed(), Annealed()
    be = CountingBackend()
    cm = framejit.compile(compiled_model, backend=be)
    with logged_breaks() as breaks:
        for _ in range(8):
            x = torch.randn(3)
            torch.testing.assert_close(cm(x), eager_model(x))
            assert (compiled_model._t, compiled_model.sets) == (eager_model._t, eager_model.sets)
    assert breaks == []
    assert be.graph_count == 2


class Box:
    def __init__(self):
        self._v = 0
        self.log = []

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        if value < 0:
            raise ValueError(f"negative: {value}")
        self.log.append(value)
        self._v = value


class ReadOnly:
    @property
    def v(self):
        return 1


def test_a_setter_on_a_plain_object_runs_with_its_checks_and_effects():
    def f(x, box, k):
        box.v = k
        return x * box.v

    cf = framejit.compile(f, backend="eager")
    eager_box, compiled_box = Box(), Box()
    for k in (2, 3, 3):
        x = torch.randn(2)
        torch.testing.assert_close(cf(x, compiled_box, k), f(x, eager_box, k))
        assert compiled_box.log == eager_box.log
    with pytest.raises(ValueError, match="negative: -1"):
        cf(torch.randn(2), compiled_box, -1)
    assert compiled_box.log == eager_box.log


def test_a_property_without_a_setter_raises_as_eager():
    def f(x, o):
        o.v = 2
        return x

    with pytest.raises(AttributeError) as eager:
        f(torch.ones(1), ReadOnly())
    with pytest.raises(AttributeError) as compiled:
        framejit.compile(f, backend="eager")(torch.ones(1), ReadOnly())
    assert str(compiled.value) == str(eager.value)


def test_a_setter_replaced_on_the_class_after_the_first_call_is_followed():
    class Holder:
        def __init__(self):
            self._v = 0

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, value):
            self._v = value

    def f(x, h):
        h.v = 5
        return x * h._v

    cf = framejit.compile(f, backend="eager")
    h = Holder()
    torch.testing.assert_close(cf(torch.ones(2), h), torch.full((2,), 5.0))
    Holder.v = Holder.v.setter(lambda self, value: setattr(self, "_v", value * 10))
    h2, h3 = Holder(), Holder()
    torch.testing.assert_close(cf(torch.ones(2), h2), f(torch.ones(2), h3))
    assert h2._v == h3._v == 50
