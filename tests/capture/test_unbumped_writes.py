"""Calls that write their arguments without bumping a version counter run as eager runs them (NOTE [Writes
that bump no version] in capture/graph_calls.py): torch's fused optimizer steps. Before, a compiled call of
`torch._fused_adamw_` (directly or through `AdamW(..., fused=True).step()`) was dropped from the graph as a
call with a constant None result, and the parameters never changed.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.capture.breaks import BreakKind

F32 = dict(rtol=1e-5, atol=1e-6)


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(3, 4, generator=g), torch.randn(4, generator=g)]
    grads = [torch.randn(p.shape, generator=g) for p in params]
    return params, grads, [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params], \
        [torch.tensor(float(k + 1)) for k in range(len(params))]


def _adamw_step(params, grads, exp_avgs, exp_avg_sqs, steps):
    torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=0.1, beta1=0.9, beta2=0.999,
                        weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
    return params[0] * 2


def test_a_direct_fused_step_writes_its_lists_as_eager():
    framejit.reset()
    eager, mine = _state(), _state()
    compiled = framejit.compile(_adamw_step, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(compiled(*mine), _adamw_step(*eager), **F32)
        for got, want in zip(sum(mine[:4], []), sum(eager[:4], [])):
            torch.testing.assert_close(got, want, **F32)
    report = framejit.explain(_adamw_step)(*_state(1))  # a break; once tensor_watch wraps the op, the call of
    kinds = {b.kind for b in report.break_reasons}  # its wrapper is the break (NOTE [Counting wrappers run in Python])
    wrapped = hasattr(torch._fused_adamw_, "__wrapped__")
    assert kinds == ({BreakKind.UNSUPPORTED_CALL} if wrapped else {BreakKind.SIDE_EFFECT})


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def _train(model, optimizer, x):
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.05, fused=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.05, fused=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, fused=True),
}


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_compiled_training_step_with_a_fused_optimizer_trains_as_eager(name, backend):
    framejit.reset()
    eager, mine = _model(), _model()
    opt_eager, opt_mine = OPTIMIZERS[name](eager.parameters()), OPTIMIZERS[name](mine.parameters())
    step = framejit.compile(_train, backend=backend)
    for k in range(3):
        x = torch.randn(4 + k, 6, generator=torch.Generator().manual_seed(k))
        torch.testing.assert_close(step(mine, opt_mine, x), _train(eager, opt_eager, x), rtol=1e-4, atol=1e-5)
        for got, want in zip(mine.parameters(), eager.parameters()):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
