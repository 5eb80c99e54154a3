"""Red team 21 (h12rt21): adversarial programs that change state between calls (tensor metadata, torch
global state, module state, descriptors, other modules' globals, ...). Each test: eager vs compiled, several
calls, inputs or state changed between calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import eager_frames


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
    before = eager_frames()
    for d in ("cpu:0", "cpu", torch.device("cpu", 0), "cpu:0"):
        x = torch.ones(1)
        assert cf(x, d) == f(x, d)
    assert eager_frames() == before


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


def _inference_ones(n):
    with torch.inference_mode():
        return torch.ones(n)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_an_inference_tensor_written_by_a_graph_traced_with_a_normal_one_raises_as_eager(backend):
    # The entry traced with a normal z and x (both written) served an inference x (its guards do not tell
    # them apart); reading the inference tensor's version counter raised "Inference tensors do not track
    # version counter" where eager raises "Inplace update to inference tensor outside InferenceMode" at
    # x.add_, after z.mul_ wrote z; and onnxrt's write-back, reached past that read, wrote x.
    def f(x, z):
        y = x * 2
        z.mul_(3)
        x.add_(1)
        return y

    cf = framejit.compile(f, backend=backend)
    results = []
    for run in (f, cf):
        z = torch.ones(2)
        out = [run(torch.ones(2), z).tolist(), z.tolist(), z._version]
        x = _inference_ones(2)
        with pytest.raises(RuntimeError) as info:
            run(x, z)
        out += [str(info.value), x.tolist(), z.tolist(), z._version]
        n = torch.ones(2)
        out += [run(n, z).tolist(), n.tolist(), n._version, z.tolist(), z._version]
        results.append(out)
    assert results[1] == results[0]


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_inference_tensors_written_under_inference_mode(backend):
    # Under torch.inference_mode() a graph that writes an inference tensor (a cache updated in place):
    # triton read every argument's version counter on each call (to rerun a failing program op by op) and
    # raised "Inference tensors do not track version counter" on every call; eager returns.
    def f(x, cache):
        cache.add_(x)
        return cache * 2

    cf = framejit.compile(f, backend=backend)
    results = []
    for run in (f, cf):
        with torch.inference_mode():
            cache = torch.zeros(3)
            results.append([(run(torch.full((3,), float(i)), cache).tolist(), cache.tolist()) for i in range(3)])
    assert results[1] == results[0]
