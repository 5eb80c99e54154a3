"""Max-pooling gradients without the forward's indices, for the onnxrt backend's training graphs.

`max_pool{2,3}d_with_indices_backward` and `adaptive_max_pool{2,3}d_backward` read the forward's indices
(where each window's maximum was). ORT's MaxPool skips NaN where eager's kernel takes a window's last NaN,
so a pool whose indices are used runs in torch (translate.py, NOTE [Eager semantics in ONNX]); the min-cut
partitioner recomputes the pool in the backward (NOTE [Recomputation for ORT programs]), so every CNN with
max pooling ran that pool in torch inside its backward graph. `decomposition()` returns entries for the
decomposition table of onnxrt joints (training.decompositions()) that recompute each window's argmax from
the pool's input (NOTE [Max-pool gradients from recomputed argmaxes]); the indices are then unused and the
forward pool's values run in ORT (semantics.py makes them NaN-aware). torchlib has no translation of
`adaptive_max_pool{2,3}d` either: its values and indices are traced the same way. 1-d pools reach these ops
through their 2-d forms.
"""
from __future__ import annotations

import functools
import math

import torch

aten = torch.ops.aten

# NOTE [Max-pool gradients from recomputed argmaxes]
# Eager's CPU kernels (max_pool 2-d/3-d and adaptive max_pool) scan a window in row-major order from the
# first in-bounds position with `if (val > maxval || isnan(val))` starting from maxval = -inf: the index is
# the window's LAST NaN if it holds one, else its FIRST maximum, else (every value -inf) its first
# in-bounds position; the backward adds grad_output[o] to grad_input[index(o)]. Here every window is laid
# out explicitly: per spatial dim, position p[o, k] of window element k of output o (max_pool:
# o * stride - padding + k * dilation, in bounds when 0 <= p < n; adaptive: floor(o n / out) + k, in bounds
# below ceil((o + 1) n / out)); their broadcast sums give F[O, K], the flat input position of each window
# element (clamped; out-of-bounds elements are masked), built from `arange` so the graph holds no
# constants. The input, flattened to [B, S], is gathered at F into [B, O, K]; the argmax k(b, o) follows the
# rule above (amax over the NaN positions' k, amin over the first maximum's k), F at k is the input position,
# and the gradient is a scatter-add of grad_output there into zeros of the input's size (adaptive max_pool's
# forward: the values at k and F at k, eager's values and indices). Only float32/64
# inputs with plain int sizes are decomposed; anything else keeps the op (it then runs in torch). Tests
# compare with eager's ops in float64 over kernels, strides, paddings, dilations, ceil_mode, 1-3 spatial
# dims, NaN, -inf and tied windows, channels_last (tests/backends/test_training_gaps5.py).


def _plain(*tensors) -> bool:
    return all(t.dtype in (torch.float32, torch.float64) and all(type(s) is int for s in t.shape) and t.numel()
               for t in tensors)


def _per_dim(value, dims: int) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * dims if len(values) == 1 else values


def _pool_positions(out: int, size: int, kernel: int, stride: int, padding: int, dilation: int, device):
    """[out, kernel] input positions of each window's elements along one dim, and whether each is in bounds."""
    start = aten.sub.Tensor(aten.mul.Tensor(aten.arange.default(out, dtype=torch.int64, device=device), stride), padding)
    offset = aten.mul.Tensor(aten.arange.default(kernel, dtype=torch.int64, device=device), dilation)
    position = aten.add.Tensor(aten.unsqueeze.default(start, 1), aten.unsqueeze.default(offset, 0))
    inside = aten.logical_and.default(aten.ge.Scalar(position, 0), aten.lt.Scalar(position, size))
    return position, inside


def _adaptive_positions(out: int, size: int, device):
    """As _pool_positions for adaptive pooling: window o is [floor(o n / out), ceil((o + 1) n / out))."""
    longest = max(-(-(o + 1) * size // out) - (o * size // out) for o in range(out))
    i = aten.arange.default(out, dtype=torch.int64, device=device)
    start = aten.div.Tensor_mode(aten.mul.Tensor(i, size), out, rounding_mode="floor")
    end = aten.div.Tensor_mode(aten.add.Tensor(aten.mul.Tensor(i, size), size + out - 1), out, rounding_mode="floor")
    position = aten.add.Tensor(aten.unsqueeze.default(start, 1),
                               aten.unsqueeze.default(aten.arange.default(longest, dtype=torch.int64, device=device), 0))
    return position, aten.lt.Tensor(position, aten.unsqueeze.default(end, 1))


def _windows(per_dim: list, space: list[int]):
    """F [O, K] (flat input positions, clamped into range) and the in-bounds mask [O, K] from per-dim
    (positions [o_d, k_d], in bounds [o_d, k_d]); O and K in row-major order over the dims."""
    dims = len(per_dim)
    flat, inside = None, None
    for d, (position, valid) in enumerate(per_dim):
        shape = [1] * (2 * dims)
        shape[d], shape[dims + d] = position.shape
        scaled = aten.mul.Tensor(aten.clamp.default(position, 0, space[d] - 1), math.prod(space[d + 1:]))
        scaled, valid = aten.view.default(scaled, shape), aten.view.default(valid, shape)
        flat = scaled if flat is None else aten.add.Tensor(flat, scaled)
        inside = valid if inside is None else aten.logical_and.default(inside, valid)
    outs = math.prod(p.shape[0] for p, _ in per_dim)
    kernel = math.prod(p.shape[1] for p, _ in per_dim)
    full = [p.shape[0] for p, _ in per_dim] + [p.shape[1] for p, _ in per_dim]
    flat = aten.reshape.default(aten.expand.default(flat, full), [outs, kernel])
    inside = aten.reshape.default(aten.expand.default(inside, full), [outs, kernel])
    return flat, inside


def _argmax(input, per_dim: list):
    """(the windows' gathered values [B, O, K], eager's argmax k [B, O], F [O, K]) of a max pool over `input`
    whose windows are `per_dim` (NOTE [Max-pool gradients from recomputed argmaxes])."""
    dims = len(per_dim)
    space = list(input.shape[-dims:])
    flat, inside = _windows(per_dim, space)
    outs, kernel = flat.shape
    x = aten.reshape.default(input, [-1, math.prod(space)])
    values = aten.view.default(aten.index_select.default(x, 1, aten.reshape.default(flat, [-1])),
                               [x.shape[0], outs, kernel])
    k = aten.arange.default(kernel, dtype=torch.int64, device=input.device)
    nan = aten.logical_and.default(aten.isnan.default(values), inside)
    last_nan = aten.amax.default(aten.where.self(nan, k, aten.full_like.default(k, -1)), [-1])
    masked = aten.where.self(inside, values, aten.full_like.default(values, float("-inf")))
    top = aten.amax.default(masked, [-1], True)
    first_max = aten.logical_and.default(aten.eq.Tensor(masked, top), inside)
    first = aten.amin.default(aten.where.self(first_max, k, aten.full_like.default(k, kernel)), [-1])
    return values, aten.where.self(aten.ge.Scalar(last_nan, 0), last_nan, first), flat


def _picked(table, chosen):
    """table[b, o, chosen[b, o]] for table [B or 1, O, K] and chosen [B, O]."""
    table = aten.expand.default(table, [chosen.shape[0], *table.shape[-2:]])
    return aten.squeeze.dim(aten.gather.default(table, 2, aten.unsqueeze.default(chosen, -1)), -1)


def _gradient(grad_output, input, per_dim: list):
    """grad_input of a max pool whose windows are `per_dim` (NOTE [Max-pool gradients from recomputed argmaxes])."""
    _, chosen, flat = _argmax(input, per_dim)
    position = _picked(aten.unsqueeze.default(flat, 0), chosen)
    size = math.prod(input.shape[-len(per_dim):])
    grad = aten.reshape.default(grad_output, list(chosen.shape))
    result = aten.scatter_add.default(aten.new_zeros.default(grad, [chosen.shape[0], size]), 1, position, grad)
    return aten.reshape.default(result, list(input.shape))


def adaptive_max_pool(dims: int, input, output_size):
    """adaptive_max_pool{2,3}d's values and indices as eager's kernel computes them (torchlib has no translation)."""
    out = _per_dim(output_size, dims)
    if not _plain(input) or input.dim() < dims + 1 or not all(type(o) is int and o > 0 for o in out):
        return NotImplemented
    space = list(input.shape[-dims:])
    values, chosen, flat = _argmax(input, [_adaptive_positions(o, n, input.device) for o, n in zip(out, space)])
    shape = [*input.shape[:-dims], *out]
    return (aten.reshape.default(_picked(values, chosen), shape),
            aten.reshape.default(_picked(aten.unsqueeze.default(flat, 0), chosen), shape))


def max_pool_backward(dims: int, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode, indices):
    if not _plain(grad_output, input) or input.dim() != grad_output.dim() or input.dim() < dims + 1:
        return NotImplemented
    kernel, padding, dilation = _per_dim(kernel_size, dims), _per_dim(padding, dims), _per_dim(dilation, dims)
    stride = _per_dim(stride, dims) if stride else kernel
    out, space = list(grad_output.shape[-dims:]), list(input.shape[-dims:])
    per_dim = [_pool_positions(*args, input.device) for args in zip(out, space, kernel, stride, padding, dilation)]
    return _gradient(grad_output, input, per_dim)


def adaptive_max_pool_backward(dims: int, grad_output, input, indices):
    if not _plain(grad_output, input) or input.dim() != grad_output.dim() or input.dim() < dims + 1:
        return NotImplemented
    out, space = list(grad_output.shape[-dims:]), list(input.shape[-dims:])
    if not all(out) or not all(space):
        return NotImplemented
    return _gradient(grad_output, input, [_adaptive_positions(o, n, input.device) for o, n in zip(out, space)])


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [Max-pool gradients from recomputed argmaxes])."""
    return {
        aten.max_pool2d_with_indices_backward.default: functools.partial(max_pool_backward, 2),
        aten.max_pool3d_with_indices_backward.default: functools.partial(max_pool_backward, 3),
        aten.adaptive_max_pool2d_backward.default: functools.partial(adaptive_max_pool_backward, 2),
        aten.adaptive_max_pool3d_backward.default: functools.partial(adaptive_max_pool_backward, 3),
        aten.adaptive_max_pool2d.default: functools.partial(adaptive_max_pool, 2),
        aten.adaptive_max_pool3d.default: functools.partial(adaptive_max_pool, 3),
    }
