"""A `property` subclass that overrides `__get__`/`__set__` (the `classproperty` idiom, scaling or logging
properties) is read and written through its override, as CPython does, not through fget/fset directly;
a subclass that keeps property's own methods still reads through fget (NOTE [Property subclasses])."""
import torch

import framejit

LOG = []


class classproperty(property):
    def __get__(self, obj, owner=None):
        return self.fget(owner)


class scaled(property):
    factor = 2

    def __get__(self, obj, cls=None):
        LOG.append("get")
        return property.__get__(self, obj, cls) * self.factor

    def __set__(self, obj, v):
        property.__set__(self, obj, v + 100)


class plainsub(property):
    pass


class A:
    base = 3

    @classproperty
    def kind(cls):
        return cls.base * 10

    def __init__(self):
        self._w = 1

    @scaled
    def w(self):
        return self._w

    @w.setter
    def w(self, v):
        self._w = v

    @plainsub
    def p(self):
        return self._w + 7


class Sub(A):
    @property
    def w(self):
        return super().w + 1000


def _get(x, o):
    return x + o.kind + o.w + o.p


def _set(x, o, v):
    o.w = v
    return x + o._w


def _super_get(x, o):
    return x + o.w


def test_overridden_get_runs_and_sees_state_changes():
    compiled = framejit.compile(_get, backend="eager")
    for n, factor, base in ((2, 2, 3), (3, 5, 4), (4, 5, 1)):
        scaled.factor, A.base = factor, base
        x = torch.randn(n)
        LOG.clear()
        want = _get(x, A())
        assert LOG == ["get"]
        LOG.clear()
        assert torch.equal(compiled(x, A()), want)
        assert LOG == ["get"]
    scaled.factor, A.base = 2, 3


def test_overridden_set_runs():
    compiled = framejit.compile(_set, backend="eager")
    for v in (5, 6, 9):
        a, b = A(), A()
        x = torch.randn(2)
        assert torch.equal(compiled(x, a, v), _set(x, b, v))
        assert a._w == b._w == v + 100


def test_overridden_get_through_super():
    compiled = framejit.compile(_super_get, backend="eager")
    for factor in (2, 3, 4):
        scaled.factor = factor
        x = torch.randn(2)
        assert torch.equal(compiled(x, Sub()), _super_get(x, Sub()))
    scaled.factor = 2


def test_get_override_added_to_a_plain_subclass_between_calls():
    compiled = framejit.compile(_get, backend="eager")
    x = torch.randn(2)
    assert torch.equal(compiled(x, A()), _get(x, A()))
    plainsub.__get__ = lambda self, obj, cls=None: 50
    try:
        assert torch.equal(compiled(x, A()), _get(x, A()))
        assert torch.equal(_get(x, A()), x + 30 + 2 + 50)
    finally:
        del plainsub.__get__
    assert torch.equal(compiled(x, A()), _get(x, A()))
