"""A functools.partial subclass with its own `__call__` and a namedtuple subclass with its own sequence
methods are not modelled as their base: the override runs, as in eager (NOTE [Subclasses modelled as
their base]); plain partials and namedtuples still are, and a method added to the class later is seen."""
import collections
import functools

import torch

import framejit
from tests.helpers import CountingBackend


class Tagged(functools.partial):
    tag = "P"

    def __call__(self, *a, **k):
        return (self.tag, super().__call__(*a, **k))


class Plain(functools.partial):
    pass


NT = collections.namedtuple("NT", "a b")


class Iter2(NT):
    def __getitem__(self, i):
        return 50

    def __iter__(self):
        return iter((7, 8))


class Sized(NT):
    def __len__(self):
        return 9

    def __contains__(self, v):
        return v == "q"

    def __add__(self, other):
        return "added"

    def __bool__(self):
        return False


def _call(x, p):
    return p(x)


def _unpack(x, n):
    a, b = n
    return x + n[0] + a + b, list(n)


def _protocols(x, n):
    return len(n), "q" in n, n + (1,), (x + 1 if n else x - 1)


def test_partial_subclass_call_override_runs():
    compiled = framejit.compile(_call, backend="eager")
    for n, tag in ((2, "P"), (3, "Q"), (4, "R")):
        Tagged.tag = tag
        x, p = torch.randn(n), Tagged(lambda t, s: t + s, s=n)
        got, want = compiled(x, p), _call(x, p)
        assert got[0] == want[0] == tag and torch.equal(got[1], want[1])
    Tagged.tag = "P"


def test_partial_subclass_without_override_and_plain_partial():
    compiled = framejit.compile(_call, backend="eager")
    for n in (2, 3, 4):
        x = torch.randn(n)
        for p in (Plain(torch.add, other=n), functools.partial(torch.add, other=n)):
            assert torch.equal(compiled(x, p), _call(x, p))


def test_namedtuple_subclass_iter_and_getitem_overrides():
    compiled = framejit.compile(_unpack, backend="eager")
    for n in (2, 3, 4):
        x, nt = torch.randn(n), Iter2(n, 2 * n)
        (got, got_list), (want, want_list) = compiled(x, nt), _unpack(x, nt)
        assert torch.equal(got, want) and got_list == want_list == [7, 8]


def test_namedtuple_subclass_protocol_overrides():
    compiled = framejit.compile(_protocols, backend="eager")
    for n in (2, 3, 4):
        x, nt = torch.randn(n), Sized(n, 1)
        got, want = compiled(x, nt), _protocols(x, nt)
        assert got[:3] == want[:3] == (9, True, "added") and torch.equal(got[3], want[3])
        assert torch.equal(got[3], x - 1)


def test_plain_namedtuple_one_graph_and_method_added_later():
    counter = CountingBackend()
    compiled = framejit.compile(_unpack, backend=counter)
    for _ in range(3):
        x, nt = torch.randn(2), NT(2, 1)
        (got, got_list), (want, want_list) = compiled(x, nt), _unpack(x, nt)
        assert torch.equal(got, want) and got_list == want_list == [2, 1]
    assert counter.graph_count == 1

    class Later(NT):
        pass

    x = torch.randn(2)
    assert torch.equal(compiled(x, Later(1, 2))[0], _unpack(x, Later(1, 2))[0])
    Later.__iter__ = lambda self: iter((30, 40))
    (got, got_list), (want, want_list) = compiled(x, Later(1, 2)), _unpack(x, Later(1, 2))
    assert torch.equal(got, want) and got_list == want_list == [30, 40]


def _made_in_trace(x):
    n = Iter2(1, 2)
    a, b = n
    return x + a + b + n[0], list(n)


def test_namedtuple_subclass_made_while_tracing_runs_its_overrides():
    compiled = framejit.compile(_made_in_trace, backend="eager")
    for n in (2, 3, 4):
        x = torch.randn(n)
        (got, got_list), (want, want_list) = compiled(x), _made_in_trace(x)
        assert torch.equal(got, want) and torch.allclose(got, x + 65) and got_list == want_list == [7, 8]
