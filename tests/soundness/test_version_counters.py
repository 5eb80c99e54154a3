"""Version counters of tensors a compiled call writes, as eager leaves them (issue 12): autograd's saved-tensor
checks and user caches keyed on `t._version` must see what they see in eager, on every backend
(NOTE [Version counts of written inputs], NOTE [Writes eager does not count] in capture/input_versions.py)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt", "triton"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


class _Stats(torch.nn.Module):
    """Running statistics updated by F.batch_norm with keyword arguments."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x):
        return F.batch_norm(x, running_mean=self.mean, running_var=self.var, training=self.training, momentum=0.3)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), _Stats(), torch.nn.ReLU())


def _versions(model):
    return {name: buffer._version for name, buffer in model.named_buffers()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_running_statistics_keep_eager_versions(backend):
    # before (onnxrt; triton with autograd): the backend's write-back copy_ bumped running_mean/var once per
    # training call, where eager's batch_norm bumps nothing (num_batches_tracked's add_ bumps in both)
    eager_model = _model()
    model = copy.deepcopy(eager_model)
    compiled = framejit.compile(model, backend=_backend(backend))
    for call in range(5):
        x = torch.randn(8, 4)
        if call == 3:
            eager_model.eval()
            model.eval()
        before_e, before_c = _versions(eager_model), _versions(model)
        with torch.no_grad() if call == 2 else torch.enable_grad():
            assert_same(compiled(x), eager_model(x), rtol=1e-5, atol=1e-5)
        after_e, after_c = _versions(eager_model), _versions(model)
        assert {k: after_c[k] - before_c[k] for k in after_c} == {k: after_e[k] - before_e[k] for k in after_e}
        for b_c, b_e in zip(model.buffers(), eager_model.buffers()):
            assert_same(b_c, b_e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_statistics_saved_for_backward_before_a_compiled_training_call(backend):
    # autograd saved running_mean before the call; eager's batch_norm does not bump it, so backward works there.
    # before (onnxrt, triton): "one of the variables needed for gradient computation has been modified by an
    # inplace operation"
    results = []
    for run in ("eager", "compiled"):
        model = _model()
        call = framejit.compile(model, backend=_backend(backend)) if run == "compiled" else model
        grads = []
        for _ in range(3):
            w = torch.ones(4, requires_grad=True)
            saved = (w * model[1].running_mean).sum()  # mul saves running_mean for backward
            out = call(torch.randn(8, 4)).sum()
            (saved + out).backward()
            grads.append(w.grad)
        results.append(grads)
    assert_same(results[1], results[0], rtol=1e-5, atol=1e-5)
