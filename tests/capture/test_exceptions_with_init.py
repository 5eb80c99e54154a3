"""Exceptions of classes with their own Python `__init__` made while tracing (NOTE [Exceptions with a Python
__init__] in capture/user_exceptions.py): raised and caught, returned, made in a loop, with `super().__init__`;
an `__init__` that writes outside state or raises still runs as Python. Every result, exception and the state
the program leaves is compared with the same program run eagerly."""
from __future__ import annotations

import torch

import framejit

MADE = [0]


class Located(Exception):
    def __init__(self, row, *, col=0):
        self.row = row
        self.col = col


class MissingKey(KeyError):
    def __init__(self, key, why="absent"):
        super().__init__(key)
        self.why = why


class Counted(Exception):
    def __init__(self, n):
        MADE[0] += 1
        self.n = n


class Checked(Exception):
    def __init__(self, n):
        if n < 0:
            raise ValueError("negative")
        self.n = n


def caught_fields(x):
    try:
        raise Located(3, col=4)
    except ValueError:
        return x
    except Located as e:
        return x * e.row + e.col + len(e.args)


def caught_base_init(x):
    try:
        raise MissingKey("k")
    except KeyError as e:
        return x + len(str(e)) + len(e.why) + len(e.args)


def made_in_a_loop(x):
    errors = []
    for i in range(3):
        try:
            raise Located(i, col=i + 1)
        except Located as e:
            errors.append(e)
    return x + errors[2].row, errors


def outside_write(x):
    try:
        raise Counted(2)
    except Counted as e:
        return x + e.n + MADE[0]


def raising_init(x):
    try:
        Checked(-1)
    except ValueError:
        return x + 1
    return x


def _same_exception(a, b):
    return type(a) is type(b) and a.args == b.args and a.__dict__ == b.__dict__ and a is not b


def _check(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (2, 3, 2):
        x = torch.randn(n).abs()
        MADE[0] = 0
        expected = fn(x)
        made_eager = MADE[0]
        MADE[0] = 0
        got = compiled(x)
        if isinstance(expected, tuple):
            assert torch.equal(got[0], expected[0])
            assert all(_same_exception(a, b) for a, b in zip(expected[1], got[1]))
        else:
            assert torch.equal(got, expected), fn.__name__
        assert MADE[0] == made_eager
    return framejit.explain(fn)(torch.randn(3))


def test_exceptions_with_an_init_are_made_in_the_graph_frame():
    for fn in (caught_fields, caught_base_init, made_in_a_loop, raising_init):
        report = _check(fn)
        assert report.graph_count == 1 and report.graph_break_count == 0, (fn.__name__, report)


def test_an_init_writing_outside_state_runs_as_python():
    report = _check(outside_write)
    assert report.graph_break_count >= 1


def test_fullgraph_raise_of_an_exception_with_fields():
    framejit.reset()
    compiled = framejit.compile(caught_fields, backend="eager", fullgraph=True)
    for n in (2, 5):
        x = torch.randn(n)
        assert torch.equal(compiled(x), caught_fields(x))


def test_an_escaping_exception_is_a_new_object_each_call():
    def fn(x):
        raise Located(x.shape[0] * 0 + 7, col=1)

    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    seen = []
    for _ in range(2):
        try:
            compiled(torch.ones(2))
        except Located as e:
            seen.append(e)
    try:
        fn(torch.ones(2))
    except Located as e:
        assert all(_same_exception(e, s) for s in seen)
    assert seen[0] is not seen[1]
