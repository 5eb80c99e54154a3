"""Dropout as a draw in torch and a product in ORT, for the onnxrt backend's training graphs.

Ops that draw random numbers run in torch so that torch's generator gives eager's numbers (NOTE [Random ops
stay whole] in lowering.py). `native_dropout` draws its mask AND multiplies: its input comes from the ORT
part before it and its output feeds the ORT part after it, so every dropout cut a training forward in two
(a transformer layer with 4 dropouts: 5 ORT parts). `decomposition()` returns the entry for the decomposition
table of onnxrt joints (training.decompositions()) that separates the two (NOTE [Dropout's draw apart from
its product]).

NOTE [Dropout's draw apart from its product]
Eager's CPU kernel (p strictly between 0 and 1, train=True) is `mask = empty_like(input, bool);
mask.bernoulli_(1 - p); output = input * mask * (1 / (1 - p))` (F.dropout on CPU computes the same bits by
another path, measured). For a contiguous input that is `bernoulli.p(empty(shape, bool), 1 - p)` (the same
kernel on the same layout, so the same draws from the same generator state) and two products. The draw reads
no value of the graph, only its shape, so it stays in torch without splitting the ORT part around it (the
partitioner keeps parts acyclic; the draw's only input is the draw before it, NOTE [Random draws keep their
order] in partition.py); the products run in ORT, and the mask is saved for the backward as before. A
non-contiguous input (eager draws in its memory order), half precision, symbolic sizes, p of 0 or 1 or
train=False, an empty input (eager returns the input itself and a mask of its dtype) and any device but the
CPU (CUDA's kernel draws Philox numbers its own way) keep the op whole (in torch, as before). Tests: the
decomposition's mask and output equal eager's under the same seed, the compiled forward and gradients of a
dropout equal eager's bit for bit, and a transformer layer with attention dropout trains as eager with its
forward in one ORT part (tests/backends/test_training_gaps5.py).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _kept_whole(input, p, train) -> bool:
    """Eager's kernel is not the draw and products written below (NOTE [Dropout's draw apart from its
    product]): the op stays one op, run in torch."""
    if not train or not 0.0 < p < 1.0 or input.dtype not in (torch.float32, torch.float64):
        return True
    if input.device.type != "cpu" or not all(type(s) is int for s in input.shape):
        return True
    return input.numel() == 0 or not input.is_contiguous()


def native_dropout(input, p, train):
    if _kept_whole(input, p, train):
        return NotImplemented
    keep = 1.0 - p
    mask = aten.bernoulli.p(aten.empty.memory_format(list(input.shape), dtype=torch.bool, device=input.device), keep)
    return aten.mul.Tensor(aten.mul.Tensor(input, mask), 1.0 / keep), mask


def decomposition() -> dict:
    """The decomposition-table entry (NOTE [Dropout's draw apart from its product])."""
    return {aten.native_dropout.default: native_dropout}
