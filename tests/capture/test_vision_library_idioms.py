"""Idioms of vision libraries' model code (torchvision, timm), minimized into plain torch programs.

Found by a sweep of torchvision and timm models under framejit vs stock torch.compile (the libraries are not
test dependencies: each program here is the library's pattern written out). Differential: eager vs compiled
over several calls with fresh inputs, with the graph and frame counts that are the point.
"""
from __future__ import annotations

from types import FunctionType

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
