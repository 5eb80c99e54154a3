"""Adversarial differential programs against the capture behaviour added in one session (containers from
outside read lazily, sets from outside mutated in the log): each test is a minimal program run eagerly and
compiled over several calls, with the state it reads changed between calls.

Sets iterate in the order of their hash table, which depends on their history, not only on their
elements (NOTE [Set order] in capture/values/containers.py): the integer sets below are chosen so that a
copy of the set (or the same elements in another history) iterates in a different order.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, call_capturing

# built one by one, this set iterates [32, 2, 16, 53, 25, 31]; a copy of it iterates [32, 16, 2, 53, 25, 31]
ELEMENTS = [53, 2, 16, 32, 31, 25]
G: set = set()


def run_calls(fn, steps, *, fullgraph=False):
    """Eager, then compiled: before call i, `steps[i]()` sets the state up (it also runs before the eager
    call); results, exceptions and printed output must agree."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for i, step in enumerate(steps):
        step()
        expected, expected_exc, expected_out = call_capturing(fn, (torch.ones(2),), {})
        step()
        actual, actual_exc, actual_out = call_capturing(compiled, (torch.ones(2),), {})
        assert actual_exc is expected_exc, f"call {i}: {expected_exc} != {actual_exc}: {actual!r}"
        assert actual_out == expected_out, f"call {i}"
        if expected_exc is None:
            assert_same(actual, expected)
    return backend


def built_one_by_one(elements):
    def step():
        G.clear()
        for e in elements:
            G.add(e)
    return step


def grown_then_emptied(elements):
    def step():  # a big table with deleted entries: its copy gets a smaller table and another order
        G.clear()
        G.update(range(100))
        G.difference_update(range(100))
        for e in elements:
            G.add(e)
    return step


def digits_of_outside_set(x):
    t = 0
    for v in G:
        t = t * 100 + v
    return x + t, list(G)


def test_outside_set_iteration_follows_the_live_set():
    run_calls(digits_of_outside_set, [built_one_by_one(ELEMENTS), grown_then_emptied([1, 8]),
                                      grown_then_emptied([1, 8])])


def test_outside_set_equal_elements_other_order_recompiles():
    # {9, 1} iterates [9, 1], {1, 9} iterates [1, 9]: equal sets, but the guard must tell them apart
    backend = run_calls(digits_of_outside_set, [built_one_by_one([9, 1]), built_one_by_one([1, 9]),
                                                built_one_by_one([9, 1])])
    assert backend.graph_count == 2


def test_outside_set_bool_and_int_elements_are_told_apart():
    def as_text(x):
        return x + 1, [str(v) for v in G]
    run_calls(as_text, [built_one_by_one([1]), built_one_by_one([True]), built_one_by_one([1])])


def test_outside_set_changed_by_the_trace_then_iterated():
    def add_then_list(x):
        G.add(40)
        G.discard(2)
        return x + len(G), list(G)
    run_calls(add_then_list, [grown_then_emptied(ELEMENTS), built_one_by_one(ELEMENTS)])


FROZEN = frozenset(ELEMENTS)


def test_outside_frozenset_iterates_in_its_order():
    def listed(x):
        return x + 1, list(FROZEN), [v * 2 for v in FROZEN]
    run_calls(listed, [lambda: None, lambda: None])


def test_set_built_in_the_frame_iterates_as_eager():
    def made(x):
        s = set()
        for e in ELEMENTS:
            s.add(e)
        c = {e for e in ELEMENTS}
        return x + 1, list(s), list(c), list(set(ELEMENTS)), list(frozenset(ELEMENTS)), list(s | {7}), \
            list(s.copy())
    backend = run_calls(made, [lambda: None, lambda: None], fullgraph=True)
    assert backend.graph_count == 1


def test_set_display_of_constants_iterates_as_eager():
    def display(x):
        s = {53, 2, 16, 32, 31, 25}
        t = {53, 2, 16}
        t |= {32, 31, 25}
        return x + 1, list(s), list(t)
    run_calls(display, [lambda: None, lambda: None], fullgraph=True)


def test_frozenset_of_a_list_joined():
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]  # str hashes vary by process: any order

    def joined(x):
        f = frozenset(words)
        return x + 1, "".join(f), list(f)
    run_calls(joined, [lambda: None, lambda: None])


def test_copy_of_a_set_with_deleted_entries_is_not_iterated_in_the_wrong_order():
    def copied(x):
        c = set(G)  # CPython merges G's table: the trace cannot know that order, so it must not guess
        return x + 1, list(c)
    run_calls(copied, [grown_then_emptied([1, 8]), built_one_by_one(ELEMENTS)])


def test_outside_set_updated_in_place_then_iterated_and_popped():
    def update_then_read(x):
        s = set(ELEMENTS)
        s |= G
        c = G.copy()
        first = c.pop()
        return x + len(s), list(s), first, list(c)
    run_calls(update_then_read, [grown_then_emptied([1, 8, 33]), built_one_by_one(ELEMENTS)])


def test_returned_sets_iterate_as_eager():
    def returned(x):
        s = {53, 2, 16, 32, 31, 25}  # a merge of the frozenset constant: [32, 16, 2, ...]
        t = set()
        for e in ELEMENTS:  # one by one: [32, 2, 16, ...]
            t.add(e)
        return x + 1, s, t

    def check(i):
        expected, actual = returned(torch.ones(2)), compiled(torch.ones(2))
        assert [list(s) for s in actual[1:]] == [list(s) for s in expected[1:]], f"call {i}"
    compiled = framejit.compile(returned, backend=CountingBackend(), fullgraph=True)
    for i in range(2):
        check(i)
