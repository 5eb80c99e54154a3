"""NOTE [Symbolic ints inside dynamic floats]: an LR scheduler stepped inside a compiled train step
(`CosineAnnealingLR` multiplies a cosine of its symbolic `last_epoch` by the dynamic float `group["lr"]`) stops
recompiling after its first steps, with eager's learning rates and parameters at every step; a computed float
that a branch reads is specialised together with the ints it was computed from."""
from __future__ import annotations

import math

import pytest
import torch

import framejit

S = torch.optim.lr_scheduler
SCHEDULERS = {
    "cosine": lambda opt: S.CosineAnnealingLR(opt, T_max=30),
    "step": lambda opt: S.StepLR(opt, step_size=3, gamma=0.5),
    "lambda": lambda opt: S.LambdaLR(opt, lambda e: 0.9 ** e),
    "onecycle": lambda opt: S.OneCycleLR(opt, max_lr=1.0, total_steps=20),
    "linear": lambda opt: S.LinearLR(opt, start_factor=0.3, total_iters=5),
}


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _make(kind: str):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, opt, SCHEDULERS[kind](opt)


def train_step(model, opt, sched, x):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()
    return loss


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_a_scheduler_stepped_in_a_compiled_step_stops_recompiling(kind):
    eager, compiled = _make(kind), _make(kind)
    step = framejit.compile(train_step, backend="eager")
    traced = []
    for _ in range(12):
        x = torch.randn(3, 4)
        expected, got = train_step(*eager, x), step(*compiled, x)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert compiled[1].param_groups[0]["lr"] == eager[1].param_groups[0]["lr"]
        assert compiled[2].get_last_lr() == eager[2].get_last_lr()
        for p, q in zip(compiled[0].parameters(), eager[0].parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        traced.append(framejit.stats()["frames_traced"])
    # a trace per phase at most (StepLR's decays, OneCycleLR's warm-up end), none in the last 5 steps (before:
    # one per step for cosine and linear until the recompile limit)
    assert traced[-1] == traced[6], traced
    assert traced[-1] - traced[0] <= 5, traced


class _State:
    pass


def cosine_update(s, x):
    s.g["lr"] = (1 + math.cos(math.pi * s.n / 10)) / (1 + math.cos(math.pi * (s.n - 1) / 10)) * (s.g["lr"] - 0.01) + 0.01
    return x * 2


def cosine_branch(s, x):
    lr = (1 + math.cos(math.pi * s.n / 10)) * s.g["lr"]
    if lr > 0.3:  # specialises lr and n: the branch must be taken as eager takes it
        return x + lr
    return x - lr


@pytest.mark.parametrize("fn", [cosine_update, cosine_branch])
def test_floats_computed_from_symbolic_ints_and_dynamic_floats(fn):
    compiled = framejit.compile(fn, backend="eager")
    a, b = _State(), _State()
    a.g, b.g = {"lr": 0.5}, {"lr": 0.5}
    before = framejit.stats()["frames_traced"]
    for n in [1, 2, 3, 4, 5, 6, 3, 8, 9, 12]:
        a.n = b.n = n
        x = torch.ones(2)
        expected, got = fn(a, x), compiled(b, x)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert a.g["lr"] == b.g["lr"]
    if fn is cosine_update:
        assert framejit.stats()["frames_traced"] - before == 2  # the first values, then symbolic
