"""Frozen weights on the onnxrt backend (NOTE [Frozen weights], NOTE [Writes through .data]).

Inference programs hold weights as ORT constants by default. Every kind of weight change a user makes
(assignment of a new Parameter, copy_ under no_grad, writes and assignments through `.data`,
load_state_dict, optimizer steps, buffer updates) must be seen: the compiled module gives eager's
results after each change, on fresh inputs, twice; and the session was rebuilt (counted through
runtime.make_session), so the check is not passing only because nothing was frozen. Unchanged weights
never rebuild a session.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.backends.onnxrt import onnxrt, runtime

F32 = dict(rtol=1e-4, atol=1e-5)


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _model(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 4), torch.nn.LayerNorm(4)).eval()
    with torch.no_grad():
        model[2].running_mean.uniform_(-1, 1)
        model[2].running_var.uniform_(0.5, 2)
    return model




def _train_step(model, optimizer, seed):
    model.train()
    loss = model(_x(seed, 5, 6)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()


def _assign(model, step):
    model[0].weight = torch.nn.Parameter(_x(100 + step, 8, 6))


def _copy(model, step):
    with torch.no_grad():
        model[3].weight.copy_(_x(100 + step, 4, 8))


def _data_write(model, step):
    model[0].weight.data.mul_(-1.5)


def _data_copy(model, step):
    model[3].bias.data.copy_(_x(100 + step, 4))


def _data_assign(model, step):
    model[0].weight.data = _x(100 + step, 8, 6)


def _load_state_dict(model, step):
    model.load_state_dict(_model(seed=10 + step).state_dict())


def _buffer(model, step):
    model[2].running_mean.add_(0.25)


def _batch_norm_training(model, step):  # running statistics change without a version bump
    model.train()
    with torch.no_grad():
        model(_x(200 + step, 5, 6) * 3 + 1)
    model.eval()


def _adamw(model, step):
    if not hasattr(model, "_opt"):
        model._opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    _train_step(model, model._opt, step)


def _sgd_data_loop(model, step):  # a hand-written update, as older training code does it
    model.train()
    model(_x(step, 5, 6)).square().mean().backward()
    for p in model.parameters():
        p.data.add_(p.grad.data, alpha=-0.1)
        p.grad = None
    model.eval()


CHANGES = {"assign": _assign, "copy_": _copy, "data_write": _data_write, "data_copy": _data_copy,
           "data_assign": _data_assign, "load_state_dict": _load_state_dict, "buffer": _buffer,
           "batch_norm_training": _batch_norm_training,  # NOTE [Statistics written without a bump]
           "optimizer_step": _adamw, "data_sgd_loop": _sgd_data_loop}


@pytest.mark.parametrize("kind", list(CHANGES))
def test_compiled_module_sees_each_kind_of_weight_change(kind, sessions):
    model = _model()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        torch.testing.assert_close(compiled(_x(1, 5, 6)), model(_x(1, 5, 6)), **F32)
    assert sessions and all(sessions), sessions  # weights are frozen by default
    for step in range(2):
        before = len(sessions)
        CHANGES[kind](model, step)
        with torch.no_grad():
            for seed in (2 + step, 5 + step):
                torch.testing.assert_close(compiled(_x(seed, 5, 6)), model(_x(seed, 5, 6)), **F32)
        assert len(sessions) > before, f"{kind}: no session was rebuilt after the change"


@pytest.mark.parametrize("kind", ["copy_", "data_write", "data_assign", "buffer", "batch_norm_training"])
def test_backend_on_a_traced_graph_sees_weight_changes(kind, sessions):
    model = _model()
    gm = torch.fx.symbolic_trace(model)  # weights are the GraphModule's own state (model's submodules)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 5, 6)])
        for step in range(3):
            CHANGES[kind](model, step)
            x = _x(step, 5, 6)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    # built, rebuilt after each change, and after the third change (_MAX_REFREEZE) no longer frozen
    assert [bool(frozen) for frozen in sessions] == [True] * (runtime._MAX_REFREEZE + 1) + [False], sessions


def test_unchanged_weights_do_not_rebuild(sessions):
    model = _model()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        compiled(_x(0, 5, 6))
        made = len(sessions)
        for seed in range(1, 6):
            torch.testing.assert_close(compiled(_x(seed, 5, 6)), model(_x(seed, 5, 6)), **F32)
        _ = model[0].weight.detach().sum()  # reading weights is not a change
        compiled(_x(7, 5, 6))
    assert len(sessions) == made


def test_frozen_part_stops_freezing_weights_that_change_every_call():
    model = _model()
    compiled = framejit.compile(model, backend="onnxrt")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2 + runtime._MAX_REFREEZE * 2):
        _train_step(model, optimizer, step)
        with torch.no_grad():
            x = _x(50 + step, 5, 6)
            torch.testing.assert_close(compiled(x), model(x), **F32)


def test_freezing_can_be_turned_off(sessions):
    model = _model()
    compiled = framejit.compile(model, backend="onnxrt", options={"freeze_weights": False})
    with torch.no_grad():
        torch.testing.assert_close(compiled(_x(1, 5, 6)), model(_x(1, 5, 6)), **F32)
        _data_write(model, 0)
        torch.testing.assert_close(compiled(_x(2, 5, 6)), model(_x(2, 5, 6)), **F32)
    assert sessions and not any(sessions)
