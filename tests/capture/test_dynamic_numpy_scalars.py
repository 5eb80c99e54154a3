"""NumPy scalar arguments that change value become graph inputs with NumPy's semantics (NOTE [Dynamic NumPy
scalars] in framejit/capture/numpy_scalars.py), instead of one compilation per value until the recompile
limit ran the frame eagerly (PyTorch's test/dynamo/test_unspec.py test_no_recompilations).

Each test calls eagerly and compiled with changing values and compares values and exact types (a NumPy
scalar's type is part of its meaning: np.int64 wraps, np.float32 rounds), then asserts the compilations.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _same(actual, expected) -> None:
    if isinstance(expected, dict):
        assert type(actual) is dict and actual.keys() == expected.keys()
        for k in expected:
            _same(actual[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
    elif isinstance(expected, torch.Tensor):
        assert type(actual) is torch.Tensor and actual.dtype == expected.dtype
        assert torch.equal(actual, expected)
    else:
        assert type(actual) is type(expected), (actual, expected)
        assert repr(actual) == repr(expected)


def _run(fn, arg_sets):
    """Compares every call; returns (graphs compiled, frames run eagerly)."""
    backend = CountingBackend()
    before = framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow warnings (eager's only)
        for args in arg_sets:
            _same(compiled(*args), fn(*args))
    return len(backend.graphs), framejit.stats()["eager_frames"] - before


def _unspec(x, y):
    return {"a": x + 1, "b": y / 2}


def test_numpy_int_arguments_compile_at_most_twice():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    graphs, eager = _run(_unspec, [(x, np.int64(i)) for i in range(10)])
    assert (graphs, eager) == (2, 0)  # the first value, then one entry for all


def _int_semantics(x, y):
    return x * y, y * 2, y * np.int64(2 ** 62), -y, y // 3, y % 3, y > 3, y + x.shape[0], type(y * 2)


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8])
def test_numpy_int_arithmetic_keeps_numpy_semantics(kind):
    x = torch.arange(4.0)
    graphs, eager = _run(_int_semantics, [(x, kind(v)) for v in (11, 7, 5, 2, 200)])
    assert (graphs, eager) == (2, 0)


def _float_semantics(x, y):
    return x * y, y + 1.5, y * y, y / 3, float(y) * x, y - x


@pytest.mark.parametrize("kind", [np.float64, np.float32])
def test_numpy_float_arithmetic_keeps_numpy_semantics(kind):
    x = torch.arange(4.0)
    graphs, eager = _run(_float_semantics, [(x, kind(v / 7)) for v in (1, 3, 5, 9)])
    assert (graphs, eager) == (2, 0)


def _data_of_numpy_scalars(x, y):
    return torch.tensor([y, 1.0]) + x


def test_torch_tensor_of_a_list_with_a_numpy_scalar_keeps_its_dtype():
    # eager infers float64 from np.float64 inside the list (a Python float would give float32)
    _run(_data_of_numpy_scalars, [(torch.ones(2), np.float64(v / 3)) for v in (1, 2, 4)])


def _numpy_constants(x):
    return np.float64(0.0), np.int64(0), np.False_, np.uint8(0), b"\0" * 8, x + 1


def _true_and_floor_division(x, y):
    return y / 3, y // 3, x * 2


def test_constants_equal_in_bytes_keep_their_types():
    # NOTE [Constants kept apart by type] (codegen.py): the bytecode library shared one co_consts slot between
    # objects whose marshal bytes are equal, so np.int64(0) came back as np.float64(0.0) (/tmp/hnp/p7.py)
    for fn, args in ((_numpy_constants, (torch.ones(2),)), (_true_and_floor_division, (torch.ones(2), np.int64(0)))):
        compiled = framejit.compile(fn, backend="eager")
        for _ in range(2):
            want, got = fn(*args), compiled(*args)
            assert [type(v) for v in got] == [type(v) for v in want]
            assert all(torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w for g, w in zip(got, want))
