"""NOTE [Questions to the tracing machinery] in framejit/capture/compile_state.py: torch's fake-tensor and
dispatch machinery asked about the program's tensors answers as in eager (it answered for the trace's fake
tensors: `is_fake(x)` True for a real tensor)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses import fake_tensor
from torch.utils import _python_dispatch

from tests.helpers import run_differential


def asks_is_fake(x):
    y = x * 2
    if fake_tensor.is_fake(x) or fake_tensor.is_fake(y):
        return y - 1, "fake"
    return y + 1, "real"


def asks_dispatch_mode(x):
    return x.cos(), _python_dispatch.is_in_torch_dispatch_mode(), _python_dispatch.is_traceable_wrapper_subclass(x)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("fn", [asks_is_fake, asks_dispatch_mode], ids=lambda f: f.__name__)
def test_machinery_answers_as_in_eager(fn, backend):
    run_differential(fn, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 2), fullgraph=False, backend=backend)

