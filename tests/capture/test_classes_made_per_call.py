"""A class a library factory makes in the frame is a new class on every call, as in eager (NOTE [Classes made
per call] in capture/made_classes.py): `collections.namedtuple(...)`, `typing.NamedTuple(...)` and
`enum.Enum("Mode", names)` were made once at trace time and that one class returned by every call, so an
attribute the caller set on it showed up in later calls (hhuntG4 MED-3). A class that stays inside the frame
is still made once (test_functions_gaps.py::test_namedtuple_made_while_tracing keeps one graph).
"""
from __future__ import annotations

import collections
import enum
import typing

import torch

import framejit
from tests.helpers import CountingBackend


def _namedtuple(x, n):
    Point = collections.namedtuple("Point", ["a", "b"])
    return Point(x + n, n), Point


def _typing_namedtuple(x, n):
    NT = typing.NamedTuple("NT", [("a", int)])
    return x + n, NT


def _enum(x, names):
    Mode = enum.Enum("Mode", names)
    return x, Mode


def _facts(fn, arg):
    """What the caller sees over three calls, decorating the class it got after the first."""
    first = fn(torch.ones(1), arg)
    first[1].tag = "set by the caller"
    second, third = fn(torch.ones(1), arg), fn(torch.ones(1), arg)
    classes = [r[1] for r in (first, second, third)]
    facts = [classes[0] is classes[1], classes[1] is classes[2], getattr(classes[2], "tag", None),
             [c.__name__ for c in classes]]
    if isinstance(first[0], tuple):  # instances are of their own call's class
        facts += [type(r[0]) is r[1] for r in (first, second, third)] + [second[0].b, third[0].b]
    if issubclass(classes[0], enum.Enum):
        facts += [classes[1].A is classes[2].A, [m.name for m in classes[2]]]
    return facts


def test_namedtuple_class_per_call():
    compiled = framejit.compile(_namedtuple, backend=CountingBackend())
    for n in (1, 2):
        assert _facts(compiled, n) == _facts(_namedtuple, n)


def test_typing_namedtuple_class_per_call():
    compiled = framejit.compile(_typing_namedtuple, backend=CountingBackend())
    for n in (1, 2):
        assert _facts(compiled, n) == _facts(_typing_namedtuple, n)


def test_enum_functional_api_class_per_call():
    compiled = framejit.compile(_enum, backend=CountingBackend())
    for names in (["A", "B"], ["A", "C"]):
        assert _facts(compiled, names) == _facts(_enum, names)


def _returns_an_instance(x, n):
    Row = collections.namedtuple("Row", ["x", "y", "xy"], defaults=(None, 1, None))
    tmp = Row(x, xy=x * n)
    return Row(tmp.x, tmp[1] + n, tmp.xy + x), Row


def _instance_facts(fn, x, n):
    """Values and classes over three calls; the caller decorates the first call's class."""
    results = [fn(x, n)]
    results[0][1].tag = "set by the caller"
    results += [fn(x, n), fn(x, n)]
    return ([r[1] is results[0][1] for r in results[1:]], [type(r[0]) is r[1] for r in results],
            [getattr(r[1], "tag", None) for r in results], [(r[1].__name__, r[1].__module__, r[1]._fields,
                                                             r[1]._field_defaults) for r in results],
            [[v.tolist() if isinstance(v, torch.Tensor) else v for v in r[0]] for r in results])


def test_a_namedtuple_class_made_again_per_call_keeps_the_frame_in_one_graph():
    """A frame returning an instance (and the class) of a namedtuple it makes: the transformed code makes
    the class again on every call, so the frame is one graph (it ran eagerly since b734604) and every call
    hands out its own class, as eager."""
    backend, eager_before = CountingBackend(), framejit.stats()["eager_frames"]
    compiled = framejit.compile(_returns_an_instance, backend=backend)
    for x, n in ((torch.ones(2), 2), (torch.arange(3.0), 3), (torch.ones(4) * 2, 2)):
        assert _instance_facts(compiled, x, n) == _instance_facts(_returns_an_instance, x, n)
    assert framejit.stats()["eager_frames"] == eager_before
    assert 1 <= backend.graph_count <= 2  # static, then dynamic shapes: no break, no eager frame
