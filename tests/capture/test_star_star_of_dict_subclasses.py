"""`f(**m)` / `{**m}` of a dict-subclass object (issue 11, h11hf6): transformers' `Out(**outputs, extra=...)`.

CPython merges a dict subclass that keeps dict's `__iter__` from its storage, and any other (OrderedDict and
its subclasses, such as transformers' ModelOutput) through `keys()` and `m[k]`. The second kind was "** of
New(BaseModelOutputWithPast)" at an instruction no break can be taken at, so the whole frame ran eagerly
(LlavaModel.forward and PaliGemmaModel.forward: `LlavaModelOutputWithPast(**outputs, image_outputs=...)`).
"""
from __future__ import annotations

import collections

import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Output(collections.OrderedDict):
    """ModelOutput in miniature: string keys read through its own __getitem__."""

    def __getitem__(self, key):
        return super().__getitem__(key) * 1 if isinstance(key, str) else list(self.values())[key]


class Both(collections.OrderedDict):
    pass


class Overriding(dict):
    def __iter__(self):
        return iter(["a"])

    def keys(self):
        return ["a"]

    def __getitem__(self, key):
        return dict.__getitem__(self, key) + 100


def _target(a, b=None, extra=None):
    return a, b, extra


def _run(fn, make):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    eager0 = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for seed in range(3):
            x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
            want, got = fn(x, make), compiled(x, make)
            torch.testing.assert_close(got, want)
    assert framejit.stats()["eager_frames"] == eager0
    return backend.graph_count, breaks


def test_ordered_dict_subclass_made_in_the_frame_is_merged_by_keys():
    def f(x, make):
        out = make(a=x + 1, b=x * 2)
        return _target(**out, extra=x - 1), {**out, "c": x}

    graphs, breaks = _run(f, Output)
    assert (graphs, breaks) == (1, [])


def test_ordered_dict_subclass_across_a_break_is_merged_by_keys():
    def f(x, make):
        out = make(a=x + 1, b=x * 2)
        print(end="")
        return _target(**out, extra=x - 1)

    graphs, _ = _run(f, Both)
    assert graphs == 2


def test_dict_subclass_overriding_iteration_uses_its_keys_and_getitem():
    def f(x, make):
        out = make(a=x + 1, b=x * 2)
        return _target(**out)

    _run(f, Overriding)
