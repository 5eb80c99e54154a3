"""Graph breaks at loads: an attribute framejit cannot model (a user `__getattr__`), a method loaded that
way, a global of a type it cannot model. The load runs in plain Python after the graph and the rest of
the function continues in a captured resume function (a method load becomes NULL + bound method, which
CPython calls the same way). Each case runs eagerly and compiled on three fresh input sets
(tests/helpers.run_differential) and asserts the number of graphs.
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from tests.helpers import run_differential


class _NotAFunction:
    """A __getattr__ that is a callable object, bound like a method: framejit inlines a user __getattr__ that
    is a Python function (NOTE [User __getattr__ inlined]), not this, so reading through it breaks."""

    def __get__(self, obj, cls=None):
        return types.MethodType(self, obj)

    def __call__(self, obj, name):
        if name.startswith("fn_"):
            return lambda t: t * 3 + 1
        return 0.5


class Dynamic:
    """Attributes come from __getattr__: a float, or a function for names starting with "fn_"."""

    __getattr__ = _NotAFunction()


DYN = Dynamic()
TABLE = np.arange(3, dtype=np.float32)


def one(*shape):
    return lambda seed: (torch.randn(*shape),)


def getattr_value(x):
    y = x * 2
    s = DYN.scale
    return y * s
def getattr_method(x):
    y = x.cos()
    z = DYN.fn_transform(y)
    return z - 1
def getattr_in_loop(x):
    for i in range(2):
        x = x + DYN.step * i
    return x
def numpy_global(x):
    y = x.sin()
    t = torch.from_numpy(TABLE.copy())
    return y + t


CASES = [
    # x*2 before the load; y*s after it: 2
    (getattr_value, one(3), 2),
    # cos before the method load; the resume traces the call of the returned lambda (a new function
    # object on every call, guarded by its code) and z - 1: 2
    (getattr_method, one(3), 2),
    # each iteration's read breaks; the first graph is empty (nothing before the first read), then one
    # resume graph per remaining range: 2
    (getattr_in_loop, one(3), 2),
    # the global numpy array is a guarded graph input, its copy() and from_numpy() are traced
    # (NOTE [NumPy as torch]): 1
    (numpy_global, one(3), 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_at_load(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs


def getattr_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        s = DYN.scale
        z = y * s
    return z, x * 3
def method_in_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
        z = DYN.fn_apply(y)
        w = z @ x
    return w


BLOCK_CASES = [
    # x*2 before the attribute read (run by getattr inside the re-entered no_grad); y*s and x*3 after: 2
    (getattr_in_no_grad, lambda s: (torch.randn(3, requires_grad=True),), 2),
    # matmul before the method load; the lambda's ops and the second matmul in the resume: 2
    (method_in_autocast, lambda s: (torch.randn(4, 4),), 2),
]


@pytest.mark.parametrize("fn,make_args,graphs", BLOCK_CASES, ids=[c[0].__name__ for c in BLOCK_CASES])
def test_break_at_load_inside_blocks(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs
