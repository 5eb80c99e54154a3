"""Sets from outside mutated inside the compiled region and iterated afterwards, outside it (issue 12,
NOTE [Set operands in the replay] in capture/set_replay.py): the replay must leave each set laid out as
eager leaves it, so that its iteration order after the call is eager's. The sets use colliding ints (1, 17,
33, ... share a slot of an 8-entry table), whose order depends on how and in what order they were
inserted, on when the table was resized, and on whether an operand was a set, a dict or another iterable.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

BACKENDS = ["eager", "onnxrt"]


def _fresh():
    s = set()
    s.update([1, 17, 33, 2])
    return s


def _ior_operator(s, t):
    s |= {145, 161}


def _ior_operator_outside(s, t):
    s |= t


def _isub_then_ior_operators(s, t):
    s -= {2}
    s |= {145, 161}


def _iand_ixor_operators(s, t):
    s &= {2, 33, 17, 1, 99}
    s ^= {1, 145, 161}


PROGRAMS = {
    "ior_operator": _ior_operator,
    "ior_operator_outside": _ior_operator_outside,
    "isub_then_ior_operators": _isub_then_ior_operators,
    "iand_ixor_operators": _iand_ixor_operators,
    "ior_literal": lambda s, t: s.__ior__({145, 161}),
    "update_set": lambda s, t: s.update({145, 161, 177}),
    "update_frozenset": lambda s, t: s.update(frozenset({145, 161})),
    "update_dict": lambda s, t: s.update({145: 0, 161: 0, 3: 0}),
    "update_outside_set": lambda s, t: s.update(t),
    "ior_outside_set": lambda s, t: s.__ior__(t),
    "isub_then_ior": lambda s, t: (s.__isub__({2}), s.__ior__({145, 161})),
    "intersection_update_set": lambda s, t: s.intersection_update({2, 33, 17, 1, 99}),
    "iand_outside": lambda s, t: s.__iand__(t),
    "symmetric_difference_update_set": lambda s, t: s.symmetric_difference_update({1, 145, 161}),
    "ixor_outside": lambda s, t: s.__ixor__(t),
    "clear_then_ior": lambda s, t: (s.clear(), s.__ior__(t)),
    "self_operands": lambda s, t: (s.__ior__(s), s.add(49), s.__ixor__({49})),
}


def _outside_operand():
    t = set()
    t.update([161, 145, 33, 209])
    return t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_set_mutated_inside_iterates_as_eager_outside(name, backend):
    op = PROGRAMS[name]

    def fn(x, s, t):
        op(s, t)
        return x + len(s)

    compiled = framejit.compile(fn, backend=CountingBackend() if backend == "eager" else backend)
    for n in (2, 3, 2):
        eager_s, compiled_s = _fresh(), _fresh()
        expected = fn(torch.ones(n), eager_s, _outside_operand())
        actual = compiled(torch.ones(n), compiled_s, _outside_operand())
        torch.testing.assert_close(actual, expected)
        assert list(compiled_s) == list(eager_s)


def test_set_from_a_global_mutated_then_iterated_by_the_caller():
    holder = {"s": _fresh()}

    def fn(x):
        s = holder["s"]
        s |= {145, 161}
        s.discard(17)
        s.update({17: None, 193: None})
        return x * 2

    compiled = framejit.compile(fn, backend=CountingBackend())
    for _ in range(2):
        holder["s"] = _fresh()
        fn(torch.ones(2))
        expected = list(holder["s"])
        holder["s"] = _fresh()
        compiled(torch.ones(2))
        assert list(holder["s"]) == expected
