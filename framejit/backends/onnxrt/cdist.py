"""Euclidean torch.cdist (forward and backward) as differences, sums and a square root, for onnxrt joints.

torchlib translates neither `_cdist_forward` nor `_cdist_backward`, so a training graph with torch.cdist
(metric learning, prototype classifiers, Chamfer losses) ran both in torch between ORT parts. `decomposition()`
returns entries for the decomposition table of onnxrt joints (training.decompositions()) that write them as ops
ORT runs (NOTE [Euclidean cdist as differences]).

NOTE [Euclidean cdist as differences]
A graph holds `_cdist_forward` only where eager's torch.cdist computes distances pair by pair (p != 2, or at
most 25 rows on each side, or compute_mode 'donot_use_mm_for_euclid_dist'); otherwise cdist is traced as its
matrix-product form, which ORT already runs. For p == 2 the pairwise kernel is sqrt(sum((x1_i - x2_j)^2)), and
`_cdist_backward` (which autograd calls for both inputs, x2's with the operands swapped) is
sum_j grad_ij (x1_i - x2_j) / d_ij with 0 where d_ij is 0, as eager's kernel. Both are written with the
broadcast difference x1[..., :, None, :] - x2[..., None, :, :]; the sums run in another order than the
kernel's vectorised one, so results agree to rounding. Other p, half precision, symbolic sizes, batch
sizes that differ between x1 and x2 and a difference tensor above 2**24 elements keep the ops (in torch).
Tests: float64 against eager's ops, and a prototype classifier trained as eager with both halves in one ORT
part each (tests/backends/test_training_gaps5.py).
Inference programs take the forward's entry too (lowering.decomposition_table), so a no_grad call or eval
loop of the same model is one ORT part as well (tests/backends/test_training_gaps6.py).
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten
_MAX_DIFFERENCES = 2 ** 24


def _supported(x1, x2, p) -> bool:
    if p != 2.0 or x1.dtype not in (torch.float32, torch.float64) or x2.dtype != x1.dtype:
        return False
    if x1.dim() < 2 or x2.dim() != x1.dim() or x1.numel() == 0 or x2.numel() == 0:
        return False
    if not all(type(s) is int for s in (*x1.shape, *x2.shape)) or x1.shape[:-2] != x2.shape[:-2]:
        return False
    return math.prod(x1.shape[:-2]) * x1.shape[-2] * x2.shape[-2] * x1.shape[-1] <= _MAX_DIFFERENCES


def _differences(x1, x2):
    return aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))


def cdist_forward(x1, x2, p, compute_mode=None):
    if not _supported(x1, x2, p):
        return NotImplemented
    diff = _differences(x1, x2)
    return aten.sqrt.default(aten.sum.dim_IntList(aten.mul.Tensor(diff, diff), [-1]))


def cdist_backward(grad, x1, x2, p, cdist):
    if not _supported(x1, x2, p) or grad.dtype != x1.dtype:
        return NotImplemented
    ratio = aten.where.ScalarSelf(aten.eq.Scalar(cdist, 0), 0.0, aten.div.Tensor(grad, cdist))
    return aten.sum.dim_IntList(aten.mul.Tensor(_differences(x1, x2), aten.unsqueeze.default(ratio, -1)), [-2])


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [Euclidean cdist as differences])."""
    return {aten._cdist_forward.default: cdist_forward, aten._cdist_backward.default: cdist_backward}
