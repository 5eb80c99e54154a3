"""Instances of list subclasses passed in or held by objects (NOTE [List subclasses] in
framejit/capture/list_objects.py): list's own methods and slots on them (`len`, `o[i]`, `for v in o`, `in`,
`append`, `extend`, `o[i] = v`, `+=`) work on the object's contents; the methods its class overrides
(`__iter__`, `__getitem__`, `append`) are inlined; mutations are replayed on the caller's object. Before,
each of these was a graph break (`list.append called on a L object`), and a resume function entered inside
`for v in o` ran wholly eagerly (`an iterator over a L object from outside`): transformers'
StoppingCriteriaList and LogitsProcessorList in `generate()`.

Each case runs eagerly and compiled on fresh inputs, with the list object changed between calls, and compares
results, the object's type, its items (read with list's own methods) and its attributes afterwards.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class Plain(list):
    pass


class WithAttrs(list):
    def __init__(self, items=(), scale=2.0):
        super().__init__(items)
        self.scale = scale
        self.calls = 0


class OwnIter(list):
    def __iter__(self):
        return iter(list(reversed(list.copy(self))))


class OwnGetitem(list):
    def __getitem__(self, i):
        return super().__getitem__(i) * 10


class OwnAppend(list):
    def append(self, x):
        self.calls = getattr(self, "calls", 0) + 1
        super().append(x * 2)


class Criteria(list):
    """transformers' StoppingCriteriaList: a list of callables, called in turn by `__call__`."""

    def __call__(self, x):
        done = torch.zeros((), dtype=torch.bool)
        for criterion in self:
            done = done | criterion(x)
        return done


def _len_and_items(x, o):
    y = x * len(o)
    if o:
        y = y + o[0] + o[-1]
    return y, 3 in o, 100 in o


def _loop(x, o):
    for v in o:
        x = x * 0.5 + v
    return x


def _loop_with_break(x, o):
    for v in o:
        x = x + v
        print("step", v)  # a graph break inside the loop: the resume function steps the object's iterator
    return x


def _mutate(x, o):
    o.append(int(x.shape[0]))
    o.extend([7, 8])
    o[0] = 5
    o += [9]
    return x * len(o) + o[1], 9 in o


def _attrs(x, o):
    o.calls += 1
    total = sum(o)
    return x * o.scale + total, len(o)


def _calls_criteria(x, o):
    return o(x).float() + x


def _pop_and_insert(x, o):
    last = o.pop()
    o.insert(0, last)
    return x + last + len(o), list(o)


def _compare_and_delete(x, o):
    same, before, after = o == [1, 2], o < [1, 5], [0] < o
    del o[0]
    return x * len(o), same, before, after, o != [2], o >= o


def _raw(o):
    return type(o), list.copy(o), dict(getattr(o, "__dict__", {}))


def _differential(fn, make, *, rounds=3, fullgraph=True, change=None):
    """Eager and compiled on fresh objects each call (`make(seed)`), and once more on one object kept across
    calls and changed between them (`change(o, seed)`)."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    kept_e, kept_c = make(0), make(0)
    for seed in range(rounds):
        for e_obj, c_obj in ((make(seed), make(seed)), (kept_e, kept_c)):
            x = torch.randn(3 + seed)
            expected, actual = fn(x.clone(), e_obj), compiled(x.clone(), c_obj)
            _assert_same(actual, expected)
            assert _raw(c_obj) == _raw(e_obj)
        if change is not None:
            change(kept_e, seed)
            change(kept_c, seed)
    return backend


def _assert_same(actual, expected):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same(a, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert type(actual) is type(expected) and actual == expected


def _grow(o, seed):
    list.append(o, seed + 2)


@pytest.mark.parametrize("cls", [Plain, WithAttrs, OwnIter, OwnGetitem, OwnAppend])
@pytest.mark.parametrize("fn", [_len_and_items, _loop, _mutate, _pop_and_insert, _compare_and_delete])
def test_list_subclass_objects(fn, cls):
    _differential(fn, lambda seed: cls([1, 2, 3, seed][: 2 + seed]), change=_grow)


@pytest.mark.parametrize("cls", [Plain, OwnIter, OwnGetitem])
def test_loop_with_a_break_inside_steps_the_objects_iterator(cls, capsys):
    before = framejit.stats()["eager_frames"]
    backend = _differential(_loop_with_break, lambda seed: cls([1.0, 2.0, 3.0][: 1 + seed]), fullgraph=False,
                            change=_grow)
    assert framejit.stats()["eager_frames"] == before  # before: the resume function ran wholly eagerly
    assert backend.graph_count >= 1


def test_attributes_of_the_object_are_read_and_written():
    def change(o, seed):
        o.scale = 3.0 + seed
        list.append(o, 4.0)
    _differential(_attrs, lambda seed: WithAttrs([1.0, 2.0 + seed], scale=seed + 0.5), change=change)


def test_a_list_of_callables_called_by_its_own_method():
    limits = [lambda x: x.sum() > 0, lambda x: x.amax() > 1.5]
    backend = _differential(_calls_criteria, lambda seed: Criteria(limits[: 1 + seed % 2]), change=None)
    assert backend.graph_count >= 1


def test_no_graph_breaks_for_the_plain_list_methods():
    backend = CountingBackend()
    compiled = framejit.compile(_mutate, backend=backend, fullgraph=True)  # before: a break at o.append
    for cls in (Plain, WithAttrs):
        o_e, o_c = cls([1, 2]), cls([1, 2])
        x = torch.randn(4)
        _assert_same(compiled(x, o_c), _mutate(x, o_e))
        assert _raw(o_c) == _raw(o_e)


def test_overriding_a_method_after_the_first_call_is_seen():
    class Late(list):
        pass

    def fn(x, o):
        o.append(1)
        return x * len(o), o[0]

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(2)
    a, b = Late([3]), Late([3])
    _assert_same(compiled(x, a), fn(x, b))
    Late.append = lambda self, v: list.append(self, v + 100)
    Late.__getitem__ = lambda self, i: list.__getitem__(self, i) - 1
    Late.__len__ = lambda self: 42
    a, b = Late([3]), Late([3])
    _assert_same(compiled(x, a), fn(x, b))
    assert _raw(a) == _raw(b)


def test_the_replay_does_not_call_an_overridden_method_again():
    o_e, o_c = OwnAppend([1]), OwnAppend([1])
    compiled = framejit.compile(_mutate, backend="eager", fullgraph=True)
    x = torch.randn(2)
    _assert_same(compiled(x, o_c), _mutate(x, o_e))
    assert _raw(o_c) == _raw(o_e) and o_c.calls == 1


def test_mutation_while_iterating_is_seen_by_the_loop():
    def fn(x, o):
        for v in o:
            if v < 3:
                o.append(v + 2)
            x = x + v
        return x

    _differential(fn, lambda seed: Plain([1, 2 + seed]), change=None)


def test_an_iterator_returned_across_the_call_iterates_the_object():
    def fn(x, o):
        it = iter(o)
        first = next(it)
        return x + first, it

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    o_e, o_c = Plain([1, 2]), Plain([1, 2])
    x = torch.randn(2)
    (r_e, it_e), (r_c, it_c) = fn(x, o_e), compiled(x, o_c)
    torch.testing.assert_close(r_c, r_e)
    list.append(o_e, 3)
    list.append(o_c, 3)
    assert type(it_c) is type(it_e) and list(it_c) == list(it_e) == [2, 3]


def test_the_object_is_returned_as_itself():
    def fn(x, o):
        o.append(x.sum().item() > 100)
        return o

    compiled = framejit.compile(fn, backend="eager")
    o = WithAttrs([1])
    assert compiled(torch.ones(2), o) is o and list.copy(o) == [1, False]


# ---- objects made while tracing (NOTE [List-subclass objects made while tracing]) -----------------------
class Processors(list):
    """transformers' LogitsProcessorList: made empty, filled by append, called as a whole."""

    def __call__(self, x):
        for p in self:
            x = p(x)
        return x


class Named(list):
    def __init__(self, items, name):
        super().__init__(items)
        self.name = name

    def total(self):
        return sum(self)


def _build_and_call(x, n):
    procs = Processors()
    procs.append(lambda t: t * 2)
    if n > 1:
        procs.extend([lambda t: t + 1])
    procs += [lambda t: t - 3]
    return procs(x), len(procs), bool(procs)


def _build_and_return(x, n):
    o = Named(range(n), "made")
    o.append(n * 10)
    o[0] = 7
    return x * o.total() + len(o), o, o.name, 3 in o, o[-1], list(reversed(list(o)))


def _build_iter_and_break(x, n):
    o = OwnGetitem(range(n))
    it = iter(o)
    first = next(it)
    print("break", first)  # the iterator and the object cross the break
    o.append(100)
    return x + first + o[0], list(it), o


@pytest.mark.parametrize("fn", [_build_and_call, _build_and_return, _build_iter_and_break])
def test_objects_made_while_tracing(fn, capsys):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fn is not _build_iter_and_break)
    before = framejit.stats()["eager_frames"]
    for n in (1, 2, 3):
        x = torch.randn(n + 1)
        expected, actual = fn(x, n), compiled(x, n)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            if isinstance(e, list):
                assert _raw(a) == _raw(e)
            else:
                _assert_same(a, e)
    assert framejit.stats()["eager_frames"] == before
    assert backend.graph_count >= 1


def test_a_made_object_returned_is_a_real_instance_of_its_class():
    compiled = framejit.compile(_build_and_return, backend="eager", fullgraph=True)
    o = compiled(torch.ones(2), 2)[1]
    assert type(o) is Named and list.copy(o) == [7, 1, 20] and o.__dict__ == {"name": "made"}
    o.append(5)
    assert o.total() == 33
