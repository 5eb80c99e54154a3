"""NOTE [Storage writes count a use] (framejit/tensor_watch.py): writes into a frozen weight's memory through its
storage (`untyped_storage()` or the typed `storage()`) are seen by onnxrt's frozen weights (NOTE [Frozen
weights]); every call's values equal eager's."""
from __future__ import annotations

import warnings

import pytest
import torch

import framejit

F32 = dict(rtol=1e-4, atol=1e-5)


def _bias_copy(m, step):
    m[0].bias.untyped_storage().copy_(torch.full((4,), 1.0 + step).untyped_storage())


def _weight_fill(m, step):
    m[2].weight.untyped_storage().fill_(60 + step)  # bytes: every float becomes the same value


def _bias_bytes(m, step):
    m[0].bias.untyped_storage()[0:16] = 63 + step


def _typed_copy(m, step):
    m[2].bias.storage().copy_(torch.tensor([-2.0 - step, 3.0]).storage())


def _held_storage(m, step, held={}):
    storage = held.setdefault(id(m), m[0].weight.untyped_storage())  # taken at the first write, kept
    storage.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(step)).untyped_storage())


@pytest.mark.parametrize("write", [_bias_copy, _weight_fill, _bias_bytes, _typed_copy, _held_storage])
def test_storage_writes_reach_frozen_weights(write):
    warnings.simplefilter("ignore")  # TypedStorage is deprecated
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(3 + step, 4)
            torch.testing.assert_close(compiled(x), model(x), **F32)
            before = model(x).clone()
            write(model, step)
            assert not torch.equal(model(x), before)  # the write changed eager's result
            torch.testing.assert_close(compiled(x), model(x), **F32)
