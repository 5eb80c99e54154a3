"""grid_sample's gradients as gathers, products and scatter-adds, for the onnxrt backend's training graphs.

torchlib translates `grid_sampler_2d` (ONNX GridSample) but not `grid_sampler_2d_backward`, so the backward of
every net with F.grid_sample (spatial transformers, flow warping) ran that op in torch between ORT parts.
`decomposition()` returns the entry for the decomposition table of onnxrt joints (training.decompositions())
that writes it as ops torchlib translates (NOTE [grid_sample gradients as scatter-adds]).

NOTE [grid_sample gradients as scatter-adds]
Eager's CPU kernel (GridSamplerKernel.cpp, the vectorised ApplyGridSample) maps each grid value g to a source
coordinate x with the factor s = (size - 1) / 2 (align_corners) or size / 2: x = (g + 1) * s (- 0.5 without
align_corners), and dx/dg = s; `border` clips x to [0, size - 1] (dx/dg 0 where x was clipped or lands on a
border), `reflection` reflects x into [0, size - 1] (align_corners) or [-0.5, size - 0.5] and clips (each
reflection flips the sign of dx/dg). Bilinear: the corners floor(x), floor(x) + 1 (and in y) with weights
from w = x - floor(x), e = 1 - w (n, s in y); a corner outside the input reads 0 and receives nothing. The
input's gradient scatter-adds weight * grad_output into the corners (one flat index per corner, masked corners
add 0 at index 0); the grid's is sum over channels of ((ne - nw) s + (se - sw) n) grad_output in x and ((sw -
nw) e + (se - ne) w) grad_output in y, times dx/dg, as the kernel computes them. Nearest: the input's gradient
scatter-adds grad_output at round-half-even(x), the grid's is 0. Bicubic, half precision, 5-D grids and
symbolic sizes keep the op (in torch). The sums run in another order than the kernel's: results agree to
rounding. On an AVX2 CPU the kernel computes x without align_corners as one fused multiply-add, so where that
lands exactly half-way between two pixels, nearest may take the other pixel than eager (ORT's GridSample
forward likewise) (tests: float64 against eager's op over modes, paddings and align_corners; a spatial transformer
trains as eager with its backward in one ORT part, tests/backends/test_training_gaps5.py).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_BILINEAR, _NEAREST = 0, 1
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _supported(grad_output, input, grid, interpolation_mode) -> bool:
    tensors = (grad_output, input, grid)
    if interpolation_mode not in (_BILINEAR, _NEAREST) or input.dim() != 4 or grid.dim() != 4:
        return False
    if input.dtype not in (torch.float32, torch.float64) or any(t.dtype != input.dtype for t in tensors):
        return False
    return all(all(type(s) is int for s in t.shape) for t in tensors) and input.numel() > 0 and grid.numel() > 0


def _clip(x, size: int):
    """x clipped to [0, size - 1] and the mask of where it passed through (borders count as clipped)."""
    clipped = aten.clamp.default(x, 0, size - 1)
    inside = aten.logical_and.default(aten.gt.Scalar(x, 0), aten.lt.Scalar(x, size - 1))
    return clipped, inside


def _reflect(x, size: int, align_corners: bool):
    """x reflected into [low, low + span] and the sign of its derivative, as the vectorised kernel computes them
    (a distance of exactly one span is not flipped)."""
    low, span = (0.0, size - 1.0) if align_corners else (-0.5, float(size))
    shifted = aten.sub.Tensor(x, low)
    distance = aten.abs.default(shifted)
    twice = 2 * span
    extra = aten.sub.Tensor(distance, aten.mul.Tensor(aten.trunc.default(aten.div.Tensor(distance, twice)), twice))
    flipped = aten.gt.Scalar(extra, span)
    reflected = aten.add.Tensor(aten.minimum.default(extra, aten.rsub.Scalar(extra, twice)), low)
    sign = aten.where.ScalarOther(aten.logical_xor.default(aten.lt.Scalar(shifted, 0), flipped),
                                  aten.full_like.default(x, -1.0), 1.0)
    return reflected, sign


def _source(coord, size: int, padding_mode: int, align_corners: bool):
    """(source coordinate, d coordinate / d grid value) as eager's kernel computes them."""
    scale = (size - 1) / 2 if align_corners else size / 2
    x = aten.mul.Tensor(aten.add.Tensor(coord, 1), scale)
    if not align_corners:
        x = aten.sub.Tensor(x, 0.5)
    grad = aten.full_like.default(coord, scale)
    if padding_mode == _REFLECTION:
        if align_corners and size == 1:
            return aten.zeros_like.default(coord), aten.zeros_like.default(coord)
        x, sign = _reflect(x, size, align_corners)
        grad = aten.mul.Tensor(grad, sign)
    if padding_mode in (_BORDER, _REFLECTION):
        x, inside = _clip(x, size)
        grad = aten.where.ScalarOther(inside, grad, 0.0)
    return x, grad


def _corner(input_flat, ix, iy, height: int, width: int):
    """(flat index, in-bounds mask, value: 0 outside) of integer corner (ix, iy), per channel."""
    inside = aten.logical_and.default(
        aten.logical_and.default(aten.ge.Scalar(ix, 0), aten.lt.Scalar(ix, width)),
        aten.logical_and.default(aten.ge.Scalar(iy, 0), aten.lt.Scalar(iy, height)))
    index = aten.where.ScalarOther(inside, aten.add.Tensor(aten.mul.Tensor(iy, width), ix), 0)  # (N, P)
    n, c = input_flat.shape[:2]
    expanded = aten.expand.default(aten.unsqueeze.default(index, 1), [n, c, index.shape[1]])
    value = aten.where.ScalarOther(aten.unsqueeze.default(inside, 1), aten.gather.default(input_flat, 2, expanded), 0.0)
    return expanded, aten.unsqueeze.default(inside, 1), value


def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    if not _supported(grad_output, input, grid, interpolation_mode):
        return NotImplemented
    n, c, height, width = input.shape
    points = grid.shape[1] * grid.shape[2]
    x, gx_mult = _source(aten.select.int(grid, 3, 0), width, padding_mode, align_corners)
    y, gy_mult = _source(aten.select.int(grid, 3, 1), height, padding_mode, align_corners)
    x, y = aten.reshape.default(x, [n, points]), aten.reshape.default(y, [n, points])
    g = aten.reshape.default(grad_output, [n, c, points])
    input_flat = aten.reshape.default(input, [n, c, height * width])
    zeros = aten.zeros_like.default(input_flat)
    if interpolation_mode == _NEAREST:
        ix = aten._to_copy.default(aten.round.default(x), dtype=torch.int64)
        iy = aten._to_copy.default(aten.round.default(y), dtype=torch.int64)
        index, inside, _ = _corner(input_flat, ix, iy, height, width)
        grad_input = aten.scatter_add.default(zeros, 2, index, aten.where.ScalarOther(inside, g, 0.0))
        return aten.reshape.default(grad_input, list(input.shape)), aten.zeros_like.default(grid)
    x_w, y_n = aten.floor.default(x), aten.floor.default(y)
    w, n_ = aten.sub.Tensor(x, x_w), aten.sub.Tensor(y, y_n)
    e, s = aten.rsub.Scalar(w, 1), aten.rsub.Scalar(n_, 1)
    ix_w, iy_n = aten._to_copy.default(x_w, dtype=torch.int64), aten._to_copy.default(y_n, dtype=torch.int64)
    ix_e, iy_s = aten.add.Tensor(ix_w, 1), aten.add.Tensor(iy_n, 1)
    corners = [_corner(input_flat, ix, iy, height, width) for ix, iy in
               ((ix_w, iy_n), (ix_e, iy_n), (ix_w, iy_s), (ix_e, iy_s))]  # nw, ne, sw, se
    weights = [aten.mul.Tensor(s, e), aten.mul.Tensor(s, w), aten.mul.Tensor(n_, e), aten.mul.Tensor(n_, w)]
    grad_input = zeros
    for (index, inside, _), weight in zip(corners, weights):
        share = aten.mul.Tensor(g, aten.unsqueeze.default(weight, 1))
        grad_input = aten.scatter_add.default(grad_input, 2, index, aten.where.ScalarOther(inside, share, 0.0))
    nw, ne, sw, se = (value for _, _, value in corners)
    s1, n1, e1, w1 = (aten.unsqueeze.default(t, 1) for t in (s, n_, e, w))
    gx = aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(ne, nw), s1), aten.mul.Tensor(aten.sub.Tensor(se, sw), n1))
    gy = aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(sw, nw), e1), aten.mul.Tensor(aten.sub.Tensor(se, ne), w1))
    gx = aten.sum.dim_IntList(aten.mul.Tensor(gx, g), [1])
    gy = aten.sum.dim_IntList(aten.mul.Tensor(gy, g), [1])
    grid_shape = list(grid.shape[:3])
    grad_grid = aten.stack.default([aten.mul.Tensor(aten.reshape.default(gx, grid_shape), gx_mult),
                                    aten.mul.Tensor(aten.reshape.default(gy, grid_shape), gy_mult)], -1)
    return aten.reshape.default(grad_input, list(input.shape)), grad_grid


def decomposition() -> dict:
    """The decomposition-table entry (NOTE [grid_sample gradients as scatter-adds])."""
    return {aten.grid_sampler_2d_backward.default: grid_sampler_2d_backward}
