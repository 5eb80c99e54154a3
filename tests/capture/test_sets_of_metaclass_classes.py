"""Sets and frozensets from outside holding classes of a metaclass (issue 11; NOTE [Sets of functions from
outside] in framejit/capture/identity_keys.py).

A module-level frozenset of classes queried with `type(obj) in KINDS` was modelled only for classes whose
metaclass is `type`; with ABCMeta or a registry metaclass the set was "G['KINDS'] is a frozenset" (a break,
and the resume function holding it ran wholly eagerly). Each test runs eagerly and compiled over calls with
changing arguments and compares values; graph, break and eager-frame counts where that is the point.
"""
from __future__ import annotations

import abc

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Registry(type):
    pass


class Base(abc.ABC):
    @abc.abstractmethod
    def scale(self):
        ...


class Double(Base):
    def scale(self):
        return 2.0


class Half(Base):
    def scale(self):
        return 0.5


class Tagged(metaclass=Registry):
    pass


class Other(metaclass=Registry):
    pass


KINDS = frozenset({Double, Tagged})
MUTABLE_KINDS = {Half, Other}


def scaled_if_known(x, obj):
    if type(obj) in KINDS:
        return x * 2
    return x - 1


def _run(fn, calls):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for args in calls:
            torch.testing.assert_close(compiled(*args), fn(*args))
    return backend.graph_count, list(breaks), framejit.stats()["eager_frames"] - before


def test_membership_of_a_class_with_a_metaclass_is_captured():
    calls = [(torch.randn(3), Double()), (torch.randn(3), Tagged()), (torch.randn(3), Half()),
             (torch.randn(3), Other()), (torch.randn(3), 3)]
    graphs, breaks, eager = _run(scaled_if_known, calls)
    assert breaks == [] and eager == 0 and graphs <= len(calls)


def test_a_frozenset_rebound_between_calls_is_read_again():
    global KINDS
    saved = KINDS
    try:
        for kinds in (frozenset({Double, Tagged}), frozenset({Half}), frozenset({Half, Other, Double})):
            KINDS = kinds
            for obj in (Double(), Half(), Other()):
                x = torch.randn(3)
                torch.testing.assert_close(framejit.compile(scaled_if_known)(x, obj), scaled_if_known(x, obj))
    finally:
        KINDS = saved


def test_a_set_from_outside_changed_in_the_frame_is_changed_as_in_eager():
    def register(x, obj):
        MUTABLE_KINDS.add(type(obj))
        return x + len(MUTABLE_KINDS) + (Tagged in MUTABLE_KINDS)

    compiled = framejit.compile(register)
    for obj in (Tagged(), Double(), Tagged()):
        x = torch.randn(3)
        MUTABLE_KINDS.clear()
        MUTABLE_KINDS.update({Half, Other})
        expected = register(x, obj)
        eager_after = set(MUTABLE_KINDS)
        MUTABLE_KINDS.clear()
        MUTABLE_KINDS.update({Half, Other})
        torch.testing.assert_close(compiled(x, obj), expected)
        assert MUTABLE_KINDS == eager_after


class EqualByName(type):
    def __eq__(cls, other):
        return isinstance(other, type) and cls.__name__ == other.__name__

    def __hash__(cls):
        return hash(cls.__name__)


class Named(metaclass=EqualByName):
    pass


def _named_twin():
    class Named(metaclass=EqualByName):  # another class, equal to the global one by its metaclass
        pass
    return Named


@pytest.mark.parametrize("make", [Named, _named_twin()])
def test_a_metaclass_with_its_own_equality_is_not_taken_by_identity(make):
    kinds = frozenset({Named})

    def fn(x, obj):
        return x * 2 if type(obj) in kinds else x - 1

    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(framejit.compile(fn)(x, make()), fn(x, make()))


def test_iterating_a_set_of_classes_matches_eager():
    def fn(x):
        return x + sum(len(cls.__name__) for cls in KINDS)

    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(framejit.compile(fn)(x), fn(x))
