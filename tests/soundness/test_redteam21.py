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


_OTHER_DEVICE_PROGRAMS = {
    "moved_then_computed": lambda x: (x.to("meta") + 1, x * 2),
    "made_there": lambda x: (torch.ones(2, device="meta") * 2, x * 3),
    "beside_a_computation": lambda x: (x.to("meta").sin(), (x * 2).sin()),
}


def _same_tensors(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.device, g.shape, g.dtype, g.stride()) == (w.device, w.shape, w.dtype, w.stride())
        if w.device.type != "meta":
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(_OTHER_DEVICE_PROGRAMS))
def test_tensors_made_on_another_device_than_the_inputs_stay_there(backend, name):
    # Lowered backends run a graph on its inputs' device; a node that moved a tensor elsewhere or made one
    # there (here meta; on a GPU machine x.to("cuda") on CPU inputs) was computed on the inputs' device:
    # x.to("meta") + 1 came back as a CPU tensor holding 2.0 (eager: a meta tensor).
    f = _OTHER_DEVICE_PROGRAMS[name]
    cf = framejit.compile(f, backend=backend)
    for x in (torch.ones(2), torch.full((2,), -3.0), torch.arange(2.0)):
        _same_tensors(cf(x), f(x))
