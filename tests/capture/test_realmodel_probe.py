"""Defects found by probing real library code as a new user would (issue 11), each reduced to a small program.

Each test is differential (eager vs compiled on fresh inputs, several calls) and names the library code it
came from.
"""
from __future__ import annotations

import copy

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class _Registry(dict):
    """A dict subclass read through dict's own methods (transformers' registries and ModelOutput)."""

    def get(self, key, default=None):
        return super().get(key, default)


_FIRST, _SECOND = _Registry(a=1), _Registry(b=2)
_LOG: list = []


def _reads_two_registries_and_mutates(x):
    _LOG.append(x.shape[0])
    return x + _FIRST.get("a") + _SECOND.get("b")


def test_fresh_copies_in_the_no_aliasing_guard_stay_distinct():
    """Encoder-decoder generate() (m2m_100, mt5) recompiled its decoder step every call until the recompile
    limit, then ran it eagerly: the frame mutates (so a guard pins its objects distinct) and reads two dict
    subclasses' raw items, fresh copies in the guard (NOTE [Dict subclasses]). `len({id(a), id(b)})` freed
    the first copy before making the second, which could get the same address: "NO_ALIASING ... got a
    different value" on some calls."""
    backend = CountingBackend()
    compiled = framejit.compile(_reads_two_registries_and_mutates, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    _LOG.clear()
    for _ in range(12):
        x = torch.randn(3, 2)
        torch.testing.assert_close(compiled(x), x + 3)
    assert _LOG == [3] * 12
    assert backend.graph_count == 1
    assert framejit.stats()["eager_frames"] == eager_before


def _clip_step(model, x, y, foreach):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.05, foreach=foreach)
    return loss, norm


@pytest.mark.parametrize("foreach", [None, True])
def test_gradient_clipping_in_a_training_step_scales_the_real_gradients(foreach):
    """clip_grad_norm_ was a graph op run on fake parameters, which have no `.grad`: the compiled step
    returned the right norm and left every gradient unclipped (NOTE [Gradient clipping])."""
    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    model = copy.deepcopy(eager_model)
    backend = CountingBackend()
    step = framejit.compile(_clip_step, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    for seed in range(3):  # gradients accumulate between steps, so a missed clip shows in every later value
        gen = torch.Generator().manual_seed(seed)
        x, y = torch.randn(5, 4, generator=gen), torch.randn(5, 2, generator=gen)
        want, got = _clip_step(eager_model, x, y, foreach), step(model, x, y, foreach)
        torch.testing.assert_close(got, want)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert framejit.stats()["eager_frames"] == eager_before
    assert backend.graph_count == 2  # the forward, and the clipping after loss.backward() (a break)


def test_gradient_clipping_over_two_dtypes_runs_torchs_grouping():
    """Parameters of two dtypes make two foreach groups, whose order is the C++ function's: a break there,
    and torch's own grouping runs; the gradients are clipped as in eager."""
    torch.manual_seed(0)
    eager_model = torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3).double()])
    model = copy.deepcopy(eager_model)
    clip = framejit.compile(lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1, foreach=True),
                            backend=CountingBackend())
    for seed in range(2):
        gen = torch.Generator().manual_seed(seed)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            q.grad = torch.randn(q.shape, generator=gen, dtype=q.dtype)
            p.grad = q.grad.clone()
        torch.testing.assert_close(clip(model), torch.nn.utils.clip_grad_norm_(eager_model.parameters(), 0.1,
                                                                                foreach=True))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
