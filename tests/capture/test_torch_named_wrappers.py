"""Python functions that functools.wraps gave a torch function's names (issue 11, found measuring PyTorch's
test_functions.py), differential (eager vs compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Torch names that are not the function] (framejit/capture/values/builder.py): `torch.vmap(f)` returns
vmap's `wrapped`, which carries f's `__module__` and `__name__`. Taken for a torch op, it became a graph node
that FX writes by that name: the graph called torch.sum itself (one sum of everything instead of one per
row) or `torch._functorch.apis.acos_` (no such attribute). Inlined instead, the wrapper calls vmap_impl with
the function as an argument, which FX cannot write (NOTE [Functions as arguments of graph ops], graph.py):
a graph break there, not a frame run wholly eagerly.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


def vmapped_sum(x):
    return torch.vmap(torch.sum)(x) * 2


def vmapped_in_place(x):
    y = torch.vmap(torch.Tensor.acos_)(x)
    return y is x, y + 1


def call_given(x, f):
    return f(x) + 1


def eager_frames() -> int:
    return framejit.stats()["eager_frames"]


def test_a_vmapped_torch_function_made_inside_keeps_its_batching():
    # before: tensor(s) of shape () (torch.sum of the whole input) where eager gives one sum per row
    before = eager_frames()
    run_differential(vmapped_sum, lambda seed: (torch.randn(4 + seed, 3),), fullgraph=False)
    assert eager_frames() == before  # the resume function breaks at vmap_impl, it is not run wholly eagerly


def test_a_vmapped_in_place_method_made_inside_runs():
    # before: AttributeError: module 'torch._functorch.apis' has no attribute 'acos_'
    before = eager_frames()
    run_differential(vmapped_in_place, lambda seed: (torch.rand(4, 1 + seed),), fullgraph=False)
    assert eager_frames() == before


def test_a_vmapped_torch_function_given_as_an_argument_keeps_its_batching():
    backend = CountingBackend()
    compiled = framejit.compile(call_given, backend=backend)
    for f in (torch.vmap(torch.sum), torch.vmap(torch.amax), torch.vmap(torch.sum)):
        x = torch.randn(5, 3)
        assert_same(compiled(x, f), call_given(x, f))
