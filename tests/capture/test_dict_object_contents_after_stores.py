"""NOTE [Item stores into dict objects from outside], [Views of dict objects from outside] (issue 11, h11llava).

A store into a transformers ModelOutput from outside (`o.pooler_output = ...`, an OrderedDict subclass whose
`__setattr__` also stores the item) followed by a read of its contents in the same trace (`o["pooler_output"]`,
`to_tuple()`, `keys()`): that read was a graph break (2 graphs per call where stock torch.compile makes 1).
Now the read sees the stores. Views of such an object are live: one taken before a store sees it, and a
returned one is the object's own `odict_keys` (it was a `dict_keys` of a copy, blind to later changes).
Every test compares values, key order and the object's state with eager's over calls with changing sizes.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Optional

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


@dataclasses.dataclass
class _Output(collections.OrderedDict):
    """What transformers' ModelOutput does, in short: fields and items kept in step."""
    last_hidden_state: Optional[torch.Tensor] = None
    pooler_output: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                super().__setitem__(field.name, value)

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        return dict(self.items())[k] if isinstance(k, str) else self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@pytest.fixture(params=["plain", "transformers"])
def output_cls(request):
    if request.param == "plain":
        return _Output
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    return BaseModelOutputWithPooling


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    else:
        assert got == want


def _same_object(got, want):
    assert list(got.keys()) == list(want.keys())
    for key in want:
        torch.testing.assert_close(got[key], want[key])
    torch.testing.assert_close(got.pooler_output, want.pooler_output)


def test_reads_after_a_store_into_an_output_passed_in_are_one_graph(output_cls):
    def g(o, x):
        o.pooler_output = o.last_hidden_state * x
        return o["pooler_output"] + 1, o.to_tuple(), list(o.keys()), len(o)

    backend = CountingBackend()
    compiled = framejit.compile(g, backend=backend)
    with logged_breaks() as breaks:
        for n in (3, 3, 5):
            x = torch.randn(2, n)
            o_got, o_want = output_cls(last_hidden_state=x - 1), output_cls(last_hidden_state=x - 1)
            _same(compiled(o_got, x), g(o_want, x))
            _same_object(o_got, o_want)
    assert breaks == []
    assert backend.graph_count <= 2  # stock torch.compile: 2 (one per shape)


def test_a_second_store_to_the_same_key_and_a_new_key_keep_their_places(output_cls):
    """`o.last_hidden_state` (an old key) stored again keeps its place, `hidden_states` (new) goes last; each
    read sees the stores made before it and no later one."""
    def h(o, x):
        before = list(o.keys())
        o.hidden_states = (x, x * 2)
        middle = o.to_tuple()
        o.last_hidden_state = x * 5
        return before, middle, list(o.keys()), o["last_hidden_state"] - o["hidden_states"][1]

    backend = CountingBackend()
    compiled = framejit.compile(h, backend=backend)
    with logged_breaks() as breaks:
        for n in (2, 4):
            x = torch.randn(n)
            o_got = output_cls(last_hidden_state=x + 1, pooler_output=x - 1)
            o_want = output_cls(last_hidden_state=x + 1, pooler_output=x - 1)
            got, want = compiled(o_got, x), h(o_want, x)
            _same(got, want)
            assert want[2] == ["last_hidden_state", "pooler_output", "hidden_states"]
            _same_object(o_got, o_want)
    assert breaks == []


def test_a_view_taken_before_a_store_sees_it(output_cls):
    """`k = o.keys()` before the store and read after it: eager's live view has the new key (the trace
    answered from the contents at the view's creation: keys ['last_hidden_state'], 1 value, False)."""
    def v(o, x):
        k, vals = o.keys(), o.values()
        o.pooler_output = o.last_hidden_state * x
        return list(k), len(vals), [t + 1 for t in vals], "pooler_output" in k

    compiled = framejit.compile(v, backend=CountingBackend())
    for n in (3, 5):
        x = torch.randn(2, n)
        o_got, o_want = output_cls(last_hidden_state=x - 1), output_cls(last_hidden_state=x - 1)
        got, want = compiled(o_got, x), v(o_want, x)
        _same(got, want)
        assert want[0] == ["last_hidden_state", "pooler_output"] and want[3] is True
        _same_object(o_got, o_want)


@pytest.mark.parametrize("store", [False, True])
def test_returned_views_are_live_views_of_the_object(output_cls, store):
    """A returned `o.keys()` is the object's own odict view: it sees a key added after the call (it was a
    dict_keys of a copy made in the compiled code, which did not)."""
    def r(o, x):
        if store:
            o.pooler_output = x * 2
        return o.keys(), o.values(), o.items(), x + 1

    compiled = framejit.compile(r, backend=CountingBackend())
    for n in (2, 3):
        x = torch.randn(n)
        o_got, o_want = output_cls(last_hidden_state=x), output_cls(last_hidden_state=x)
        got, want = compiled(o_got, x), r(o_want, x)
        assert [type(g) for g in got] == [type(w) for w in want]
        o_got["hidden_states"] = (x,)
        o_want["hidden_states"] = (x,)
        assert list(got[0]) == list(want[0])
        assert len(got[1]) == len(want[1]) == (3 if store else 2)
        assert [k for k, _ in got[2]] == [k for k, _ in want[2]]
