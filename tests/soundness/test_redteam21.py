"""Red team 21 (h12rt21): adversarial programs that change state between calls (tensor metadata, torch
global state, module state, descriptors, other modules' globals, ...). Each test: eager vs compiled, several
calls, inputs or state changed between calls."""
from __future__ import annotations

import pytest
import torch

import framejit


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


_HOST_DEVICE_PROGRAMS = {
    "device": lambda x, d: torch.zeros(2, device=d).device,
    "eq_cpu": lambda x, d: x.to(d).device == torch.device(x.device.type),
    "index": lambda x, d: x.new_zeros(2, device=d).device.index,
    "get_device": lambda x, d: torch.empty_like(x, device=d).get_device(),
    "str": lambda x, d: str(torch.ones(1, device=d).device) + "/" + str(x.device),
    "dict_key": lambda x, d: {x.device: 1}.get(torch.zeros(1, device=d).device, 2),
    "mixed_with_input": lambda x, d: (x + torch.ones(1, device=d)).device,
}


@pytest.mark.parametrize("name", sorted(_HOST_DEVICE_PROGRAMS))
def test_a_tensor_made_on_an_indexed_host_device_reports_no_index(name):
    # A real CPU tensor made with device="cpu:0" reports device(type='cpu') (index None, get_device() -1);
    # the fake tensor kept the index, so the trace answered cpu:0: `.device == torch.device("cpu")` False,
    # `.device.index` 0, get_device() 0, a dict keyed by x.device missed.
    f = _HOST_DEVICE_PROGRAMS[name]
    cf = framejit.compile(f, backend="eager")
    before = _eager_frames()
    for d in ("cpu:0", "cpu", torch.device("cpu", 0), "cpu:0"):
        x = torch.ones(1)
        assert cf(x, d) == f(x, d)
    assert _eager_frames() == before
