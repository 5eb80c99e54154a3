"""`item in iterator` (NOTE [Membership in iterators], capture/comparisons.py; issue 11).

An iterator has no `__contains__`: `in` draws items until one `is` or `==` the item and leaves the iterator
after it. It was a graph break ("`in` on IteratorValue", "`in` on generator ... driven by send"). Each program
runs eagerly and compiled on fresh inputs of changing shape and asserts equal values, side effects in eager's
order, the iterator's state afterwards, no frame run wholly eagerly, and the breaks that remain.
"""
from __future__ import annotations

import torch

import framejit
from tests.capture.test_idiom_sweep5 import _run  # eager vs compiled on fresh arguments, break records
from tests.helpers import CountingBackend, assert_same, logged_breaks


def _tensor(i):
    return (torch.randn(i + 1),)


def test_membership_in_generators_steps_their_bodies_in_order():
    def f(x):
        steps = []

        def whoo():
            steps.append("a")
            yield 1
            steps.append("b")
            yield 2
            steps.append("c")

        g = whoo()
        first = 1 in g
        seen = list(steps)
        second = 2 in g
        try:
            next(g)
            ended = False
        except StopIteration:
            ended = True
        return x + first + second, seen, list(steps), ended, 3 in whoo(), 5 not in (i * 2 for i in range(4))

    backend, records = _run(f, _tensor)
    assert records == []
    assert backend.graph_count >= 1


def test_membership_leaves_the_iterator_after_the_match():
    def f(x):
        it = iter([1, 2, 3, 4])
        found = 2 in it
        rest = list(it)
        tup = iter((5, 6, 7))
        missing = 9 in tup  # exhausts it
        m = map(len, ["a", "bb", "ccc"])
        return x * next(iter(rest)), found, rest, missing, list(tup), 2 in m, list(m)

    backend, records = _run(f, _tensor)
    assert records == []


def test_an_iterator_that_outlives_the_graph_keeps_its_type_and_position():
    def f(x):
        it = iter((1, 2, 3, 4))
        found = 2 in it
        return x + found, it

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    with logged_breaks() as records:
        for i in range(3):
            x = torch.randn(i + 1)
            out, it = compiled(x)
            expected, eager_it = f(x)
            assert_same(out, expected)
            assert type(it) is type(eager_it) and list(it) == list(eager_it) == [3, 4]
    assert records == []


def test_tensors_found_by_identity_and_data_comparisons_break_at_the_in():
    def by_identity(x):
        y = x + 1
        g = iter([x, y])
        return x in g, list(g), x * 2  # the first item `is` x: no `==` runs

    backend, records = _run(by_identity, _tensor)
    assert records == []

    def by_data(x):
        g = (t for t in [x + 1, x])
        return (x * 0 + x) in g, x - 1  # a new tensor: `==` compares data (one element, as eager allows)

    backend, records = _run(by_data, lambda i: (torch.full((1,), float(i)),))
    assert any("data" in r for r in records)  # the `in` runs as Python, with eager's result


def test_an_exception_raised_by_the_generator_reaches_the_caller():
    def f(x):
        def bad():
            yield 1
            raise ValueError("boom")

        try:
            return 5 in bad(), x
        except ValueError as e:
            return str(e), x + 1

    backend, records = _run(f, _tensor)
    assert records == []


def test_an_iterator_from_outside_is_drawn_in_the_trace():
    def f(x, it):
        return 3 in it, x + 1, list(it)

    backend, records = _run(f, lambda i: (torch.randn(i + 1), iter(list(range(i, i + 5)))))
    assert records == []
