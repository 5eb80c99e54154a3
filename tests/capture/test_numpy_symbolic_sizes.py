"""Dynamic shapes, issue 13 (hhuntM MED-1, helper hfixSym): NumPy array constructors of symbolic sizes stay
symbolic (NOTE [NumPy arrays of symbolic sizes] in capture/numpy_support.py).

`np.arange(x.shape[0])` specialised the size: 8 compilations over 11 sizes, then "hit the recompile limit (8);
it now runs eagerly" (stock torch.compile 2). Each program runs eagerly and compiled over 10 sizes on the
eager and onnxrt backends: values and dtypes equal (NumPy's int64/float64), 2 compilations, no eager frame.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import framejit
from tests.helpers import assert_same

BACKENDS = ["eager", "onnxrt"]


def _stats() -> tuple[int, int]:
    st = framejit.stats()
    return st["graphs"], st["eager_frames"]


def _arange_scale(x):
    idx = np.arange(x.shape[0])
    return x * torch.from_numpy(idx).float()[:, None], str(idx.dtype)


def _arange_mask(x):
    keep = np.arange(x.shape[0]) % 2 == 0
    return x * torch.from_numpy(keep)[:, None], str(keep.dtype)


def _zeros_and_ones(x):
    z = np.zeros((x.shape[0], 2)) + np.ones(x.shape[0], dtype=np.float32)[:, None]
    return x + torch.from_numpy(z), str(z.dtype)


def _full_and_arange_step(x):
    f = np.full(x.shape[0], 2.5) * np.arange(0, 2 * x.shape[0], 2)
    return x * torch.from_numpy(f)[:, None], str(f.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_arange_scale, _arange_mask, _zeros_and_ones, _full_and_arange_step])
def test_a_numpy_array_of_a_size_compiles_once_for_every_size(fn, backend):
    graphs, eager = _stats()
    compiled = framejit.compile(fn, backend=backend)
    for n in range(2, 12):
        x = torch.randn(n, 2, dtype=torch.float64)
        assert_same(compiled(x), fn(x))
    after = _stats()
    assert (after[0] - graphs, after[1] - eager) == (2, 0)
