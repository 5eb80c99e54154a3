"""Dicts from outside keyed by namedtuples, frozensets, complex numbers, ranges, dates and timedeltas are
captured, each key read through its own source `list(d)[i]` (NOTE [Immutable values as dict keys, by their
source] in capture/values/value_keys.py).

Before, such a dict argument was "non-constant keys", where no graph break could be taken: the whole frame ran
eagerly (hhuntG6 M1). A first attempt (7502770, reverted in 31da838) made the keys constants of the trace; its
review (revAS) found `k is K0` / `id(k)` answered from the first call's key (HIGH-1), a namedtuple key's class
changed later not noticed (HIGH-2), properties and methods of a namedtuple-subclass key run once while tracing
(HIGH-3) and date arguments pinned by value (MED-1). Each has a regression test here.
"""
from __future__ import annotations

import collections
import datetime

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

P = collections.namedtuple("P", "a b")
K0, F0, R0, D0, C0, T0 = P(1, 2), frozenset({1, 2}), range(3, 7), datetime.date(2020, 1, 1), complex(1, 2), \
    datetime.timedelta(5)


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and [type(k) for k in a] == [type(k) for k in b] and \
            all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and repr(a) == repr(b) and a == b


def _differential(fn, makers, graphs=None):
    """eager and framejit on fresh arguments from each maker; the frame is never run eagerly."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = _eager_frames()
    for i, make in enumerate(makers):
        expected, actual = fn(*make()), compiled(*make())
        assert _same(expected, actual), (fn.__name__, i, expected, actual)
    assert _eager_frames() == before, framejit.stats()["eager_frame_reasons"][-1:]
    if graphs is not None:
        assert backend.graph_count == graphs
    return backend


def _scaled(x, scales):
    y = x * 2 + 1
    return y * scales[P(0, 1)] + len(scales)


KEYS = {
    "namedtuple": (P(0, 1), P(1, 0)),
    "tuple_of_namedtuple": ((P(0, 1), "q"), (P(1, 0), "k")),
    "frozenset": (frozenset({1, 2}), frozenset({"a"})),
    "complex": (1j, complex(2, -0.0)),
    "range": (range(3), range(1, 9, 2)),
    "date": (datetime.date(2020, 1, 2), datetime.date(1999, 12, 31)),
    "timedelta": (datetime.timedelta(days=3), datetime.timedelta(0)),
}


def _walk(x, d):
    total = x
    for k, v in d.items():
        total = total * v + len(repr(k))
    return total, list(d), [str(k) for k in d]


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_dict_argument_keyed_by_immutable_values_is_one_graph(kind):
    a, b = KEYS[kind]
    makers = [lambda i=i: (torch.full((2,), float(i)), {a: torch.tensor(2.0 + i), b: torch.tensor(3.0)})
              for i in range(3)]
    # a date or timedelta key is an object: its repr/str is a break (still no eager frame)
    _differential(_walk, makers, graphs=None if kind in ("date", "timedelta") else 1)


def test_namedtuple_lookup_in_dict_argument_is_one_graph():
    makers = [lambda i=i: (torch.full((3,), float(i)), {P(0, 1): 2.0, P(1, 0): 3.0}) for i in range(3)]
    _differential(_scaled, makers, graphs=1)


def _key_is_global(d, t):
    k = next(iter(d))
    return t + 1, (k is K0, k is F0, k is R0, k is D0, k is C0, k is T0)


@pytest.mark.parametrize("kind", ["namedtuple", "frozenset", "range", "date", "complex", "timedelta"])
def test_key_identity_is_not_answered_from_the_first_call(kind):
    # revAS HIGH-1: an equal key of another identity: eager False, 7502770 True
    glob = {"namedtuple": K0, "frozenset": F0, "range": R0, "date": D0, "complex": C0, "timedelta": T0}[kind]
    copy = {"namedtuple": lambda: P(*[1, 2]), "frozenset": lambda: frozenset([1, 2]), "range": lambda: range(3, 7),
            "date": lambda: datetime.date(2020, 1, 1), "complex": lambda: complex(1, 2),
            "timedelta": lambda: datetime.timedelta(5)}[kind]
    makers = [lambda: ({glob: 1}, torch.ones(2)), lambda: ({copy(): 1}, torch.ones(2)),
              lambda: ({glob: 1}, torch.ones(2)), lambda: ({copy(): 1}, torch.ones(2))]
    _differential(_key_is_global, makers)


def _key_id(d, t):
    k = next(iter(d))
    return t + 1, id(k) == id(K0), id(k) == id(C0)


def test_key_id_is_not_answered_from_the_first_call():
    makers = [lambda: ({K0: 1}, torch.ones(2)), lambda: ({P(*[1, 2]): 1}, torch.ones(2)),
              lambda: ({C0: 1}, torch.ones(2)), lambda: ({complex(1, 2): 1}, torch.ones(2))]
    _differential(_key_id, makers)


def _key_kept_across_break(d, t):
    k = next(iter(d))
    del d[k]
    d[P(9, 9)] = 0
    print("break")
    return t + 1, k, k is K0, d


def test_key_read_before_the_dict_changes_and_a_break(capsys):
    makers = [lambda: ({K0: 1, P(3, 4): 2}, torch.ones(2)), lambda: ({P(*[1, 2]): 1}, torch.ones(2)),
              lambda: ({K0: 1}, torch.ones(2))]
    _differential(_key_kept_across_break, makers)


def _text_and_field(d, t):
    k = next(iter(d))
    return t + 1, repr(k), str(k), f"{k}", k.a


@pytest.mark.parametrize("where", ["key", "argument"])
def test_namedtuple_class_changed_after_the_first_call(where):
    # revAS HIGH-2: __repr__/__str__/__format__ or a field property set on the class later (the argument's
    # text was stale before too)
    Q = collections.namedtuple("Q", "a b")
    fn = _text_and_field if where == "key" else (lambda k, t: _text_and_field({k: 0}, t))
    make = (lambda: ({Q(1, 2): 5}, torch.ones(1))) if where == "key" else (lambda: (Q(1, 2), torch.ones(1)))
    compiled = framejit.compile(fn, backend="eager")
    for change in (None, ("__repr__", lambda s: "R!"), ("__str__", lambda s: "S!"),
                   ("__format__", lambda s, spec: "F!"), ("a", property(lambda s: 99))):
        if change is not None:
            setattr(Q, *change)
        assert _same(fn(*make()), compiled(*make())), change


def test_namedtuple_key_captured_before_its_class_changes():
    Q = collections.namedtuple("Q", "a b")
    _differential(_text_and_field, [lambda: ({Q(1, 2): 5}, torch.ones(1))] * 2, graphs=1)


SCALE = [2]
LOG = []


class K(collections.namedtuple("KB", "a b")):
    __slots__ = ()
    W = 2

    @property
    def scaled(self):
        return self.a * SCALE[0]

    def note(self):
        LOG.append(self.a)
        return len(LOG)


def _methods(d, t):
    k = next(iter(d))
    return t * k.scaled * k.W, k.note()


def test_namedtuple_subclass_key_methods_run_each_call():
    # revAS HIGH-3 (and a10): a property reading a global, a method appending to a list, a class attribute
    compiled = framejit.compile(_methods, backend="eager")
    before = _eager_frames()
    for i in range(3):
        SCALE[0] = 2 + i
        K.W = 5 - i
        LOG.clear()
        expected, eager_log = _methods({K(1, 2): 0}, torch.ones(1)), list(LOG)
        LOG.clear()
        actual, jit_log = compiled({K(1, 2): 0}, torch.ones(1)), list(LOG)
        assert _same(expected, actual) and eager_log == jit_log, (i, expected, actual, eager_log, jit_log)
    assert _eager_frames() == before


def _nested(d, t):
    k = next(iter(d))
    return t * k[0].scaled


def test_tuple_key_holding_a_namedtuple_subclass():
    def make(i):
        def m():
            SCALE[0] = 2 + i
            return {(K(1, 2), 0): 1}, torch.ones(1)
        return m
    backend = CountingBackend()
    compiled = framejit.compile(_nested, backend=backend)
    before = _eager_frames()
    for i in range(3):
        expected = _nested(*make(i)())
        assert _same(expected, compiled(*make(i)())), i
    assert _eager_frames() == before


class Loud(collections.namedtuple("LoudBase", "a b")):
    __slots__ = ()

    def __repr__(self):
        LOG.append("repr")
        return "Loud!"


def _formatted(k, t):
    return t + 1, f"{k}", repr(k)


def test_namedtuple_argument_with_its_own_repr_runs_it_each_call():
    # revAS a13 on the argument path: the subclass's printing __repr__ ran only while tracing
    compiled = framejit.compile(_formatted, backend="eager")
    for _ in range(3):
        LOG.clear()
        expected, eager_log = _formatted(Loud(1, 2), torch.ones(1)), list(LOG)
        LOG.clear()
        actual, jit_log = compiled(Loud(1, 2), torch.ones(1)), list(LOG)
        assert _same(expected, actual) and eager_log == jit_log == ["repr", "repr"]


def _day(d, t):
    return t * d.day


def test_date_argument_not_pinned_by_value():
    # revAS MED-1: 12 dates hit the recompile limit (8) under 7502770; the frame stays compiled
    backend = _differential(_day, [lambda i=i: (datetime.date(2020, 1, 1 + i), torch.ones(1)) for i in range(12)])
    assert backend.graph_count <= 2


LOOKALIKES = [
    (lambda: {P(1, 2): 1}, lambda: {(1, 2): 1}),
    (lambda: {frozenset({1}): 1}, lambda: {frozenset({True}): 1}),
    (lambda: {range(0): 1}, lambda: {range(5, 5): 1}),
    (lambda: {complex(-0.0, 0): 1}, lambda: {0j: 1}),
    (lambda: {(P(1.0, 2), 0): 1}, lambda: {(P(1, 2), 0): 1}),
    (lambda: {datetime.timedelta(1): 1}, lambda: {datetime.timedelta(hours=24, seconds=1): 1}),
]


def _reads(d, t):
    k = next(iter(d))
    return t * len(d), repr(k), str(k), type(k).__name__, d.get((1, 2)), d.get(range(0)), d.get(0j)


@pytest.mark.parametrize("pair", range(len(LOOKALIKES)))
def test_lookalike_keys_alternating(pair):
    a, b = LOOKALIKES[pair]
    _differential(_reads, [lambda m=m: (m(), torch.ones(1)) for m in (a, b, a, b)])


GLOBAL_TABLE = {P(0, 1): 2.0, frozenset({3}): 4.0}


def _global_table(x):
    y = x + 1
    return y * GLOBAL_TABLE[P(0, 1)] * GLOBAL_TABLE[frozenset({3})]


def test_global_dict_keyed_by_namedtuples_is_one_graph():
    _differential(_global_table, [lambda i=i: (torch.full((2,), float(i)),) for i in range(3)], graphs=1)


class UserHash:
    calls = 0

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        UserHash.calls += 1
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, UserHash) and other.v == self.v


def _user_lookup(d, t):
    return t * d[UserHash(1)]


def test_user_hash_keys_stay_eager_with_a_reason():
    compiled = framejit.compile(_user_lookup, backend="eager")
    before = _eager_frames()
    for i in range(2):
        UserHash.calls = 0
        expected, eager_calls = _user_lookup({UserHash(1): 2.0 + i}, torch.ones(1)), UserHash.calls
        UserHash.calls = 0
        actual, jit_calls = compiled({UserHash(1): 2.0 + i}, torch.ones(1)), UserHash.calls
        assert _same(expected, actual) and eager_calls == jit_calls
    assert _eager_frames() == before + 1
    reason = framejit.stats()["eager_frame_reasons"][-1]["reason"]
    assert "UserHash" in reason and "__hash__" in reason, reason


def _reinsert(d, t):
    k0 = next(iter(d))
    v = d.pop(k0)
    d[k0] = v + 1
    return t + 1, list(d), [k is K0 for k in d], k0


def test_key_popped_and_put_back_is_the_same_object():
    makers = [lambda: ({K0: 1, P(3, 4): 2}, torch.ones(2)), lambda: ({P(*[1, 2]): 1, P(3, 4): 2}, torch.ones(2)),
              lambda: ({K0: 1, P(3, 4): 2}, torch.ones(2))]
    _differential(_reinsert, makers, graphs=1)


def _as_keys(k, t):
    d = {k: 1}
    d2 = {}
    d2[k] = 2
    return t + 1, d, d2


@pytest.mark.parametrize("make", [lambda: P(1, 2), lambda: frozenset({1}), lambda: (P(1, 2), 3)],
                         ids=["namedtuple", "frozenset", "tuple_of_namedtuple"])
def test_argument_stored_as_key_is_that_object(make):
    # the dicts the frame returns hold the argument itself, as in CPython (not a copy rebuilt from its parts)
    compiled = framejit.compile(_as_keys, backend="eager")
    before = _eager_frames()
    for _ in range(2):
        k1, k2 = make(), make()
        expected, actual = _as_keys(k1, torch.ones(1)), compiled(k2, torch.ones(1))
        assert _same(expected, actual)
        assert [next(iter(c)) is k2 for c in actual[1:]] == [next(iter(c)) is k1 for c in expected[1:]] == [True] * 2
    assert _eager_frames() == before


class Probed(collections.namedtuple("ProbedBase", "a b")):
    __slots__ = ()

    def __getattr__(self, name):
        LOG.append(name)
        raise AttributeError(name)


def _first_field(d, t):
    k = next(iter(d))
    return t + k.a, len(d)


def test_key_with_getattr_runs_no_code_while_wrapped():
    # telling the key's kind read `key.__self__` (for builtin-function keys) through the class's __getattr__
    compiled = framejit.compile(_first_field, backend="eager")
    before = _eager_frames()
    for i in range(2):
        LOG.clear()
        expected, eager_log = _first_field({Probed(i, 2): 0}, torch.ones(1)), list(LOG)
        LOG.clear()
        actual, jit_log = compiled({Probed(i, 2): 0}, torch.ones(1)), list(LOG)
        assert _same(expected, actual) and eager_log == jit_log == []
    assert _eager_frames() == before


def _set_of_arguments(a, b, t):
    s = {a, b, a}
    return t + len(s), sorted(s), a in s, P(1, 2) in s, (1, 2) in s, [v.a for v in sorted(s)]


def test_set_of_namedtuple_arguments_stays_captured():
    # set elements stay constants (elements kept by source iterate in address order: the resume function after
    # that break got the set as a local, "L['s'] is a set", and ran eagerly under the first version of this change)
    makers = [lambda: (P(1, 2), P(3, 4), torch.ones(2)), lambda: (P(3, 4), P(1, 2), torch.ones(2)),
              lambda: (P(1, 2), P(1, 2), torch.ones(2))]
    _differential(_set_of_arguments, makers)
