"""Average-pooling gradients as ops torchlib translates, for the onnxrt backend's training graphs.

torchlib has no translation of `avg_pool{2,3}d_backward` or `_adaptive_avg_pool{2,3}d_backward`, so the
backward graph of a net with nn.AvgPool2d or nn.AdaptiveAvgPool2d ran each pool's gradient in torch
between ORT parts. `decomposition()` returns the entries for the decomposition table of onnxrt joints
(training.decompositions()): while AOT autograd traces the joint, each of these ops becomes convolutions,
matrix products and pointwise ops (NOTE [Pooling gradients as convolutions and products]). 1-d pools
reach these ops through their 2-d forms (avg_pool1d and adaptive_avg_pool1d are 2-d pools in aten).
"""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten

# NOTE [Pooling gradients as convolutions and products]
# avg_pool (kernel k, stride s, padding p per spatial dim) gives y[j] = sum of x over window j / div[j], so
# eager's backward adds grad_y[j] / div[j] to every x position of window j. Here:
# - div is separable: per dim, the window's size clipped to [-p, size + p) (count_include_pad, eager's
#   `pool_size`) or to [0, size) (its in-bounds count), and their product; or divisor_override. The
#   per-dim sizes are computed from `arange(out)` with the window bounds of eager's kernel (ceil_mode's
#   extra window included), so the graph holds no constant tensors;
# - the sum over windows is a transposed convolution of grad_y / div (channels folded into the batch, one
#   all-ones kernel, stride s, no padding): position t of its output is input position t - p; the first p
#   positions and any past the input are cut, and input positions no window reached (a floor-mode tail)
#   are zero-padded.
# adaptive_avg_pool: window i of a dim of size n with o outputs is [floor(i n / o), ceil((i + 1) n / o)),
# so the gradient is separable too: grad_y divided by the windows' sizes (per dim, in eager's order: one
# division per dim), then per dim a product with the 0/1 matrix [o, n] of window membership (made from
# `arange` comparisons). Only float inputs with plain int sizes are decomposed; anything else keeps the
# op (it then runs in torch). Tests compare with eager's ops over kernels, strides, paddings, ceil_mode,
# count_include_pad, divisor_override, 2-d and 3-d, batched and unbatched (tests/backends/test_training_gaps4.py).


def _plain(*tensors) -> bool:
    return all(t.is_floating_point() and all(type(s) is int for s in t.shape) for t in tensors)


def _per_dim(value, dims: int) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        return []
    return values * dims if len(values) == 1 else values


def _window_sizes(out: int, size: int, kernel: int, stride: int, padding: int, count_include_pad: bool, dtype,
                  device):
    """Per output position of one dim: the divisor eager's avg_pool kernel uses (as a 1-d tensor)."""
    position = aten.arange.default(out, dtype=torch.int64, device=device)
    start = aten.sub.Tensor(aten.mul.Tensor(position, stride), padding)
    end = aten.clamp_max.default(aten.add.Tensor(start, kernel), size + padding)
    if not count_include_pad:
        start, end = aten.clamp_min.default(start, 0), aten.clamp_max.default(end, size)
    return aten._to_copy.default(aten.sub.Tensor(end, start), dtype=dtype)


def _divided(grad, sizes: list) -> torch.Tensor:
    """grad / sizes[0] (over the first spatial dim) / sizes[1] ...: one division per dim."""
    dims = len(sizes)
    for i, size in enumerate(sizes):
        shape = [1] * dims
        shape[i] = -1
        grad = aten.div.Tensor(grad, aten.view.default(size, shape))
    return grad


def avg_pool_backward(dims: int, grad_output, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                      divisor_override=None):
    kernel = _per_dim(kernel_size, dims)
    stride = _per_dim(stride, dims) or kernel
    padding = _per_dim(padding, dims)
    if not _plain(grad_output, input) or input.dim() < dims + 1 or input.dim() != grad_output.dim():
        return NotImplemented
    space, out = list(input.shape[-dims:]), list(grad_output.shape[-dims:])
    lead = list(input.shape[:-dims])
    if divisor_override:
        scaled = aten.div.Tensor(grad_output, divisor_override)
    else:
        scaled = _divided(grad_output, [_window_sizes(o, n, k, s, p, count_include_pad, grad_output.dtype,
                                                      grad_output.device)
                                        for o, n, k, s, p in zip(out, space, kernel, stride, padding)])
    flat = aten.reshape.default(scaled, [-1, 1, *out])
    ones = aten.new_ones.default(grad_output, [1, 1, *kernel])
    full = aten.convolution.default(flat, ones, None, stride, [0] * dims, [1] * dims, True, [0] * dims, 1)
    pads = []
    for i, (n, p) in enumerate(zip(space, padding)):
        have = full.shape[2 + i] - p
        if p or have > n:
            full = aten.slice.Tensor(full, 2 + i, p, p + min(n, have))
        pads = [0, max(n - have, 0)] + pads  # constant_pad_nd lists the last dim first
    if any(pads):
        full = aten.constant_pad_nd.default(full, pads, 0.0)
    return aten.reshape.default(full, [*lead, *space])


def _membership(out: int, size: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """[out, size] 0/1 window membership of adaptive pooling along one dim, and each window's size."""
    i = aten.arange.default(out, dtype=torch.int64, device=device)
    start = aten.div.Tensor_mode(aten.mul.Tensor(i, size), out, rounding_mode="floor")
    end = aten.div.Tensor_mode(aten.add.Tensor(aten.mul.Tensor(i, size), size + out - 1), out, rounding_mode="floor")
    position = aten.unsqueeze.default(aten.arange.default(size, dtype=torch.int64, device=device), 0)
    inside = aten.logical_and.default(aten.ge.Tensor(position, aten.unsqueeze.default(start, 1)),
                                      aten.lt.Tensor(position, aten.unsqueeze.default(end, 1)))
    return aten._to_copy.default(inside, dtype=dtype), aten._to_copy.default(aten.sub.Tensor(end, start), dtype=dtype)


def adaptive_avg_pool_backward(grad_output, input, dims: int):
    if not _plain(grad_output, input) or input.dim() != grad_output.dim() or input.dim() < dims + 1:
        return NotImplemented
    space, out = list(input.shape[-dims:]), list(grad_output.shape[-dims:])
    members = [_membership(o, n, grad_output.dtype, grad_output.device) for o, n in zip(out, space)]
    grad = _divided(grad_output, [size for _, size in members])
    for i, (matrix, _) in enumerate(members):  # contract output dim i with its [o, n] membership
        axis = grad.dim() - dims + i
        moved = aten.movedim.int(grad, axis, -1) if axis != grad.dim() - 1 else grad
        product = aten.matmul.default(moved, matrix)
        grad = aten.movedim.int(product, -1, axis) if axis != grad.dim() - 1 else product
    return aten.clone.default(grad, memory_format=torch.contiguous_format)


def decomposition() -> dict:
    """The decomposition-table entries (NOTE [Pooling gradients as convolutions and products])."""
    return {
        aten.avg_pool2d_backward.default: functools.partial(avg_pool_backward, 2),
        aten.avg_pool3d_backward.default: functools.partial(avg_pool_backward, 3),
        aten._adaptive_avg_pool2d_backward.default: lambda grad, x: adaptive_avg_pool_backward(grad, x, 2),
        aten._adaptive_avg_pool3d_backward.default: lambda grad, x: adaptive_avg_pool_backward(grad, x, 3),
    }
