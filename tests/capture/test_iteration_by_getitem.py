"""Iteration over objects whose class has `__getitem__` and no `__iter__` (issue 11, NOTE [Iteration by
__getitem__] in framejit/capture/sequence_protocol.py).

CPython iterates such an object by calling `__getitem__(0)`, `(1)`, ... until IndexError or StopIteration;
before, framejit broke at the loop and the resume frame, holding the iterator, ran wholly eagerly. Each test
runs eagerly and compiled over calls with fresh inputs and compares values, the exception raised and the
state left behind.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Rows:
    """Items by index, IndexError past the end (like a legacy dataset)."""

    def __init__(self, data):
        self.data = data

    def __getitem__(self, i):
        if i >= len(self.data):
            raise IndexError(i)
        return self.data[i] * 2


class Counted:
    """Ends with StopIteration; reports nothing about its length."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if i == self.n:
            raise StopIteration
        return i + 1


def loop_sum(x, rows):
    total = x
    for row in rows:
        total = total + row
    return total


def as_list(x, seq):
    items = list(seq)
    return x * len(items) + sum(items), [i for i, _ in enumerate(seq)]


def _run(fn, calls):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for args in calls:
            expected = fn(*args)
            got = compiled(*args)
            torch.testing.assert_close(got, expected)
    return backend.graph_count, list(breaks), framejit.stats()["eager_frames"] - before


def test_a_for_loop_over_tensor_rows_is_one_graph():
    calls = [(torch.randn(3), Rows([torch.randn(3) for _ in range(4)])),
             (torch.randn(3), Rows([torch.randn(3) for _ in range(4)]))]
    graphs, breaks, eager = _run(loop_sum, calls)
    assert (graphs, breaks, eager) == (1, [], 0)


def test_list_and_enumerate_of_an_object_made_in_the_frame_stop_at_stop_iteration():
    def fn(x, n):
        return as_list(x, Counted(n))

    graphs, breaks, eager = _run(fn, [(torch.randn(2), 3), (torch.randn(2), 3), (torch.randn(2), 5)])
    assert breaks == [] and eager == 0 and graphs <= 2


def test_a_longer_sequence_on_a_later_call_is_retraced():
    calls = [(torch.randn(3), Rows([torch.randn(3) for _ in range(n)])) for n in (2, 2, 5)]
    graphs, breaks, eager = _run(loop_sum, calls)
    assert breaks == [] and eager == 0


class Lookup:
    def __init__(self, table):
        self.table = table

    def __getitem__(self, i):
        return self.table[i]  # KeyError, not IndexError: it propagates out of the loop


def test_an_error_other_than_index_error_propagates_as_eager():
    def fn(x, seq):
        try:
            return loop_sum(x, seq)
        except KeyError as e:
            return x - e.args[0]

    for table in ({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0, 2: 3.0}):
        x = torch.randn(3)
        torch.testing.assert_close(framejit.compile(fn)(x, Lookup(table)), fn(x, Lookup(table)))


class Growing:
    def __init__(self):
        self.items = [1, 2]

    def __getitem__(self, i):
        return self.items[i]  # IndexError of the list ends the iteration


def test_items_added_while_looping_are_seen_as_in_eager():
    def fn(x):
        seq = Growing()
        seen = []
        for v in seq:
            seen.append(v)
            if v < 3:
                seq.items.append(v + 2)  # read by a later __getitem__: the loop must not run ahead
        return x + sum(seen), seen

    for _ in range(2):
        x = torch.randn(3)
        expected, got = fn(x), framejit.compile(fn)(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1] == [1, 2, 3, 4]


LOG = []


class Logs:
    def __getitem__(self, i):
        LOG.append(i)  # an effect of each read, interleaved with the loop body's own
        if i == 3:
            raise IndexError
        return i


def test_reads_with_effects_keep_their_order_with_the_loop_body():
    def fn(x):
        for v in Logs():
            LOG.append(-v - 1)
        return x + len(LOG)

    for _ in range(2):
        x = torch.randn(3)
        LOG.clear()
        expected = fn(x)
        eager_log = list(LOG)
        LOG.clear()
        torch.testing.assert_close(framejit.compile(fn)(x), expected)
        assert LOG == eager_log == [0, -1, 1, -2, 2, -3, 3]


class WithIterNone:
    __iter__ = None

    def __getitem__(self, i):
        return i


@pytest.mark.parametrize("cls", [WithIterNone, object])
def test_objects_that_are_not_iterable_raise_type_error_as_eager(cls):
    def fn(x, o):
        try:
            for _ in o:
                x = x + 1
        except TypeError as e:
            return x - len(str(e))
        return x

    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(framejit.compile(fn)(x, cls()), fn(x, cls()))


class GeneratorIter:
    """A generator __iter__ over a list the loop body appends to."""

    def __init__(self):
        self.items = [1, 2]

    def __iter__(self):
        i = 0
        while i < len(self.items):
            yield self.items[i]
            i += 1


class ListIter:
    """An __iter__ returning an iterator over its list (read live by CPython's list iterator)."""

    def __init__(self):
        self.items = [1, 2]

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("cls", [Growing, GeneratorIter, ListIter])
def test_a_loop_that_changes_what_the_iterator_reads_matches_eager(cls):
    # before: the loop got a list of the items taken up front ([1, 2]; eager [1, 2, 3, 4]) for the
    # generator __iter__ and the list iterator, as for __getitem__ iteration once it was traced
    def fn(x):
        seq = cls()
        seen = []
        for v in seq:
            seen.append(v)
            if v < 3:
                seq.items.append(v + 2)
        return x + sum(seen), seen

    for _ in range(2):
        x = torch.randn(3)
        expected, got = fn(x), framejit.compile(fn)(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1] == [1, 2, 3, 4]


@pytest.mark.parametrize("cls", [Growing, GeneratorIter, ListIter])
def test_next_after_a_change_between_steps_matches_eager(cls):
    def fn(x):
        seq = cls()
        it = iter(seq)
        first = next(it)
        seq.items[1] = 7
        second = next(it)
        return x + first + second, [first, second]

    for _ in range(2):
        x = torch.randn(3)
        expected, got = fn(x), framejit.compile(fn)(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1] == [1, 7]
