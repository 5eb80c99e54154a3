"""Idioms of diffusers' model code, minimized into plain torch programs.

Found by a sweep of diffusers 0.42 models from tiny configs under framejit vs stock torch.compile (diffusers is
not a test dependency: each program here is the library's pattern written out). Differential: eager vs
compiled over several calls with fresh inputs and changed state, with the graph and eager-frame counts that
are the point.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

# diffusers/utils/torch_utils.py: tables keyed by dtypes, read in every UNet2DConditionModel, ControlNetModel and
# FluxTransformer2DModel forward (NOTE [Torch enums as dict keys] in values/builder.py). Before: a break at
# `.get(dtype)` ("dict has non-constant keys") whose resume function ran wholly eagerly: 7, 4 and 8 graphs over
# 3 calls and one eager frame each; stock torch.compile 2 graphs each.
_UNSUPPORTED = frozenset({"mps", "npu", "neuron"})
_DOWNCAST = {torch.float64: torch.float32, torch.int64: torch.int32}
_UNSUPPORTED_DEVICES = {torch.float64: _UNSUPPORTED, torch.int64: _UNSUPPORTED}
_SCALE = {torch.device("cpu"): 2.0, torch.device("meta"): 0.0}
_BY_LAYOUT = {torch.strided: "dense", torch.sparse_coo: "coo"}
_BY_FORMAT = {torch.contiguous_format: 1, torch.channels_last: 2}


def _adjust(dtype, device):
    unsupported = _UNSUPPORTED_DEVICES.get(dtype)
    return _DOWNCAST[dtype] if unsupported and device.type in unsupported else dtype


class _TimeEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, timesteps):
        dtype = _adjust(timesteps.dtype, x.device)
        t = timesteps.to(dtype)
        return self.lin(x) * t[:, None] * _SCALE[x.device] + _BY_FORMAT[torch.contiguous_format], _BY_LAYOUT[x.layout]


def _stats():
    s = framejit.stats()
    return s["eager_frames"], s["frames_traced"], s["graphs"]


def test_tables_keyed_by_dtypes_and_devices_are_read_in_the_graph():
    torch.manual_seed(0)
    model = _TimeEmbedding()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    before = _stats()
    for batch, dtype in ((2, torch.int64), (2, torch.int64), (5, torch.int64), (3, torch.float64)):
        x, ts = torch.randn(batch, 4), torch.arange(batch, dtype=dtype)
        assert_same(compiled(x, ts), model(x, ts))
    after = _stats()
    assert after[0] == before[0]  # no eager frame
    assert after[2] - before[2] == after[1] - before[1]  # one graph per trace: no break
    assert after[1] - before[1] <= 3  # static, batch dynamic, float64 timesteps


def test_changes_to_a_dtype_keyed_table_are_seen():
    def f(x, t):
        return x + t.to(_DOWNCAST.get(t.dtype, t.dtype)), _DOWNCAST.get(t.dtype)

    compiled = framejit.compile(f, backend=CountingBackend())
    before = _stats()
    saved = dict(_DOWNCAST)
    try:
        for change in (None, None, "value", "add", "remove"):
            if change == "value":
                _DOWNCAST[torch.int64] = torch.float64
            elif change == "add":
                _DOWNCAST[torch.int32] = torch.float16
            elif change == "remove":
                del _DOWNCAST[torch.int64]
            for dtype in (torch.int64, torch.int32):
                x, t = torch.randn(3), torch.arange(3, dtype=dtype)
                assert_same(compiled(x, t), f(x, t))
    finally:
        _DOWNCAST.clear()
        _DOWNCAST.update(saved)
    assert _stats()[0] == before[0]  # captured, not given up


def test_a_device_keyed_table_distinguishes_devices():
    def f(x, device):
        return x * _SCALE.get(device, -1.0), device in _SCALE

    compiled = framejit.compile(f, backend=CountingBackend())
    before = _stats()
    for device in (torch.device("cpu"), torch.device("cpu"), torch.device("meta"), torch.device("cpu", 0),
                   torch.device("cuda")):
        x = torch.randn(3)
        assert_same(compiled(x, device), f(x, device))
    assert _stats()[0] == before[0]  # captured, not given up


# ---- a sampling loop: `for t in scheduler.timesteps: unet(latents, t)` ---------------------------------------
# NOTE [Changing offsets of scalar views] (capture/shapes.py): each t is a 0-dim view of timesteps at another
# storage offset, which the tensor guard checked: a compiled UNet2DConditionModel traced once per timestep (6
# graphs over 6 steps; from the 9th step the frame ran eagerly), stock torch.compile 1 graph. Now the offset is
# symbolic once it changed: at most 3 traces in all (the first step's; the second's, where latents require
# grad; the third's, where the offset changed again and becomes symbolic).
class _Denoiser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, latents, t):
        emb = torch.cat([t[None].float().sin(), t[None].float().cos()]).repeat(2)
        return self.lin(latents) * emb + t


def _loop(model, latents, timesteps):
    outs = []
    for t in timesteps:
        latents = latents - 0.1 * model(latents, t)
        outs.append(latents)
    return outs


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_sampling_loop_over_timesteps_is_not_traced_per_step(dynamic):
    torch.manual_seed(0)
    model = _Denoiser()
    compiled = framejit.compile(model, backend=CountingBackend(), dynamic=dynamic)
    before = _stats()
    for steps in (12, 7):
        timesteps = torch.linspace(999, 0, steps).long()
        latents = torch.randn(2, 4)
        assert_same(_loop(compiled, latents, timesteps), _loop(model, latents, timesteps))
    after = _stats()
    assert after[0] == before[0]  # no eager frame (before: from the 9th step)
    assert after[1] - before[1] <= 3  # (before: one trace per step, 12)


# diffusers' EulerDiscreteScheduler.step: the sigma of the step is a 0-dim view `self.sigmas[self._step_index]`,
# compared with Python floats (a data-dependent branch: a graph break, as under stock torch.compile), so the
# resume function receives it as an argument at a new offset each step, and the step index is an int attribute
# that changes. Each frame compiled for offset 0, then 1, then any (4 timesteps: 9 graphs, stock 5).
class _EulerLike:
    def __init__(self, steps):
        self.timesteps = torch.linspace(999, 0, steps)
        self.sigmas = torch.linspace(1.0, 0.1, steps + 1)
        self._step_index = 0

    def step(self, eps, t, sample, churn=0.3):
        sigma = self.sigmas[self._step_index]
        gamma = churn if 0.05 <= sigma <= 2.0 else 0.0
        sigma_hat = sigma * (gamma + 1)
        pred = sample - sigma_hat * eps
        dt = self.sigmas[self._step_index + 1] - sigma_hat
        self._step_index += 1
        return sample + (sample - pred) / sigma_hat * dt + t / 1000


def test_a_scheduler_step_is_traced_for_the_first_two_steps_only():
    def run(sched, step, x):
        outs = []
        for i, t in enumerate(sched.timesteps):
            x = step(sched, torch.full_like(x, 0.1 * i), t, x)
            outs.append(x)
            if i == 1:
                traced_after_two = _stats()[1]
        return outs, traced_after_two

    def step(sched, eps, t, x):
        return sched.step(eps, t, x)

    compiled = framejit.compile(step, backend=CountingBackend())
    x = torch.randn(2, 3)
    before = _stats()
    got, traced_after_two = run(_EulerLike(9), compiled, x)
    want, _ = run(_EulerLike(9), step, x)
    assert_same(got, want)
    after = _stats()
    assert after[0] == before[0]  # no eager frame
    assert traced_after_two > before[1]
    assert after[1] == traced_after_two  # steps 3..9 reuse the entries (before: 2 more traces at step 3)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_facts_of_a_scalar_views_offset_stay_exact(backend):
    """The offset itself read, an in-place write through the view, and the view's base written in the same
    graph: eager's values and the base's contents after each step."""
    def read(x, t):
        return x * t.storage_offset() + t

    def write(x, t):
        t.mul_(2)
        return x + t

    def through_base(ts, t):
        ts.add_(1)
        return t * 2

    for fn in (read, write, through_base):
        compiled = framejit.compile(fn, backend=backend)
        ts_eager, ts_compiled = torch.linspace(1, 2, 8), torch.linspace(1, 2, 8)
        for i in range(7):
            x = torch.randn(3)
            args_eager = (ts_eager if fn is through_base else x, ts_eager[i])
            args_compiled = (ts_compiled if fn is through_base else x, ts_compiled[i])
            assert_same(compiled(*args_compiled), fn(*args_eager))
            assert torch.equal(ts_compiled, ts_eager)


def _row_helper(feat, sz):
    y = torch.sin(feat) * 2
    h, w = sz.tolist()  # a break: the helper is a frame of its own, given one row at a time
    return torch.cos(y[:h, :w]) + 1


def test_rows_of_a_batch_recompile_a_helper_once():
    """NOTE [Changing offsets of rows]: rows 0..3 of a batch (the same sizes, offsets 0, 16, 32, 48), then a
    batch of rows of another size. The helper is traced again once for the offset, and once for the new size;
    its resume function once for that size (as stock torch.compile: 2 graphs per trace). The entry made for
    the offset keeps static sizes (before: NOTE [Dynamic layouts] made every size of both rows symbolic)."""
    backend = CountingBackend()
    compiled = framejit.compile(_row_helper, backend=backend)
    counts = []
    for n, size in ((4, 4), (4, 4), (5, 6)):
        feats, sizes = torch.randn(n, size, 4), torch.tensor([[3, 4]] * n)
        for i in range(n):
            assert_same(compiled(feats[i], sizes[i]), _row_helper(feats[i], sizes[i]))
        counts.append(backend.graph_count)
    assert counts == [3, 3, 5]
    rows = [n.meta["val"] for n in backend.graphs[2].graph.find_nodes(op="placeholder")]  # the offset's entry
    assert [tuple(map(type, row.shape)) for row in rows] == [(int, int), (int,)]
    assert all(isinstance(row.storage_offset(), torch.SymInt) for row in rows)
