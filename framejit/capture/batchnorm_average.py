"""A traceable `_BatchNorm.forward` for the cumulative moving average (`momentum=None`).

NOTE [Cumulative BatchNorm momentum]: with `momentum=None`, `_BatchNorm.forward` in training computes
`exponential_average_factor = 1.0 / float(self.num_batches_tracked)`: reading a buffer's value is a
data-dependent break, and the factor handed to `F.batch_norm` changed every call, so the graph after the
break recompiled once with the float as an input and then ran eagerly on onnxrt and triton (a float that
reaches a Scalar argument of an op cannot be an input of a lowered program: NOTE [Float inputs as tensors]).
The stand-in (library_substitutes.library_substitute, found by the original's module and qualified name)
keeps the factor a tensor: it normalises with the batch statistics as eager's kernel does in training
(`F.batch_norm` without running statistics: the same output and the same gradients), and updates the running
statistics under no_grad with eager's CPU formula, `factor * batch + (1 - factor) * running`, in float64
(the kernel's accumulation type for float and half inputs): the batch mean rounded to the statistics' dtype,
the unbiased variance `var_sum / (n - 1)` from the rounded sum of squared deviations, `factor =
1.0 / num_batches_tracked` in double as `1.0 / float(...)` is. Every other configuration (a momentum,
eval, untracked or missing statistics) runs a copy of the original function (a copy, so that it is inlined
instead of substituted again).
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

_ORIGINAL = _BatchNorm.forward
original_forward = types.FunctionType(_ORIGINAL.__code__, _ORIGINAL.__globals__, "forward",
                                      _ORIGINAL.__defaults__, _ORIGINAL.__closure__)
original_forward.__qualname__ = "original_forward"
original_forward.__module__ = __name__


def batch_norm_forward(self, input):
    if not (self.momentum is None and self.training and self.track_running_stats
            and self.num_batches_tracked is not None and self.running_mean is not None
            and self.running_var is not None):
        return original_forward(self, input)
    self._check_input_dim(input)
    self.num_batches_tracked.add_(1)
    out = F.batch_norm(input, None, None, self.weight, self.bias, True, 0.0, self.eps)
    with torch.no_grad():
        _update_running_statistics(self, input.detach())
    return out


def _update_running_statistics(self, input):
    dims = [d for d in range(input.dim()) if d != 1]
    count = input.numel() // input.size(1)
    wide = input.double()
    mean = wide.mean(dims)
    shape = [1, -1] + [1] * (input.dim() - 2)
    var_sum = (wide - mean.reshape(shape)).square().sum(dims)
    factor = 1.0 / self.num_batches_tracked.double()
    keep = 1 - factor
    stat_dtype = self.running_mean.dtype
    batch_mean = mean.to(stat_dtype).double()
    unbiased = var_sum.to(stat_dtype).double() / (count - 1)
    self.running_mean.copy_(factor * batch_mean + keep * self.running_mean.double())
    self.running_var.copy_(factor * unbiased + keep * self.running_var.double())
