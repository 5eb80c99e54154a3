"""str()/f-strings/bool/len/== of a member of a user Enum that defines those dunders run the enum's own
code on every call, as in eager, not an answer folded at trace time (NOTE [Dunders of enum members]);
plain enums still fold in one graph, and a dunder added to the class later is seen."""
import enum

import torch

import framejit
from tests.helpers import CountingBackend

G = {"suffix": "", "on": True, "n": 1}


class Mode(enum.Enum):
    A = "a"

    def __str__(self):
        return "M-" + self.name + G["suffix"]

    def __bool__(self):
        return G["on"]

    def __len__(self):
        return G["n"]

    def __eq__(self, other):
        return G["on"]

    __hash__ = enum.Enum.__hash__


class Formatted(enum.Enum):
    B = 2

    def __format__(self, spec):
        return "F" + G["suffix"]


class Plain(enum.Enum):
    C = 3


def _use(x, m):
    return str(m), f"{m}", (x + 1 if m else x - 1), len(m), m == 3, m != 3


def _fmt(x, m):
    return f"<{m}>", x * 2


def _plain(x, m):
    return str(m), f"{m}", (x + 1 if m else x - 1), m == Plain.C


def test_user_dunders_read_state_changed_between_calls():
    compiled = framejit.compile(_use, backend="eager")
    try:
        for upd in ({}, {"suffix": "!", "on": False, "n": 5}, {"suffix": "?", "on": True, "n": 2}):
            G.update(upd)
            x = torch.randn(2)
            got, want = compiled(x, Mode.A), _use(x, Mode.A)
            assert got[:2] == want[:2] and got[3:] == want[3:] and torch.equal(got[2], want[2])
            assert got[0] == "M-A" + G["suffix"] and got[3] == G["n"]
    finally:
        G.update(suffix="", on=True, n=1)


def test_user_format_runs():
    compiled = framejit.compile(_fmt, backend="eager")
    try:
        for suffix in ("", "!", "?"):
            G["suffix"] = suffix
            x = torch.randn(2)
            got, want = compiled(x, Formatted.B), _fmt(x, Formatted.B)
            assert got[0] == want[0] == f"<F{suffix}>" and torch.equal(got[1], want[1])
    finally:
        G["suffix"] = ""


def test_plain_enum_folds_in_one_graph_and_sees_a_dunder_added_later():
    counter = CountingBackend()
    compiled = framejit.compile(_plain, backend=counter)
    for _ in range(3):
        x = torch.randn(2)
        got, want = compiled(x, Plain.C), _plain(x, Plain.C)
        assert got[0] == want[0] == "Plain.C" and got[1] == want[1] and torch.equal(got[2], want[2])
    assert counter.graph_count == 1
    Plain.__str__ = lambda self: "S" + G["suffix"]
    Plain.__bool__ = lambda self: False
    try:
        x = torch.randn(2)
        got, want = compiled(x, Plain.C), _plain(x, Plain.C)
        assert got[:2] == want[:2] == ("S", "S") and torch.equal(got[2], want[2]) and torch.equal(got[2], x - 1)
    finally:
        del Plain.__str__, Plain.__bool__


def _membership(x, m):
    return 3 in [m], m in (1, 2), Plain.C in [m, Plain.C], x + 1


def test_membership_runs_the_enum_eq():
    compiled = framejit.compile(_membership, backend="eager")
    try:
        for on in (True, False, True):
            G["on"] = on
            x = torch.randn(2)
            got, want = compiled(x, Mode.A), _membership(x, Mode.A)
            assert got[:3] == want[:3] == (on, on, True) and torch.equal(got[3], want[3])
    finally:
        G["on"] = True
