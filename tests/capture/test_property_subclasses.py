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


class mystatic(staticmethod):
    def __get__(self, obj, cls=None):
        return lambda *a: ("mystatic", len(a), LOG[-1] if LOG else None)


class myclass(classmethod):
    def __get__(self, obj, cls=None):
        return lambda *a: ("myclass", len(a))


class plainstatic(staticmethod):
    pass


class K:
    @mystatic
    def s(v):
        return v

    @myclass
    def c(cls, v):
        return v

    @plainstatic
    def p(v):
        return v * 3


def _methods(x, o):
    return o.s(1), o.c(2), o.p(4), K.p(5), x + 1


def _class_methods(x):
    return K.s(1), K.c(2), x + 1


def test_staticmethod_and_classmethod_subclasses_overriding_get():
    compiled = framejit.compile(_methods, backend="eager")
    compiled_class = framejit.compile(_class_methods, backend="eager")
    for tag in ("a", "b", "c"):
        LOG.append(tag)
        x = torch.randn(2)
        got, want = compiled(x, K()), _methods(x, K())
        assert got[:4] == want[:4] == (("mystatic", 1, tag), ("myclass", 1), 12, 15) and torch.equal(got[4], want[4])
        got, want = compiled_class(x), _class_methods(x)
        assert got[:2] == want[:2] and got[0] == ("mystatic", 1, tag) and torch.equal(got[2], want[2])
    LOG.clear()


def test_get_override_added_to_a_plain_staticmethod_subclass_between_calls():
    compiled = framejit.compile(_methods, backend="eager")
    x = torch.randn(2)
    assert compiled(x, K())[2] == _methods(x, K())[2] == 12
    plainstatic.__get__ = lambda self, obj, cls=None: (lambda v: -v)
    try:
        assert compiled(x, K())[2:4] == _methods(x, K())[2:4] == (-4, -5)
    finally:
        del plainstatic.__get__
    assert compiled(x, K())[2] == 12
