"""Persisted joints (NOTE [Persisted joints] in backends/joint_cache.py): a training graph's forward and backward
halves, their ORT programs and AOT autograd's runtime metadata are stored once the backward ran, and a
later JointGraph for the same graph and call loads them: no AOT trace, no partition, no program built, and
values, gradients, BatchNorm statistics and optimizer steps equal eager. A fact the joint depends on (an
input's requires_grad) is a miss. The process-to-process case is tests/cache/test_joint_warm.py.
"""
from __future__ import annotations

import copy

import pytest
import torch

import framejit
from framejit import config
from framejit.backends import joint


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 12)
        self.norm = torch.nn.BatchNorm1d(12)
        self.fc2 = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))


def _steps(model, compiled, opt, ref, ref_opt, inputs):
    """Train `compiled` (over `model`) and `ref` side by side; assert every step equals eager."""
    for x in inputs:
        xs = (x, x.detach().clone().requires_grad_(x.requires_grad))
        out, want = compiled(xs[0]), ref(xs[1])
        out.square().mean().backward()
        want.square().mean().backward()
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        if x.requires_grad:
            torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=1e-5, atol=1e-6)
        for a, b in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):  # running statistics too
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_a_later_joint_loads_the_persisted_halves_and_trains_as_eager(cache_on, backend):
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    inputs = [torch.randn(5, 6) for _ in range(3)]
    compiled = framejit.compile(model, backend=backend)
    before = dict(joint.STATS)
    _steps(model, compiled, opt, ref, ref_opt, inputs[:1])  # cold: traces, builds, stores after the backward
    cold = {k: joint.STATS[k] - before.get(k, 0) for k in ("traced", "loaded", "saved", "half_programs_built")}
    assert cold == {"traced": 1, "loaded": 0, "saved": 1, "half_programs_built": 2 if backend == "onnxrt" else 0}

    framejit.reset()  # forget everything in memory: the frame and the joint come from the store
    before, frames = dict(joint.STATS), framejit.stats()["frames_traced"]
    _steps(model, framejit.compile(model, backend=backend), opt, ref, ref_opt, inputs[1:])
    warm = {k: joint.STATS[k] - before.get(k, 0) for k in ("traced", "loaded", "saved", "half_programs_built")}
    assert warm == {"traced": 0, "loaded": 1, "saved": 0, "half_programs_built": 0}
    if backend == "onnxrt":  # triton's training graphs are not frame-cache artifacts: the frame is traced again
        assert framejit.stats()["frames_traced"] == frames

    # the input now requires grad: another joint (x gets a gradient), never the stored one
    before = dict(joint.STATS)
    _steps(model, framejit.compile(model, backend=backend), opt, ref, ref_opt,
           [torch.randn(5, 6, requires_grad=True) for _ in range(2)])
    assert joint.STATS["traced"] - before.get("traced", 0) == 1
    assert joint.STATS["loaded"] - before.get("loaded", 0) == 0



def _write_under_no_grad(a, b, d):
    y = (d * 3).sum()
    with torch.no_grad():  # grad-mode nodes: kept for their effect, which the loaded frame's graph must keep too
        b.mul_(0.5)
        d.add_(1.0)
    return y + (a * 2).sum()


def test_a_joint_whose_graph_switches_grad_mode_loads_after_the_frame_loads(cache_on):
    """The frame cache kept no `effect` mark on the grad-mode nodes of a loaded graph, so the joint's key (which
    hashes the graph) differed from the one stored: every process traced and stored the joint again."""
    def run(fn, params):
        losses = []
        for _ in range(2):
            loss = fn(*params)
            loss.backward()
            losses.append(loss.detach())
        return losses, [p.grad for p in params], [p.detach() for p in params]

    def fresh():
        torch.manual_seed(0)
        return [torch.randn(3).requires_grad_() for _ in range(3)]

    want = run(_write_under_no_grad, fresh())
    for expect in ({"traced": 1, "loaded": 0}, {"traced": 0, "loaded": 1}):  # cold, then warm after a reset
        framejit.reset()
        before, traced = dict(joint.STATS), framejit.stats()["frames_traced"]
        got = run(framejit.compile(_write_under_no_grad, backend="onnxrt"), fresh())
        torch.testing.assert_close(got, want)
        assert {k: joint.STATS[k] - before.get(k, 0) for k in expect} == expect
    assert framejit.stats()["frames_traced"] == traced  # the warm frame came from the store

def test_the_key_names_what_the_joint_depends_on():
    from framejit.backends import joint_cache

    gm = torch.fx.symbolic_trace(lambda x, w: (x @ w).relu())
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)

    def key(*args):
        return joint_cache.joint_key(gm, args, "v", None, None, False)
    base = key(x, w)
    assert key(torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)) == base  # values are not facts
    assert key(x.requires_grad_(True), w) != base
    x.requires_grad_(False)
    assert key(x.double(), w) != base and key(torch.randn(4, 3).t(), w) != base
    with torch.no_grad():
        assert key(x, w) != base
    with torch.autocast("cpu"):
        assert key(x, w) != base
    square = torch.randn(4, 4, requires_grad=True)
    gm2 = torch.fx.symbolic_trace(lambda a, b: a @ b)
    assert joint_cache.joint_key(gm2, (square, square), "v", None, None, False) != joint_cache.joint_key(
        gm2, (square, square.detach().clone().requires_grad_(True)), "v", None, None, False)  # aliasing is a fact
    assert joint_cache.joint_key(gm, (x, w), "v2", None, None, False) != base  # the backend's revision
    with pytest.raises(joint_cache.NotPersisted):
        key(x, 3)
