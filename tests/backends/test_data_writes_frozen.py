"""Writes through `.data` of weights that require no grad reach onnxrt's frozen copies of them (review revD
HIGH-2; NOTE [Unbumped writes of compiled calls count a use] in framejit/tensor_watch.py): a compiled EMA update
of a frozen model, then the frozen model compiled, gives eager's outputs after every update."""
import pytest
import torch
from torch import nn

import framejit


def ema_update(ema, model):
    for pe, pm in zip(ema.parameters(), model.parameters()):
        pe.data.mul_(0.5).add_(pm.data, alpha=0.5)


def copy_update(ema, model):
    for pe, pm in zip(ema.parameters(), model.parameters()):
        pe.data.copy_(pm.data)


def forward(ema, x):
    return ema(x)


def _run(update, fwd):
    torch.manual_seed(0)
    model, ema = nn.Linear(3, 2), nn.Linear(3, 2)
    ema.requires_grad_(False)
    results = []
    for step in range(3):
        with torch.no_grad():
            model.weight.add_(1)
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(step))
        results.append(fwd(ema, x))
        update(ema, model)
        results.append(fwd(ema, x))
    return results


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("update", [ema_update, copy_update], ids=["ema", "copy"])
def test_a_frozen_model_written_through_data_is_seen_by_its_compiled_forward(backend, update):
    framejit.reset()
    want = _run(update, forward)
    got = _run(framejit.compile(update, backend=backend), framejit.compile(forward, backend=backend))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def bump_frozen(p):
    p.data.add_(1)
    return p * 2


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_a_frozen_parameter_written_and_read_in_one_graph(backend):
    framejit.reset()
    compiled = framejit.compile(bump_frozen, backend=backend)
    outs = []
    for fn in (bump_frozen, compiled):
        p = nn.Parameter(torch.zeros(3), requires_grad=False)
        outs.append([(fn(p).tolist(), p.tolist(), p._version) for _ in range(3)])
    assert outs[1] == outs[0]
