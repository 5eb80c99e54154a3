"""NOTE [Item stores into dict objects from outside] (issue 11, sweep h11fam).

transformers' ModelOutput is an OrderedDict subclass whose `__setattr__` also stores the item
(`super().__setitem__(name, value)`); vision-language models set `image_outputs.pooler_output = [...]` on an
output made before a `.tolist()` break (Idefics3, Llava, SmolVLM, ...), so in the resume frame the output
is an object from outside, and the store was a graph break: the program `f` below made 7 graphs over 3
calls where stock torch.compile makes 5, and `g` (an output passed in) 2 graphs per call where stock makes
1. Each test compares values and the object's items and attributes (and key order) with eager's.
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
        return dict(self.items())[k]


def _transformers_output():
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    return BaseModelOutputWithPooling


def _state(o) -> tuple:
    return list(o.keys()), [v.clone() if isinstance(v, torch.Tensor) else v for v in o.values()], \
        o.pooler_output, o.last_hidden_state


def _assert_same_state(got, want):
    assert got[0] == want[0]
    for a, b in zip(got[1:], want[1:]):
        if isinstance(b, list):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                torch.testing.assert_close(x, y)
        else:
            torch.testing.assert_close(a, b)
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b) if isinstance(b, torch.Tensor) else None


@pytest.fixture(params=["plain", "transformers"])
def output_cls(request):
    return _Output if request.param == "plain" else _transformers_output()


def test_a_store_after_a_break_into_an_output_made_before_it(output_cls):
    """The Idefics3 shape: output made, a data-dependent break, then `.pooler_output = [...]`."""
    def f(x):
        o = output_cls(last_hidden_state=x + 1)
        sizes = (x[:, 0] > -100).long().tolist()  # a break (data into Python)
        o.pooler_output = [t * 2 for t in x.split(sizes)]
        return o

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    with logged_breaks() as breaks:
        for n in (3, 3, 5):
            x = torch.randn(2, n)
            _assert_same_state(_state(compiled(x)), _state(f(x)))
    assert all("tolist" in b or "Tensor" in b for b in breaks), breaks
    assert not any("__setitem__" in b for b in breaks)
    assert backend.graph_count <= 4  # 2 per shape (before and after the break); stock torch.compile: the same


def test_a_store_into_an_output_passed_in_is_one_graph(output_cls):
    def g(o, x):
        o.pooler_output = o.last_hidden_state * x
        return o.pooler_output + 1

    backend = CountingBackend()
    compiled = framejit.compile(g, backend=backend)
    with logged_breaks() as breaks:
        for n in (3, 3, 5):
            x = torch.randn(2, n)
            o_want, o_got = output_cls(last_hidden_state=x - 1), output_cls(last_hidden_state=x - 1)
            torch.testing.assert_close(compiled(o_got, x), g(o_want, x))
            _assert_same_state(_state(o_got), _state(o_want))
    assert breaks == []
    assert backend.graph_count <= 2


def test_reads_after_the_store_see_it(output_cls):
    """`o["pooler_output"]`, `to_tuple`-style reads and `keys()` after the store: a break there, values and
    key order as eager's."""
    def h(o, x):
        o.pooler_output = x * 3
        first = list(o.keys())
        return o["pooler_output"] + o["last_hidden_state"], first

    compiled = framejit.compile(h, backend=CountingBackend())
    for n in (3, 4):
        x = torch.randn(2, n)
        o_want, o_got = output_cls(last_hidden_state=x - 1), output_cls(last_hidden_state=x - 1)
        got, want = compiled(o_got, x), h(o_want, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == ["last_hidden_state", "pooler_output"]
        _assert_same_state(_state(o_got), _state(o_want))


def test_stores_keep_ordered_dict_order_for_old_and_new_keys():
    class Bag(collections.OrderedDict):
        def put(self, key, value):
            super().__setitem__(key, value)

    def k(bag, x):
        bag.put("a", x + 1)   # an old key keeps its place
        bag.put("c", x * 2)   # a new key goes last
        bag.put(2, x - 1)     # an int key
        return x.sum()

    backend = CountingBackend()
    compiled = framejit.compile(k, backend=backend)
    with logged_breaks() as breaks:
        for n in (2, 2, 3):
            x = torch.randn(n)
            want_bag, got_bag = Bag(a=x, b=x * 0), Bag(a=x, b=x * 0)
            torch.testing.assert_close(compiled(got_bag, x), k(want_bag, x))
            assert list(got_bag.keys()) == list(want_bag.keys()) == ["a", "b", "c", 2]
            for key in want_bag:
                torch.testing.assert_close(got_bag[key], want_bag[key])
    assert breaks == []


def test_other_keys_and_writes_stay_breaks_with_eagers_result():
    class Bag(collections.OrderedDict):
        def put(self, key, value):
            super().__setitem__(key, value)

    def m(bag, x):
        bag.put(("t", 1), x + 1)  # a tuple key: not recorded, a break
        bag.pop("a")
        return x * 2

    compiled = framejit.compile(m, backend=CountingBackend())
    for n in (2, 3):
        x = torch.randn(n)
        want_bag, got_bag = Bag(a=x, b=x), Bag(a=x, b=x)
        torch.testing.assert_close(compiled(got_bag, x), m(want_bag, x))
        assert list(got_bag.keys()) == list(want_bag.keys())
        for key in want_bag:
            torch.testing.assert_close(got_bag[key], want_bag[key])
