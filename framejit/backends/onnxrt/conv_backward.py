"""`aten.convolution_backward` as forward convolutions, for ONNX: the onnxrt backend's training graphs.

torchlib has no translation of `convolution_backward`, so a backward graph of a conv net ran every conv's
gradient in torch between ORT parts (the zoo's cnn: 5 ORT parts around 7 torch ops). `decomposition()`
returns a function for the decomposition table of onnxrt joints (backends/joint.py): while AOT autograd
traces the joint, each `convolution_backward` becomes ops torchlib translates (NOTE [Convolution
gradients as convolutions]).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

# NOTE [Convolution gradients as convolutions]
# For y = conv(x, w, b; stride s, padding p, dilation d, groups g), per spatial dim:
# - grad_input is the transposed convolution of grad_y with the same w, s, p, d, g (ONNX ConvTranspose);
#   `output_padding` = (in + 2p - d(k-1) - 1) mod s restores the rows a strided conv never read (< s, as
#   ONNX and torch require).
# - grad_weight[o, c, i] = sum over batch n and output positions j of grad_y[n, o, j] * x[n, c', j*s + i*d
#   - p]: a convolution over the batch, with x's channels as its batch and grad_y's channels as its
#   filters (stride d, dilation s, padding p). Groups: x is regrouped to [C_in/g, g*N, ...] (batch = a
#   channel within its group, channels = (group, sample)) and grad_y to [g*C_out/g, N, ...], and the conv
#   runs with groups=g, so each group's filters see only their own group's channels. Its spatial size is
#   at least the kernel's (more where the strided forward skipped trailing positions): the first k are
#   the gradient. The result [C_in/g, C_out, k...] is transposed to w's [C_out, C_in/g, k...], contiguous.
# - grad_bias is grad_y summed over the batch and spatial dims.
# - A transposed convolution y = conv_transpose(x, w) is the adjoint of the forward convolution z =
#   conv(y, w) with the same stride, padding, dilation and groups (w: [C_in, C_out/g, k...] read as that
#   conv's [C_out, C_in/g, k...]). So its grad_input is that forward convolution of grad_y (its size is
#   x's; an output_padding of at least the stride, allowed when the dilation is larger, leaves trailing
#   positions that are cut), and its grad_weight is that convolution's weight gradient with grad_y as the
#   input and x as the output gradient (the same regrouped convolution as above).
# Only the outputs in `output_mask` are computed, as the op does. Sizes that are not plain ints keep the
# op (it then runs in torch). Tests compare every output with eager's
# `convolution_backward` for strides, paddings, dilations, groups, 1-3 spatial dims and no bias
# (tests/backends/test_training_conv.py).


def _per_dim(value, dims: int) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * dims if len(values) == 1 else values


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    dims = weight.dim() - 2
    sizes = [*input.shape, *weight.shape, *grad_output.shape]
    if dims < 1 or input.dim() != weight.dim() or not all(type(s) is int for s in sizes):
        return NotImplemented
    stride, padding, dilation = (_per_dim(v, dims) for v in (stride, padding, dilation))
    kernel = list(weight.shape[2:])
    if transposed:
        return _transposed_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        extra = [(input.shape[2 + i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) % stride[i]
                 for i in range(dims)]
        grad_input = aten.convolution.default(grad_output, weight, None, stride, padding, dilation, True, extra,
                                              groups)
    if output_mask[1]:
        grad_weight = _grad_weight(grad_output, input, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_bias = aten.sum.dim_IntList(grad_output, [0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def _transposed_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
    """convolution_backward of a transposed convolution (NOTE [Convolution gradients as convolutions])."""
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = aten.convolution.default(grad_output, weight, None, stride, padding, dilation, False,
                                              [0] * len(stride), groups)
        for i, size in enumerate(input.shape[2:]):  # output_padding >= stride: trailing positions
            if grad_input.shape[2 + i] != size:
                grad_input = aten.slice.Tensor(grad_input, 2 + i, 0, size)
    if output_mask[1]:
        grad_weight = _grad_weight(input, grad_output, list(weight.shape[2:]), stride, padding, dilation, groups)
    if output_mask[2]:
        grad_bias = aten.sum.dim_IntList(grad_output, [0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def _grad_weight(grad_output, input, kernel, stride, padding, dilation, groups):
    batch, channels_in, *space = input.shape
    channels_out, out_space = grad_output.shape[1], list(grad_output.shape[2:])
    dims = len(space)
    rest = list(range(3, 3 + dims))
    # x: [N, g, Cin/g, *S] -> [Cin/g, g, N, *S] -> [Cin/g, g*N, *S]
    x = aten.permute.default(aten.reshape.default(input, [batch, groups, channels_in // groups, *space]),
                             [2, 1, 0, *rest])
    x = aten.reshape.default(x, [channels_in // groups, groups * batch, *space])
    # filters: [N, g, Cout/g, *O] -> [g, Cout/g, N, *O] -> [Cout, N, *O]
    f = aten.permute.default(aten.reshape.default(grad_output, [batch, groups, channels_out // groups, *out_space]),
                             [1, 2, 0, *rest])
    f = aten.reshape.default(f, [channels_out, batch, *out_space])
    full = aten.convolution.default(x, f, None, dilation, padding, stride, False, [0] * dims, groups)
    for i, k in enumerate(kernel):  # [Cin/g, Cout, >= k...]: the first k positions
        if full.shape[2 + i] != k:
            full = aten.slice.Tensor(full, 2 + i, 0, k)
    return aten.clone.default(aten.transpose.int(full, 0, 1), memory_format=torch.contiguous_format)


def decomposition() -> dict:
    """The decomposition-table entry (NOTE [Convolution gradients as convolutions])."""
    return {aten.convolution_backward.default: convolution_backward}
