"""Shrunk reproducers of the soundness fuzzer's findings of this session (issue 12), as differential tests:
each runs eager and compiled on separate copies of its state, changing that state between calls."""
from __future__ import annotations

import collections

import torch

import framejit
from tests.helpers import CountingBackend


def _counts_reader():
    """Fuzzer seeds 38, 41 and 66 (outside_defaultdict), shrunk: f reads keys of a global defaultdict."""
    counts = collections.defaultdict(int)

    def f(x):
        out = x + counts["missing"]
        return out, len(counts), counts.get("calls", 0.5)
    return counts, f


def test_defaultdict_guards_do_not_insert_missing_keys():
    # An entry traced while the defaultdict held 'missing' and 'calls' read both through `d[k]` in its
    # guards: after d.clear() those reads inserted the keys again (the guard of an older entry mutated
    # the user's dict), and the call then saw {'missing': 0, 'calls': 0} instead of {'missing': 0}.
    eager_counts, f = _counts_reader()
    compiled_counts, g = _counts_reader()
    backend = CountingBackend()
    compiled = framejit.compile(g, backend=backend)
    steps = [lambda d: None, lambda d: d.__setitem__("calls", 10), lambda d: d.clear(),
             lambda d: d.__setitem__("calls", 3), lambda d: d.clear()]
    for i, step in enumerate(steps):
        step(eager_counts)
        step(compiled_counts)
        x = torch.randn(3) + i
        expected = f(x)
        actual = compiled(x)
        assert torch.equal(actual[0], expected[0])
        assert actual[1:] == expected[1:], (i, actual[1:], expected[1:])
        assert list(compiled_counts.items()) == list(eager_counts.items()), i
    assert backend.graph_count >= 2  # traced again after the dict changed: compiled code ran


def _weights_reader():
    weights = collections.defaultdict(list)

    def f(x):
        try:
            return x * weights["w"][0], sorted(weights)
        except IndexError:
            return x, sorted(weights)
    return weights, f


def test_defaultdict_of_lists_cleared_between_calls():
    # d["w"] of a cleared defaultdict(list) inserts [] (eager does too); the guards of the entry made while
    # "w" held [2.0] must fail without inserting anything else ("v" must not come back after a clear).
    eager_w, f = _weights_reader()
    compiled_w, g = _weights_reader()
    compiled = framejit.compile(g, backend="eager")
    steps = [lambda d: d["w"].append(2.0), lambda d: d["v"].append(1.0), lambda d: d.clear(),
             lambda d: d["w"].append(-1.0), lambda d: d.clear()]
    for i, step in enumerate(steps):
        step(eager_w)
        step(compiled_w)
        x = torch.randn(2) + i
        expected, actual = f(x), compiled(x)
        assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1], (i, actual, expected)
        assert dict(compiled_w) == dict(eager_w), (i, dict(compiled_w), dict(eager_w))


SEEN = {1, 2}


def _seen_updater(op):
    def f(x):
        global SEEN
        if op == "ior":
            SEEN |= {7, 8}
        else:
            SEEN.update({10, 3})
        return x + len(SEEN), sorted(SEEN), list(SEEN)
    return f


def test_outside_set_updated_then_iterated():
    # Fuzzer seeds 35 (onnxrt) and 719 (eager), outside_set, shrunk: `s |= t` / `s.update(t)` on a global
    # set announced the mutation before the set's first read, which then took the entry order: sorted(s)
    # and list(s) gave the entry elements [1, 2].
    for op in ("ior", "update"):
        f = _seen_updater(op)
        compiled = framejit.compile(f, backend="eager")
        for start in ({1, 2}, {2, 5}, set()):
            SEEN.clear()
            SEEN.update(start)
            expected = f(torch.ones(2))
            after_eager = list(SEEN)
            SEEN.clear()
            SEEN.update(start)
            actual = compiled(torch.ones(2))
            assert torch.equal(actual[0], expected[0]) and actual[1:] == expected[1:], (op, start, actual, expected)
            assert list(SEEN) == after_eager
