"""Ints that shape a kernel are specialised (NOTE [Ints that shape a kernel stay static]).

NOTE [Ints that shape a kernel stay static]: a convolution's stride, padding, dilation and groups, a
pooling window's kernel size, stride and padding, unfold/fold's window and pixel_shuffle's factor pick the
kernel itself, not the size of the data it runs on. An int that became symbolic (NOTE [Dynamic ints]:
it changed between calls, or it differs between modules of one class that share their compiled code,
NOTE [Compiled modules of one class share their code] in api.py) reached these ops as a SymInt: the
graph then held `convolution(x, w, b, [s0, s0], ...)`, which ONNX cannot express (its `strides`,
`pads`, `dilations` and `group` are attributes), so on onnxrt every such convolution ran in eager torch
("node convolution runs in eager torch"), and a Triton or ORT kernel for a symbolic window is a slow
generic one at best. Stock torch.compile keeps ints of nn.Modules static for the same reason.
So the int arguments of these ops are specialised when the call is recorded: each symbol is guarded
equal to its value (a line of the guard function, SHAPE_ENV in the recompile log) and the node gets the
plain int. Blocks with strides 1 and 2 then have one entry each, with static kernels; a block whose sizes
change still serves every size from one entry (only the window ints are pinned, not the tensors' sizes).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .values import ConstantValue, SequenceValue, SymNodeValue

_NAMES = {
    torch: ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
            "convolution", "_convolution", "conv_tbc", "max_pool1d", "max_pool2d", "max_pool3d",
            "max_pool1d_with_indices", "avg_pool1d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
            "native_channel_shuffle", "quantized_max_pool2d"),
    torch._C._nn: ("avg_pool2d", "avg_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices", "im2col",
                   "col2im", "mkldnn_reorder_conv2d_weight", "slow_conv3d", "thnn_conv2d"),
    F: ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "avg_pool1d",
        "avg_pool2d", "avg_pool3d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle"),
}
_TARGETS = {getattr(module, name) for module, names in _NAMES.items() for name in names if hasattr(module, name)}


def _is_window_op(target: Any) -> bool:
    try:
        return target in _TARGETS
    except TypeError:  # an unhashable target
        return False


def _static(value: Any) -> Any:
    if isinstance(value, SymNodeValue) and value.python_type() is int:
        return ConstantValue(value.as_constant())  # guarded by the shape env
    if isinstance(value, SequenceValue) and any(isinstance(i, SymNodeValue) for i in value.items) and \
            value.is_constant():
        return ConstantValue(value.as_constant())
    if type(value) in (tuple, list):
        return type(value)(_static(v) for v in value)
    return value


def static_kernel_ints(kind: str, target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """(args, kwargs) of the call with the symbolic ints of a kernel-shaping op specialised."""
    if kind != "call_function" or not _is_window_op(target):
        return args, kwargs
    if not any(_has_symbol(v) for v in (*args, *kwargs.values())):
        return args, kwargs
    return tuple(_static(a) for a in args), {k: _static(v) for k, v in kwargs.items()}


def _has_symbol(value: Any) -> bool:
    if isinstance(value, SymNodeValue):
        return True
    if isinstance(value, SequenceValue):
        return any(isinstance(i, SymNodeValue) for i in value.items)
    if type(value) in (tuple, list):
        return any(_has_symbol(v) for v in value)
    return False
