"""Eval-mode batch norm as one op on onnxrt (NOTE [Eval batch norm as one op] in backends/onnxrt/lowering.py).

make_fx traces an eval BatchNorm as native_batch_norm(training=False); it is lowered to
`_native_batch_norm_legit_no_training` (one BatchNormalization), which ORT folds into the convolution before
it when weights and statistics are frozen. Train-mode batch norm stays decomposed. The op types are read
from the model ORT's optimizer made for each real session. Differential: eager vs framejit's onnxrt backend
on fresh inputs at every call, with statistics and weights changed between calls.
"""
from __future__ import annotations

import torch

import framejit

F32 = dict(rtol=1e-4, atol=1e-5)


def _model(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 1), torch.nn.BatchNorm2d(4))
    for bn in (model[1], model[4]):  # statistics and affine parameters away from their initial values
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.normal_()
        bn.bias.data.normal_()
    return model


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_eval_batch_norm_folds_into_the_convolution(optimized):
    framejit.reset()
    model = _model().eval()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for seed in range(3):
            x = _x(seed, 2, 3, 6, 6)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    ops = optimized()
    assert ops["Conv"] == 2, ops
    for op in ("BatchNormalization", "Sub", "Mul", "Add", "Sqrt", "Div", "Reciprocal"):
        assert op not in ops, ops


def test_statistics_and_weights_changed_between_calls():
    """A train-mode forward (new running statistics), an in-place weight write and load_state_dict between
    eval calls: every eval call equals eager."""
    framejit.reset()
    model = _model(1)
    compiled = framejit.compile(model, backend="onnxrt")
    other = _model(2).state_dict()
    changes = [
        lambda: None,
        lambda: (model.train(), model(_x(9, 4, 3, 6, 6)), model.eval()),
        lambda: model[1].weight.mul_(1.5),
        lambda: model[4].running_var.add_(0.5),
        lambda: model.load_state_dict(other),
    ]
    model.eval()
    for seed, change in enumerate(changes):
        with torch.no_grad():
            change()
            x = _x(seed, 2, 3, 6, 6)
            torch.testing.assert_close(compiled(x), model(x), **F32)


def test_train_mode_batch_norm_stays_decomposed(optimized):
    """Batch statistics and the running-statistics update as eager's (NOTE [Batch norm in train mode on ORT])."""
    framejit.reset()
    model, reference = _model(3).train(), _model(3).train()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for seed in range(3):
            x = _x(seed, 4, 3, 6, 6)
            torch.testing.assert_close(compiled(x), reference(x), **F32)
    for bn, ref in ((model[1], reference[1]), (model[4], reference[4])):
        torch.testing.assert_close(bn.running_mean, ref.running_mean, **F32)
        torch.testing.assert_close(bn.running_var, ref.running_var, **F32)
    assert "BatchNormalization" not in optimized()
