"""A float computed from a dynamic float input that escapes the graph (NOTE [Computed floats rebuilt in
Python]): an LR scheduler's `group["lr"] * gamma`, stored back into the param_group and kept in a list.

Before, the computed float was emitted as the constant it had while tracing, which guarded its input by
value: the frame recompiled for every new learning rate (a training step with AdamW + StepLR grew by a
graph every scheduler step, up to the recompile limit). Now it is recomputed in Python from the input, so
after the first change makes the float an input (NOTE [Dynamic floats]) no new learning rate recompiles.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend, assert_same


def _decay(x, group, gamma, history):
    group["lr"] = group["lr"] * gamma + 0.0  # a computed float stored back where it was read
    history.append(group["lr"] / 2)  # and another one derived from it, kept in a list
    return x * group["lr"]


def test_a_decayed_learning_rate_does_not_recompile_per_value():
    backend = CountingBackend()
    compiled = framejit.compile(_decay, backend=backend)
    eager_group, group = {"lr": 0.1}, {"lr": 0.1}
    eager_history, history = [], []
    counts = []
    for step in range(6):
        x = torch.randn(3 + step % 2)
        expected = _decay(x, eager_group, 0.5, eager_history)
        actual = compiled(x, group, 0.5, history)
        assert_same(actual, expected)
        assert group == eager_group and history == eager_history  # bit for bit: the same Python float ops
        counts.append(backend.graph_count)
    assert counts[-1] == counts[2]  # the first new value makes lr an input; no later value recompiles


def test_training_step_with_adamw_steplr_and_clipping_stops_recompiling():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    eager_model = copy.deepcopy(model)

    def make(m):
        opt = torch.optim.AdamW(m.parameters(), lr=0.01)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def step(m, opt, sched, x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(m(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss

    backend = CountingBackend()
    compiled = framejit.compile(step, backend=backend)
    eager_state, state = make(eager_model), make(model)
    counts = []
    for i in range(7):
        x, y = torch.randn(3, 4), torch.randn(3, 2)
        assert_same(compiled(model, *state, x, y), step(eager_model, *eager_state, x, y))
        assert state[0].param_groups[0]["lr"] == eager_state[0].param_groups[0]["lr"]
        counts.append(backend.graph_count)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert_same(p.detach(), q.detach())
    assert counts[-1] == counts[3]  # the learning rate halves at steps 2, 4 and 6: no recompile after step 3


def test_the_optimizers_device_lists_are_guarded_answers_not_breaks():
    """torch.optim reads `_get_fused_kernels_supported_devices()` (a list holding the privateuse1 backend's
    name) on every step: it broke the step's frame there; now it is answered and guarded like the name."""
    from torch.utils import _foreach_utils

    def devices(x):
        fused = _foreach_utils._get_fused_kernels_supported_devices()
        fused.append("mine")  # a new list per call, as eager returns
        return x * 2 if x.device.type in fused else x, len(fused), _foreach_utils._get_fused_kernels_supported_devices()

    backend = CountingBackend()
    compiled = framejit.compile(devices, backend=backend, fullgraph=True)
    for n in (2, 3):
        x = torch.randn(n)
        assert_same(compiled(x), devices(x))
    assert backend.graph_count >= 1
