"""namedtuple `_replace` / `_make` inside compiled code (NOTE [namedtuple._replace] in
capture/library_substitutes.py, `tuple.__new__` in capture/builtins.py): captured in one graph, with eager's
results, errors and field order, including classes from typing.NamedTuple and subclasses that override
`_make`."""
from __future__ import annotations

import collections
import typing

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks


class Out(typing.NamedTuple):
    logits: torch.Tensor
    loss: typing.Optional[torch.Tensor] = None


Pair = collections.namedtuple("Pair", "a b c", defaults=(0,))


class Logged(Pair):
    __slots__ = ()
    made = []

    @classmethod
    def _make(cls, iterable):
        cls.made.append("made")
        return super()._make(iterable)


def _same(got, want):
    assert_same(got, want)


def _check(f, calls, graphs):
    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for args in calls:
            _same(cf(*args), f(*args))
    assert breaks == []
    assert be.graph_count == graphs


def test_replace_of_a_typing_namedtuple_is_one_graph():
    def f(x, y):
        o = Out(x * 2)
        return o._replace(loss=((o.logits - y) ** 2).mean())

    _check(f, [(torch.randn(3), torch.randn(3)), (torch.randn(3), torch.randn(3))], 1)


def test_replace_keeps_field_order_and_untouched_fields():
    def f(x):
        p = Pair(x, x + 1)
        return p._replace(c=x * 3, a=x - 1)

    _check(f, [(torch.randn(2),), (torch.randn(2),)], 1)


def test_make_from_a_generator_and_a_subclass_override():
    def f(x):
        p = Pair._make(x * i for i in range(3))
        q = Logged(x, 1, 2)._replace(b=5)  # _replace calls the subclass's _make
        return p, q

    Logged.made.clear()
    _check(f, [(torch.randn(2),), (torch.randn(2),)], 1)
    assert Logged.made == ["made"] * 4  # eager and compiled, twice each (replayed after the graph)


def test_replace_with_an_unknown_field_raises_as_eager():
    def f(x):
        return Pair(x, x)._replace(d=1)

    cf = framejit.compile(f, backend="eager")
    with pytest.raises((ValueError, TypeError)) as eager:  # TypeError from CPython 3.13 on
        f(torch.randn(2))
    with pytest.raises((ValueError, TypeError)) as compiled:
        cf(torch.randn(2))
    assert type(compiled.value) is type(eager.value)
    assert str(compiled.value) == str(eager.value) == "Got unexpected field names: ['d']"


def test_make_with_the_wrong_length_raises_as_eager():
    def f(x):
        return Pair._make([x, x])

    cf = framejit.compile(f, backend="eager")
    with pytest.raises(TypeError) as eager:
        f(torch.randn(2))
    with pytest.raises(TypeError) as compiled:
        cf(torch.randn(2))
    assert str(compiled.value) == str(eager.value)


class Base:
    scale = 2

    @classmethod
    def create(cls, x):
        return x * cls.scale

    @staticmethod
    def shift(x):
        return x + 1


class Child(Base):
    scale = 3

    @classmethod
    def create(cls, x):
        return super().create(x) + super().shift(x)


def test_super_inside_a_classmethod_binds_to_the_class():
    # was an internal error (super()'s second argument is the class): the whole frame ran eagerly
    def f(x):
        return Child.create(x), Base.create(x)

    _check(f, [(torch.randn(3),), (torch.randn(3),)], 1)
