"""Frozen onnxrt weights see fused optimizer steps and other whole-model weight updates (NOTE [Fused optimizer
steps bump no version] in tensor_watch.py, NOTE [Frozen weights] in backends/onnxrt/runtime.py).

Each test changes the eager model and the compiled model's module the same way between calls and compares
the compiled results with eager's on fresh inputs, twice per change, over 3 changes; a counting
`runtime.make_session` shows the session was rebuilt (so the results are not equal only because nothing was
frozen).
"""
from __future__ import annotations

import pytest
import torch

import framejit

F32 = dict(rtol=1e-4, atol=1e-5)


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()




def _optimizer_step(make):
    def change(model, step):
        if not hasattr(model, "_optimizer"):
            model._optimizer = make(model.parameters())
        model.train()
        model(_x(300 + step, 5, 6)).square().mean().backward()
        model._optimizer.step()
        model._optimizer.zero_grad()
        model.eval()
    return change


def _foreach_add(model, step):
    with torch.no_grad():
        torch._foreach_add_(list(model.parameters()), 0.25 * step)


def _foreach_lerp(model, step):  # an EMA update written with foreach ops
    with torch.no_grad():
        params = list(model.parameters())
        torch._foreach_lerp_(params, [torch.full_like(p, 0.1 * step) for p in params], 0.5)


def _vector_to_parameters(model, step):
    vector = torch.nn.utils.parameters_to_vector(model.parameters())
    torch.nn.utils.vector_to_parameters(vector * 0.5 + 0.1 * step, model.parameters())


def _state_dict_tensor_write(model, step):  # state_dict() tensors are detached aliases of the weights
    with torch.no_grad():
        model.state_dict()["0.weight"].mul_(-1.5)


def _load_state_dict_assign(model, step):
    other = {k: v * (1 + step) for k, v in _model().state_dict().items()}
    model.load_state_dict(other, assign=True)


def _init_normal(model, step):
    torch.nn.init.normal_(model[2].weight, generator=torch.Generator().manual_seed(step))


def _double_and_back(model, step):
    with torch.no_grad():
        model[0].weight.add_(step)
    model.double()
    model.float()


FUSED = {
    "adam_fused": _optimizer_step(lambda ps: torch.optim.Adam(ps, lr=0.1, fused=True)),
    "adamw_fused": _optimizer_step(lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True)),
    "sgd_fused": _optimizer_step(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True)),
    "adagrad_fused": _optimizer_step(lambda ps: torch.optim.Adagrad(ps, lr=0.5, fused=True)),
}
OTHERS = {
    "adamw_foreach": _optimizer_step(lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True)),
    "foreach_add": _foreach_add, "foreach_lerp": _foreach_lerp, "vector_to_parameters": _vector_to_parameters,
    "state_dict_tensor_write": _state_dict_tensor_write, "load_state_dict_assign": _load_state_dict_assign,
    "init_normal": _init_normal, "double_and_back": _double_and_back,
}


def _check_changes(change, sessions) -> None:
    framejit.reset()
    eager, mine = _model(), _model()
    compiled = framejit.compile(mine, backend="onnxrt")
    for step in range(4):
        if step:  # with grad mode on: optimizer steps need it
            change(eager, step)
            change(mine, step)
        before = len(sessions)
        for k in range(2):
            x = _x(10 * step + k, 3 + k, 6)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), eager(x), **F32)
        if step == 1:  # later changes may make a part feed its weights (NOTE [Frozen weights]: _MAX_REFREEZE)
            assert len(sessions) > before, "the weights changed but no session was rebuilt"
    assert any(sessions), "no session froze a weight"


@pytest.mark.parametrize("kind", list(FUSED))
def test_fused_optimizer_steps_reach_frozen_weights(kind, sessions):
    _check_changes(FUSED[kind], sessions)


@pytest.mark.parametrize("kind", list(OTHERS))
def test_whole_model_updates_reach_frozen_weights(kind, sessions):
    _check_changes(OTHERS[kind], sessions)

