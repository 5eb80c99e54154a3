"""`match` statements inside compiled code (NOTE [Match statements], capture/handlers/matching.py): every
pattern kind is captured with no break and eager's answer, changing the subject between calls recompiles
on the facts the match read, and the errors CPython raises for malformed class patterns are raised."""
from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, logged_breaks


@dataclasses.dataclass
class Cfg:
    act: str
    scale: float = 1.0


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


class Lookup(dict):
    def get(self, key, default=None):  # MATCH_KEYS calls the mapping's own get()
        return super().get(key.upper(), default)


def dispatch(x, cfg):
    match cfg:
        case {"act": "relu"}:
            return x.relu()
        case {"act": "gelu", "approx": approx}:
            return F.gelu(x, approximate=approx)
        case {"act": _, **rest}:
            return x * len(rest)
        case [a, b, *rest]:
            return x * a + b + len(rest)
        case Cfg(act="tanh", scale=s):
            return x.tanh() * s
        case Cfg("sig"):
            return x.sigmoid()
        case Point(1, y):
            return x + y
        case int(n) | float(n) if n > 0:
            return x * n
        case str() as s:
            return x + len(s)
        case None:
            return -x
        case _:
            return x + 0.5


SUBJECTS = {
    "mapping_literal": {"act": "relu"},
    "mapping_capture": {"act": "gelu", "approx": "tanh"},
    "mapping_rest": {"act": "x", "p": 1, "q": 2},
    "mapping_missing_key": {"act": "gelu"},
    "ordered_dict": collections.OrderedDict(act="relu"),
    "dict_subclass_get": Lookup(ACT="relu"),
    "sequence": [2, 3],
    "sequence_star": (2, 3, 4, 5),
    "string_is_not_a_sequence": "ab",
    "dataclass_keywords": Cfg("tanh", 2.0),
    "dataclass_positional": Cfg("sig"),
    "match_args": Point(1, 5),
    "match_args_no_match": Point(2, 5),
    "int_self_guard": 3,
    "float_self": 2.5,
    "int_guard_fails": -1,
    "none": None,
    "wildcard": {"other": 1},
}


@pytest.mark.parametrize("name", list(SUBJECTS))
def test_each_pattern_kind_is_captured_with_eager_answers(name):
    subject = SUBJECTS[name]
    be = CountingBackend()
    cf = framejit.compile(dispatch, backend=be)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(cf(x, subject), dispatch(x, subject))
    assert breaks == [] and framejit.stats()["eager_frames"] == before
    assert be.graph_count == 1


def test_changing_the_subject_recompiles_on_what_the_match_read():
    be = CountingBackend()
    cf = framejit.compile(dispatch, backend=be)
    cfg = {"act": "relu"}
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, cfg), dispatch(x, cfg))
    cfg["act"] = "gelu"  # the value the literal pattern compared
    cfg["approx"] = "none"
    torch.testing.assert_close(cf(x, cfg), dispatch(x, cfg))
    point = Point(1, 5)
    torch.testing.assert_close(cf(x, point), dispatch(x, point))
    point.x = 2  # the positional attribute
    torch.testing.assert_close(cf(x, point), dispatch(x, point))
    Point.__match_args__ = ("y", "x")  # the class's __match_args__
    try:
        point.y = 1
        torch.testing.assert_close(cf(x, point), dispatch(x, point))
    finally:
        Point.__match_args__ = ("x", "y")
    assert be.graph_count == 5


class NoArgs:
    pass


class BadArgs:
    __match_args__ = ["x"]


def _too_many(x, v):
    match v:
        case NoArgs(1):
            return x
    return -x


def _bad_args(x, v):
    match v:
        case BadArgs(1):
            return x
    return -x


def _repeated(x, v):
    match v:
        case Point(1, x=2):
            return x
    return -x


@pytest.mark.parametrize("fn, subject", [(_too_many, NoArgs()), (_bad_args, BadArgs()), (_repeated, Point(1, 2))])
def test_malformed_class_patterns_raise_what_eager_raises(fn, subject):
    x = torch.randn(2)
    with pytest.raises(TypeError) as eager:
        fn(x, subject)
    with pytest.raises(TypeError) as compiled:
        framejit.compile(fn, backend="eager")(x, subject)
    assert str(compiled.value) == str(eager.value)


def test_a_match_on_a_tensor_attribute_in_a_module_forward():
    class Head(torch.nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x):
            match self.kind:
                case ("scale", k):
                    return self.proj(x) * k
                case "plain":
                    return self.proj(x)

    for kind in (("scale", 3), "plain"):
        m = Head(kind)
        be = CountingBackend()
        cm = framejit.compile(m, backend=be)
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(cm(x), m(x))
        assert be.graph_count == 1
