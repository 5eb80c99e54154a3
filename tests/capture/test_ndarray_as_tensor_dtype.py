"""`torch.as_tensor` / `torch.asarray` / `torch.tensor` of an ndarray with a `dtype=` keyword are captured
(NOTE [Arrays made tensors with a dtype] in numpy_support.py; issue 11, helper h11sweep3).

transformers' Hungarian matchers (MaskFormer, Mask2Former, OneFormer losses) end with
`[(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]`
over scipy's arrays: that call was a graph break ("as_tensor given a NumPy array"). Differential: eager vs
compiled over calls with changing sizes and values; the arrays the calls get are compared afterwards too,
since as_tensor of the array's own dtype shares its memory and a converted one does not.
"""
from __future__ import annotations

import numpy as np
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


@framejit.disable
def _assignment(cost):
    """Stands for scipy.optimize.linear_sum_assignment: NumPy arrays made outside the compiled code."""
    rows = np.argsort(cost.detach().numpy(), axis=1)[:, 0]
    return np.arange(cost.shape[0]), rows


def _matched(x):
    i, j = _assignment(x * 2)
    return [(torch.as_tensor(i, dtype=torch.int64) + 1, torch.as_tensor(j, dtype=torch.float32) * x.sum(),
             torch.asarray(j, dtype=torch.int32) - 1, torch.tensor(i, dtype=torch.float64) / 2)]


def _shares(a, x):
    same = torch.as_tensor(a, dtype=torch.float64)  # a's own dtype: a view of its memory
    other = torch.as_tensor(a, dtype=torch.float32)  # converted: a copy
    copied = torch.tensor(a, dtype=torch.float64)  # always a copy
    same.add_(x)
    other.mul_(3)
    copied.sub_(5)
    return same * 2, other, copied, torch.as_tensor(a, dtype=None)


def _run(fn, make_args, seeds, fullgraph=True):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)  # fullgraph: no break at the calls
    for seed in seeds:
        args = make_args(seed)
        eager_args = [a.copy() if isinstance(a, np.ndarray) else a.clone() for a in args]
        compiled_args = [a.copy() if isinstance(a, np.ndarray) else a.clone() for a in args]
        assert_same(compiled(*compiled_args), fn(*eager_args))
        for got, want in zip(compiled_args, eager_args):
            if isinstance(want, np.ndarray):
                assert got.dtype == want.dtype and np.array_equal(got, want)
    return backend


def test_as_tensor_with_a_dtype_of_arrays_made_outside_is_captured():
    def make(seed):
        return (torch.randn(3 + seed, 4, generator=torch.Generator().manual_seed(seed)),)
    _run(_matched, make, seeds=(0, 1, 2), fullgraph=False)
    explained = framejit.explain(_matched, backend="eager")(*make(3))
    assert explained.graph_break_count == 1  # at the disabled call only (2 before: also at as_tensor)
    assert explained.graph_count == 2


def test_as_tensor_shares_memory_only_for_the_arrays_own_dtype():
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return np.arange(3.0 + seed) * (seed + 1), torch.randn((), generator=g, dtype=torch.float64)
    _run(_shares, make, seeds=(0, 1, 2))
