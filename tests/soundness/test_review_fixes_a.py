"""Review A's findings (helper_notes/revA.md), each run eagerly and compiled on fresh state, >= 2 calls.

F1: a deque iterated while it is mutated raises CPython's "deque mutated during iteration" (NOTE [Deque
iterators] in values/containers.py). F3: an object made in the trace whose class defines a `__dict__`
property keeps its attributes when rebuilt (NOTE [Rebuilt objects whose class overrides __dict__] in
codegen_runtime.py).
"""
from collections import deque

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

STATE = {}


def _outcome(fn, x, make_state):
    """(returned value or exception (type, message), what the state looks like after the call)."""
    STATE.clear()
    STATE.update(make_state())
    try:
        result = ("ok", fn(x))
    except Exception as e:  # the point: eager's exception type and message
        result = ("raised", type(e), str(e))
    return result, {k: list(v) if isinstance(v, deque) else v for k, v in STATE.items()}


def _same(a, b):
    assert a[0] == b[0], (a, b)
    if a[0] == "raised":
        assert a[1:] == b[1:], (a, b)
    else:
        torch.testing.assert_close(a[1], b[1])
        assert a[2:] == b[2:], (a, b)  # what a `post` read after the call


def differential(fn, states, post=None):
    """Run fn eagerly and compiled for each state maker; compare results, exceptions and final states."""
    compiled = framejit.compile(fn, backend=CountingBackend())
    for i, make_state in enumerate(states):
        x = torch.full((2,), float(i + 1))
        expected, expected_state = _outcome(fn, x, make_state)
        if post is not None:
            expected = post(expected)
        actual, actual_state = _outcome(compiled, x, make_state)
        if post is not None:
            actual = post(actual)
        _same(actual, expected)
        assert repr(actual_state) == repr(expected_state)


# ---- F1: deques mutated while iterated -----------------------------------------------------------------

def _append_while_iterating(x):
    d = STATE["d"]
    for t in d:
        d.append(t)
    return x + 1


@pytest.mark.parametrize("maxlen", [None, 3, 2])
def test_a_deque_from_outside_appended_while_iterated_raises(maxlen):
    differential(_append_while_iterating, [lambda: {"d": deque([1, 2], maxlen=maxlen)},
                                           lambda: {"d": deque([5, 6], maxlen=maxlen)},
                                           lambda: {"d": deque([], maxlen=maxlen)}])


def _made_in_trace(x):
    d = deque(STATE["items"])
    out = []
    for t in d:
        out.append(t)
        if t == STATE["at"]:
            d.appendleft(t)
    STATE["out"] = out
    return x + len(d)


def test_a_deque_made_in_the_trace_mutated_while_iterated_raises():
    differential(_made_in_trace, [lambda: {"items": [1, 2, 3], "at": 2}, lambda: {"items": [1, 2, 3], "at": 7},
                                  lambda: {"items": [4, 5], "at": 4}, lambda: {"items": [4, 5], "at": 5}])


def _mutation_kinds(x):
    d = STATE["d"]
    seen = []
    for t in d:
        seen.append(t)
        if len(seen) == 1:
            kind = STATE["kind"]
            if kind == "setitem":
                d[1] = 10
            elif kind == "reverse":
                d.reverse()
            elif kind == "rotate0":
                d.rotate(0)
            elif kind == "append_pop":
                d.append(7)
                d.pop()
            elif kind == "extend_empty":
                d.extend([])
            elif kind == "remove":
                d.remove(3)
            elif kind == "iadd":
                d += [8]
    STATE["seen"] = seen
    return x * len(seen)


@pytest.mark.parametrize("kinds", [("setitem", "reverse"), ("rotate0", "append_pop"), ("extend_empty", "remove"),
                                   ("iadd", "setitem")])
def test_which_deque_mutations_make_its_iterator_raise(kinds):
    differential(_mutation_kinds, [lambda k=k: {"d": deque([1, 2, 3]), "kind": k} for k in kinds])


def _iterator_escapes(x):
    d = STATE["d"]
    it = iter(d)
    first = next(it)
    if STATE["grow"]:
        d.append(first)
    return x + first, it


def _drain(outcome):
    """Step the returned iterator as the caller would, after the call."""
    if outcome[0] != "ok":
        return outcome
    value, it = outcome[1]
    try:
        rest = ("rest", list(it))
    except RuntimeError as e:
        rest = ("rest raised", str(e))
    return "ok", (value, torch.tensor(0.0)), rest, type(it).__name__


def test_a_returned_deque_iterator_raises_when_its_deque_changed():
    differential(_iterator_escapes, [lambda: {"d": deque([1, 2, 3], maxlen=4), "grow": True},
                                     lambda: {"d": deque([4, 5]), "grow": False},
                                     lambda: {"d": deque([6, 7, 8]), "grow": True}], post=_drain)


def _enumerate_pushing(x):
    d = STATE["d"]
    total = 0
    for i, t in enumerate(d):
        total += t
        if STATE["push"]:
            d.append(t)
            d.pop()
    return x + total


def test_enumerate_over_a_deque_mutated_while_drawn_raises():
    differential(_enumerate_pushing, [lambda: {"d": deque([1, 2]), "push": True},
                                      lambda: {"d": deque([3, 4, 5]), "push": False},
                                      lambda: {"d": deque([6, 7]), "push": True}])


# ---- F3: objects made in the trace whose class defines a __dict__ property -----------------------------

class _DictProperty:
    def __init__(self, k):
        self.k = k

    @property
    def __dict__(self):
        return {"z": 2}


class _DictPropertyCountingSetattr(_DictProperty):
    def __setattr__(self, name, value):
        STATE["setattr"] = STATE.get("setattr", 0) + 1
        object.__setattr__(self, name, value)


@pytest.mark.parametrize("cls", [_DictProperty, _DictPropertyCountingSetattr])
def test_an_object_whose_class_overrides_dict_keeps_its_attributes(cls):
    def f(x):
        p = cls(STATE["k"])
        return x + 1, p

    differential(f, [lambda: {"k": 1}, lambda: {"k": 5}, lambda: {"k": -2}],
                 post=lambda o: (o[0], (o[1][0], torch.tensor(float(o[1][1].k)))) if o[0] == "ok" else o)


def test_an_object_whose_class_overrides_dict_survives_a_graph_break():
    def h(x):
        p = _DictProperty(STATE["k"])
        print("break")
        return x + p.k

    differential(h, [lambda: {"k": 1}, lambda: {"k": 3}])


def _loop_with_a_break(x):
    d = STATE["d"]
    for t in d:
        x = x + t
        print("break")
        if STATE["mutate"]:
            d.append(1)
    return x


def test_a_deque_loop_whose_body_breaks_raises_when_mutated_after_the_break():
    differential(_loop_with_a_break, [lambda: {"d": deque([1, 2, 3]), "mutate": False},
                                      lambda: {"d": deque([4, 5]), "mutate": False},
                                      lambda: {"d": deque([4, 5, 6]), "mutate": True}])


def _next_across_a_break(x):
    d = STATE["d"] if STATE["outside"] else deque([1, 2, 3])
    it = iter(d)
    a = next(it)
    print("break")
    if STATE["mutate"]:
        d.append(3)
    return x + a + next(it)


def test_a_deque_iterator_live_at_a_break_raises_when_mutated_after_it():
    differential(_next_across_a_break, [lambda: {"d": deque([1, 2, 3]), "outside": True, "mutate": False},
                                        lambda: {"d": deque([4, 5]), "outside": True, "mutate": True},
                                        lambda: {"d": deque([4, 5]), "outside": False, "mutate": True},
                                        lambda: {"d": deque([4, 5]), "outside": False, "mutate": False}])


# ---- F2: a class whose __dict__ is a property: no run of it while tracing or in guards -----------------

class _CountingDictProperty:
    scale = 2

    @property
    def __dict__(self):
        STATE["calls"] = STATE.get("calls", 0) + 1
        return {"k": STATE["calls"]}


def _run_counting(fn, steps):
    """Each step: (what to do to the object before the call); returns values and property calls."""
    obj = _CountingDictProperty()
    STATE.clear()
    STATE["o"] = obj
    results = []
    for i, step in enumerate(steps):
        step(obj)
        results.append(fn(torch.full((2,), float(i + 1))))
    return results, STATE.get("calls", 0)


def _class_attribute(x):
    return x * STATE["o"].scale


def _instance_dict_read(x):
    return x + vars(STATE["o"])["k"]


@pytest.mark.parametrize("fn", [_class_attribute, _instance_dict_read])
def test_a_dict_property_runs_only_where_eager_runs_it(fn):
    def shadow(o):
        o.scale = 5  # lands in the real instance dict: o.scale reads it, the property never sees it

    steps = [lambda o: None, lambda o: None, shadow, lambda o: None]
    expected, expected_calls = _run_counting(fn, steps)
    actual, actual_calls = _run_counting(framejit.compile(fn, backend=CountingBackend()), steps)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    assert actual_calls == expected_calls
