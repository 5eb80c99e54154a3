"""`aten._embedding_bag_backward` as gathers and scatter-adds, for the onnxrt backend's training graphs.

torchlib has no translation of `_embedding_bag_backward` (nor of the per-sample-weights gradient), so the
backward graph of a net with nn.EmbeddingBag ran the weight's gradient in torch between ORT parts.
`decomposition()` returns the entries for the decomposition table of onnxrt joints
(training.decompositions()): while AOT autograd traces the joint, these ops become ops torchlib
translates (NOTE [EmbeddingBag gradients as scatter-adds]).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2

# NOTE [EmbeddingBag gradients as scatter-adds]
# The forward `_embedding_bag` stays one op in torch (translate.py: torchlib computes only its first
# output); it checks the offsets as eager does (offsets[0] must be 0, ...), so the backward only ever sees
# offsets eager accepted. Its other outputs (offset2bag, bag_size, max_indices) depend on the mode and on
# padding_idx (offset2bag is empty in sum mode without padding), so the backward does not read them but
# recomputes what it needs from the offsets, except in max mode:
# - each index's bag: ones scatter-added at the bag starts offsets[1:B] (B = the gradient's rows, so an
#   include_last_offset's last offset is no start), cumulated: index k is in bag (#starts <= k);
# - sum and mean: row k of the weight gradient gets grad[bag(k)] times per_sample_weights[k] (sum), divided
#   by the bag's count of non-padding indices (mean); padding indices add nothing (`where`, so a NaN
#   gradient stays out as in eager). The rows are scatter-added into zeros [num_weights, D];
# - max: grad[b, d] goes to row max_indices[b, d] of column d, for the bags eager's forward found non-empty
#   (bag_size > 0; an empty bag's max_indices are 0);
# - per_sample_weights' gradient (sum mode): per index, grad[bag(k)] . weight[indices[k]], 0 for padding.
# sparse=True, scale_grad_by_freq (eager's CPU kernel scales rows by counts that are not their index's:
# [1, 2, 4, 5, 4, 3, 2, 9, 4, 4] in sum mode gave index 4 no scaling and index 5 a quarter) and sizes that
# are not plain ints keep the op (it then runs in torch). Tests compare with eager's ops over modes,
# padding_idx, include_last_offset, empty bags and per_sample_weights (tests/backends/test_training_gaps4.py).


def _plain(*tensors) -> bool:
    return all(all(type(s) is int for s in t.shape) for t in tensors)


def _bag_of_each_index(offsets, count: int, bags: int):
    """offset2bag as eager's sum/mean/max forward defines it, from the bag starts."""
    starts = aten.slice.Tensor(aten._to_copy.default(offsets, dtype=torch.int64), 0, 1, bags)
    marks = aten.scatter_add.default(aten.new_zeros.default(starts, [count + 1]), 0, starts,
                                     aten.new_ones.default(starts, starts.shape))
    return aten.slice.Tensor(aten.cumsum.default(marks, 0), 0, 0, count)


def _not_padding(indices, padding_idx: int):
    return aten.ne.Scalar(indices, padding_idx) if padding_idx >= 0 else None


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    if sparse or scale_grad_by_freq or grad.dim() != 2 or indices.dim() != 1 or type(num_weights) is not int \
            or not _plain(grad, indices, offsets, bag_size) or not grad.is_floating_point():
        return NotImplemented
    if mode == _MAX:
        return _max_backward(grad, maximum_indices, bag_size, num_weights)
    count, dim = indices.shape[0], grad.shape[1]
    indices = aten._to_copy.default(indices, dtype=torch.int64)
    bag = _bag_of_each_index(offsets, count, grad.shape[0])
    keep = _not_padding(indices, padding_idx)
    rows = aten.index_select.default(grad, 0, bag)
    scale = None
    if per_sample_weights is not None:
        scale = per_sample_weights
    if mode == _MEAN:
        ones = aten.new_ones.default(grad, [count]) if keep is None else aten._to_copy.default(keep, dtype=grad.dtype)
        sizes = aten.scatter_add.default(aten.new_zeros.default(grad, [grad.shape[0]]), 0, bag, ones)
        divisor = aten.index_select.default(sizes, 0, bag)
        scale = aten.reciprocal.default(divisor) if scale is None else aten.div.Tensor(scale, divisor)
    if scale is not None:
        rows = aten.mul.Tensor(rows, aten.unsqueeze.default(scale, 1))
    if keep is not None:
        rows = aten.where.self(aten.unsqueeze.default(keep, 1), rows, aten.new_zeros.default(rows, []))
    target = aten.expand.default(aten.unsqueeze.default(indices, 1), [count, dim])
    return aten.scatter_add.default(aten.new_zeros.default(grad, [num_weights, dim]), 0, target, rows)


def _max_backward(grad, maximum_indices, bag_size, num_weights: int):
    filled = aten.unsqueeze.default(aten.gt.Scalar(bag_size, 0), 1)
    rows = aten.where.self(filled, grad, aten.new_zeros.default(grad, []))
    target = aten._to_copy.default(maximum_indices, dtype=torch.int64)
    return aten.scatter_add.default(aten.new_zeros.default(grad, [num_weights, grad.shape[1]]), 0, target, rows)


def per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    if mode != _SUM or grad.dim() != 2 or indices.dim() != 1 or not _plain(grad, weight, indices, offsets):
        return NotImplemented
    indices = aten._to_copy.default(indices, dtype=torch.int64)
    bag = _bag_of_each_index(offsets, indices.shape[0], grad.shape[0])
    products = aten.mul.Tensor(aten.index_select.default(grad, 0, bag), aten.index_select.default(weight, 0, indices))
    result = aten.sum.dim_IntList(products, [1])
    keep = _not_padding(indices, padding_idx)
    return result if keep is None else aten.where.self(keep, result, aten.new_zeros.default(result, []))


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [EmbeddingBag gradients as scatter-adds])."""
    return {aten._embedding_bag_backward.default: embedding_bag_backward,
            aten._embedding_bag_per_sample_weights_backward.default: per_sample_weights_backward}
