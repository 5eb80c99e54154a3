"""`replication_pad{1,2,3}d_backward` as scatter-adds, for the onnxrt backend's training graphs.

torchlib has no translation of the replication pads' backward ops, so the backward of a net with
nn.ReplicationPad*d ran them in torch between ORT parts. `decomposition()` returns entries for the
decomposition table of onnxrt joints (training.decompositions()).

NOTE [Replication-pad gradients as scatter-adds]
Along one padded dim (input size n, padding l before and r after, either negative to crop), output position
j reads input position clamp(j - l, 0, n - 1). The gradient is therefore separable: per padded dim, from
the last, the gradient is scatter-added into zeros of the input's size along that dim at those positions
(an `arange` clamped, expanded to the gradient's shape). Sizes that are not plain ints keep the op (it then
runs in torch). Tests compare with eager's ops over 1-3 padded dims, negative padding, batched and unbatched
(tests/backends/test_training_gaps4.py).
"""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten


def replication_pad_backward(dims: int, grad_output, input, padding):
    sizes = [*grad_output.shape, *input.shape, *padding]
    if not all(type(s) is int for s in sizes) or len(padding) != 2 * dims or grad_output.dim() != input.dim():
        return NotImplemented
    grad = grad_output
    for k in range(dims):  # padding lists the last dim first
        axis = input.dim() - 1 - k
        before, size = padding[2 * k], input.shape[axis]
        position = aten.arange.default(grad.shape[axis], dtype=torch.int64, device=grad.device)
        source = aten.clamp.default(aten.sub.Tensor(position, before), 0, size - 1)
        shape = [1] * grad.dim()
        shape[axis] = -1
        index = aten.expand.default(aten.view.default(source, shape), list(grad.shape))
        target = list(grad.shape)
        target[axis] = size
        grad = aten.scatter_add.default(aten.new_zeros.default(grad, target), axis, index, grad)
    return grad


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [Replication-pad gradients as scatter-adds])."""
    return {getattr(aten, f"replication_pad{d}d_backward").default: functools.partial(replication_pad_backward, d)
            for d in (1, 2, 3)}
