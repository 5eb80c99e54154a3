"""Idioms of vision libraries' model code (torchvision, timm), minimized into plain torch programs.

Found by a sweep of torchvision and timm models under framejit vs stock torch.compile (the libraries are not
test dependencies: each program here is the library's pattern written out). Differential: eager vs compiled
over several calls with fresh inputs, with the graph and frame counts that are the point.
"""
from __future__ import annotations

import re
from types import FunctionType
from typing import Dict, Generic, List, Optional, Set, Tuple, TypeVar, Union

import pytest
import torch

import framejit
from tests.helpers import assert_same


def _log_api_usage_once(obj):
    """torchvision.utils._log_api_usage_once: every torchvision module's __init__ and functional op."""
    module = obj.__module__
    if not module.startswith("torchvision"):
        module = f"torchvision.internal.{module}"
    name = obj.__class__.__name__
    if isinstance(obj, FunctionType):
        name = obj.__name__
    torch._C._log_api_usage_once(f"{module}.{name}")


def _stochastic_depth(x, p, training=True):
    _log_api_usage_once(_stochastic_depth)
    if not training or p == 0.0:
        return x
    return x * (1 - p)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        _log_api_usage_once(self)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return x + _stochastic_depth(self.lin(x), 0.25, self.training) * len(self.__class__.__name__)


def test_the_class_of_a_function_is_read_inside_the_graph():
    """`fn.__class__` (torchvision's API-usage logging in stochastic_depth) was a graph break in every block
    of efficientnet/convnext/swin: 11-19 graphs and an eager frame at the recompile limit, stock 1 graph."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Block() for _ in range(3)])
    compiled = framejit.compile(model)
    before = framejit.stats()
    for batch in (2, 2, 5):
        x = torch.randn(batch, 8)
        assert_same(compiled(x), model(x))
    after = framejit.stats()
    assert after["eager_frames"] == before["eager_frames"]
    traced = after["frames_traced"] - before["frames_traced"]
    assert traced <= 2  # static, then one dynamic entry for the batch
    assert after["graphs"] - before["graphs"] == traced  # one graph per trace: no break


def test_the_class_of_a_function_is_function_type():
    def g(x):
        return x

    def f(x):
        k = g.__class__
        return x + 1, k is FunctionType, k.__name__, isinstance(g, k)

    compiled = framejit.compile(f)
    before = framejit.stats()
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), f(x))
    after = framejit.stats()
    assert (after["frames_traced"] - before["frames_traced"], after["graphs"] - before["graphs"]) == (1, 1)


# ---- typing subscripts in forward (timm crossvit: torch.jit.annotate(List[torch.Tensor], [])) ------------
# NOTE [Typing subscripts are folded] (capture/typing_forms.py): each subscript inlined typing's __getitem__ and
# broke at sys._getframe (typing_extensions' _check_generic) or at repr of a _SpecialForm: crossvit_tiny_240
# captured 10 graphs over 3 calls (stock 2).
T = TypeVar("T")
Alias = List


class _Box(Generic[T]):
    pass


class _MultiScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.branches = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        outs = torch.jit.annotate(List[torch.Tensor], [])
        for branch in self.branches:
            outs.append(branch(x))
        spec: Dict[str, Tuple[int, ...]] = {"a": (1,)}
        return torch.stack(outs).sum(0) + len(spec), Optional[torch.Tensor], Dict[str, Tuple[int, ...]]


def test_typing_subscripts_in_forward_are_one_graph():
    torch.manual_seed(0)
    model = _MultiScale()
    compiled = framejit.compile(model)
    before = framejit.stats()
    for batch in (2, 2, 5):
        x = torch.randn(batch, 8)
        got, want = compiled(x), model(x)
        assert_same(got[0], want[0])
        assert got[1:] == want[1:] and got[1] is want[1]  # typing caches: the very alias eager makes
    after = framejit.stats()
    assert after["eager_frames"] == before["eager_frames"]
    traced = after["frames_traced"] - before["frames_traced"]
    assert traced <= 2
    assert after["graphs"] - before["graphs"] == traced  # no break


def test_a_rebound_typing_global_and_user_generics_are_guarded():
    global Alias

    def f(x):
        return x + 1, Alias[int], _Box[T], _Box[int], Union[int, Alias[str]]

    compiled = framejit.compile(f)
    eager_before = framejit.stats()["eager_frames"]
    try:
        for alias in (List, List, Tuple, Set):
            Alias = alias
            x = torch.randn(3)
            got, want = compiled(x), f(x)
            assert_same(got[0], want[0])
            assert got[1:] == want[1:]
    finally:
        Alias = List
    assert framejit.stats()["eager_frames"] == eager_before  # captured, not given up


def test_a_typing_error_is_raised_as_eager():
    def f(x, n):
        y = x * 2
        if n > 1:
            return y, Optional[int, str]
        return y, Optional[int]

    compiled = framejit.compile(f)
    for n in (1, 2, 1):
        x = torch.randn(3)
        try:
            want = f(x, n)
        except TypeError as e:
            with pytest.raises(TypeError, match=re.escape(str(e))):
                compiled(x, n)
        else:
            got = compiled(x, n)
            assert_same(got[0], want[0])
            assert got[1] == want[1]
