"""Which runtime a joint graph trains through (NOTE [Lean joint runtime] in framejit/backends/joint_runtime.py).

A joint without input mutations, aliased outputs and the like runs its compiled halves from one lean
autograd.Function; the others keep AOT autograd's runtime wrappers. Each case trains a compiled copy and an
eager copy of a model for 3 AdamW steps from the same weights on fresh data per step and compares the
gradients after every backward and the parameters and buffers after every step; the joint's counters
(`lean_runtime`, `aot_runtime`: one per built joint) say which path each joint took.
"""
from __future__ import annotations

import copy

import pytest
import torch

import framejit
from tests.backends.test_training_backends import TOL, Recording, _leaves, _loss, assert_backward_in_backend
from tests.backends.test_training_backends import _count_ort_runs  # noqa: F401 (autouse: ORT runs counted)

STEPS = 3


def _paths(recording: Recording) -> tuple[int, int]:
    joints = recording.joints()
    return sum(j.stats["lean_runtime"] for j in joints), sum(j.stats["aot_runtime"] for j in joints)


def _train_against_eager(model: torch.nn.Module, make_input, backend: str, seed_dropout: bool = False) -> Recording:
    compiled_model = copy.deepcopy(model)
    recording = Recording(backend)
    fast = framejit.compile(compiled_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, compiled_model)]
    for step in range(STEPS):
        x = make_input(step)
        losses = []
        for run, opt in ((model, opts[0]), (fast, opts[1])):
            if seed_dropout:
                torch.manual_seed(100 + step)
            loss = _loss(run(x.clone()))
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **TOL)
        for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
            if p.grad is None:
                assert q.grad is None, name
            else:
                torch.testing.assert_close(q.grad, p.grad, **TOL, msg=lambda m: f"{name}: {m}")
        for opt in opts:
            opt.step()
            opt.zero_grad()
        for (name, p), q in zip(model.state_dict().items(), compiled_model.state_dict().values()):
            torch.testing.assert_close(q, p, **TOL, msg=lambda m: f"{name}: {m}")
    assert_backward_in_backend(recording)
    return recording


def _batch(shape):
    return lambda step: torch.randn(*shape, generator=torch.Generator().manual_seed(step))


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_plain_model_trains_through_the_lean_runtime(backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 3, bias=False))
    model[2].bias.requires_grad_(False)  # a frozen parameter: no grad, as in eager
    recording = _train_against_eager(model, _batch((5, 6)), backend)
    assert _paths(recording) == (1, 0)
    assert model[2].bias.grad is None


def test_batchnorm_running_stats_keep_aot_autograds_runtime():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    recording = _train_against_eager(model, _batch((5, 6)), "onnxrt")  # running stats: input mutations
    assert _paths(recording) == (0, 1)


def test_dropout_draws_the_same_numbers_on_the_lean_runtime():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 3)).train()
    recording = _train_against_eager(model, _batch((4, 6)), "onnxrt", seed_dropout=True)
    assert _paths(recording) == (1, 0)


def test_output_aliasing_an_input_keeps_aot_autograds_runtime():
    def fn(x, w):
        return torch.relu(x @ w), w.t()
    recording = Recording("onnxrt")
    fast = framejit.compile(fn, backend=recording)
    for seed in (0, 1):
        (x, w), (ex, ew) = _leaves(seed, (3, 4), (4, 2)), _leaves(seed, (3, 4), (4, 2))
        out, wt = fast(x, w)
        assert wt._base is w
        eo, ewt = fn(ex, ew)
        (out.sum() + wt.square().sum()).backward()
        (eo.sum() + ewt.square().sum()).backward()
        torch.testing.assert_close(w.grad, ew.grad, **TOL)
        torch.testing.assert_close(x.grad, ex.grad, **TOL)
    assert _paths(recording) == (0, 1)


def test_lean_runtime_semantics():
    """A non-leaf input, an output that needs no grad, an integer output, a no_grad region, retain_graph and
    create_graph (whose gradient of a gradient raises) on the lean runtime."""
    def fn(x, w, b):
        with torch.no_grad():
            scale = (x @ w).abs().mean()
        y = torch.tanh(x @ w + b) * scale
        return y, (x @ w).detach().argmax(dim=1), b.detach() * 2
    recording = Recording("onnxrt")
    fast = framejit.compile(fn, backend=recording)
    for seed in (0, 1):
        grads = []
        for run in (fn, fast):
            x0, w, b = _leaves(seed, (3, 4), (4, 5), (5,))
            x = x0 * 3  # a non-leaf input
            y, idx, b2 = run(x, w, b)
            assert not idx.requires_grad and not b2.requires_grad and idx.dtype == torch.int64
            loss = y.square().sum() + b2.sum()
            loss.backward(retain_graph=True)
            loss.backward()  # gradients accumulate over the retained graph
            (gw,) = torch.autograd.grad(run(x0 * 3, w, b)[0].sum(), w, create_graph=True)
            grads.append((y, idx, b2, x0.grad, w.grad, b.grad, gw))
        for actual, expected in zip(grads[1], grads[0]):
            torch.testing.assert_close(actual, expected, **TOL)
        with pytest.raises(RuntimeError, match="double backward"):
            grads[1][-1].sum().backward()
    lean, aot = _paths(recording)
    assert lean >= 1 and aot == 0
