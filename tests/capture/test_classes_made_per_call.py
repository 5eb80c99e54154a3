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
