"""Int inputs of size-generic triton modules, issue 13 (h13dyn6): a step counter passed to a compiled
function, eager vs triton over many values, with the generated modules counted.

An int argument made symbolic by the frontend (dynamic=True, or automatic dynamic once it changed) reaches
the backend as a SymInt placeholder whose range includes 0 and 1 (an int is not a size: nothing
specialises them). The backend made its own symbol for it with the example's value as the hint, and torch's
ShapeEnv specialises a hint of 0 or 1 to the number: a counter whose first symbolic call was at step 0 or
1 (the usual start) got a size check `inputs[1] == 1`, so every other step compiled a module of its own
(`x * step` over 9 steps: 8 modules under TRITON_INTERPRET, seconds each). Int symbols now keep 0 and 1
(`do_not_specialize_zero_one`, backends/symbolic.py); sizes still specialise them as before.
"""
from __future__ import annotations


import pytest
import torch

import framejit
from tests.helpers import RecordingBackend, assert_same




_STEPS = (1, 2, 0, -1, 5, 1, -7, 3, 0)


def _scaled(x, step):
    return x * step


def _floor_and_mod(x, step):
    return x + (step % 3) - step // 2 + x.size(1) * step


@pytest.mark.parametrize("fn", [_scaled, _floor_and_mod])
def test_a_step_counter_starting_at_one_is_one_module(fn, triton_modules):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    eager = framejit.stats()["eager_frames"]
    for i, step in enumerate(_STEPS):
        x = torch.randn(3, 4 + i % 2, generator=torch.Generator().manual_seed(i))
        assert_same(compiled(x, step), fn(x, step))
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: one per step value other than 1
    assert framejit.stats()["eager_frames"] == eager


def test_automatic_dynamic_step_from_zero(triton_modules):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(_scaled, backend=backend)
    for i, step in enumerate((0, 1, 2, 3, 4, 0, 1)):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(i))
        assert_same(compiled(x, step), _scaled(x, step))
    assert backend.graph_count == 2  # step 0 static, then symbolic (stock torch.compile: 2)
    assert sum(triton_modules.values()) == 2, triton_modules  # before: 6


_TABLE = torch.randn(1, 16, 4, generator=torch.Generator().manual_seed(7))


def _decode_at(x, past):
    return x + _TABLE[:, past:past + x.size(1)]


def test_a_decode_position_offset_is_one_module(triton_modules):
    """A KV-cache decode step reading its position row at an int offset that starts at 0."""
    backend = RecordingBackend("triton")
    compiled = framejit.compile(_decode_at, backend=backend, dynamic=True)
    for past in range(8):
        x = torch.randn(2, 1, 4, generator=torch.Generator().manual_seed(past))
        assert_same(compiled(x, past), _decode_at(x, past))
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: one per offset (8)
