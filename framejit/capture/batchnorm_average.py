"""A traceable `_BatchNorm.forward` for the cumulative moving average (`momentum=None`).

NOTE [Cumulative BatchNorm momentum]: with `momentum=None`, `_BatchNorm.forward` in training computes
`exponential_average_factor = 1.0 / float(self.num_batches_tracked)`: reading a buffer's value is a
data-dependent break, and the factor handed to `F.batch_norm` changed every call, so the graph after the
break recompiled once with the float as an input and then ran eagerly on onnxrt and triton (a float that
reaches a Scalar argument of an op cannot be an input of a lowered program: NOTE [Float inputs as tensors]).
The stand-in (library_substitutes.library_substitute, found by the identity of torch's function object, so
that a user's patch of `_BatchNorm.forward`, even one made with `functools.wraps`, runs as written) keeps the
factor a tensor and reproduces eager's CPU kernel (`batch_norm_cpu_update_stats_template`, contiguous
inputs) bit for bit:
- `F.batch_norm` runs with scratch running statistics of the statistics' dtype filled with -0.0 and momentum
  1.0: the output is eager's (training does not read the running statistics), ATen checks the dtypes as for
  the real ones, and the scratch buffers come back holding exactly the kernel's batch mean and unbiased
  variance (`1 * s + 0 * -0.0 == s` in every rounding step).
- The blend is the kernel's arithmetic: `m = param_t(1.0 / nbt)`, `mean' = m * bm + (1 - m) * rm` with each
  step rounded to the statistics' dtype, `var' = acc(m) * uv + acc((1 - m) * rv)` in the accumulation type
  (double for float/double inputs, float for bfloat16/half inputs) rounded once to the statistics' dtype.
  Checked against eager over 300 random cases for float32, float64, bfloat16 and bf16/fp16 inputs with
  float32 statistics, contiguous and channels-last.
Cases the kernel computes otherwise, or where eager raises, run the original code (its `float(nbt)` is the
usual data-dependent break, never a different value): an empty batch (ATen returns before touching the
statistics), an input that is not contiguous in any memory format (the kernel's other branch blends in
double) and half statistics (the kernel's half rounding is not reproduced). Parameters or statistics whose
dtype is neither the input's nor float32 beside a reduced-precision input (eager's kernel raises) run the
original in every configuration, and raise as eager does on every backend (onnxrt and triton run such
graphs eagerly: NOTE [Dtypes eager's batch norm rejects] in backends/eager_raises.py).
A num_batches_tracked of -1 (eager: ZeroDivisionError after the increment, the count 0, statistics untouched)
is an entry check (NOTE [Entry checks]): the graph checks the count before any of its ops and a failing check
reruns the call eagerly, where torch's own code raises; a count the graph wrote before (the same module called
twice in one graph) cannot be checked there and runs the original (its `float(nbt)` is a break). Every other configuration
(a momentum, eval, untracked or missing statistics) runs a copy of the original function (a copy, so that
it is inlined, not substituted).
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch.nn.modules import batchnorm as _batchnorm_module
from torch.nn.modules.batchnorm import _BatchNorm

from ..grad_mode import grad_mode
from .entry_checks import entry_check


def torch_own_forward(fn) -> bool:
    """fn is torch's `_BatchNorm.forward` (its code, from torch's file), not a user's patch of it."""
    code = getattr(fn, "__code__", None)
    return (code is not None and code.co_filename == _batchnorm_module.__file__ and code.co_name == "forward"
            and getattr(code, "co_qualname", "_BatchNorm.forward") == "_BatchNorm.forward")


def _find_original():
    """torch's function, also when framejit is imported after a user patched the class (with wraps)."""
    fn = _BatchNorm.__dict__.get("forward")
    while fn is not None and not torch_own_forward(fn):
        fn = getattr(fn, "__wrapped__", None)
    return fn


_ORIGINAL = _find_original()  # None: torch's function is out of reach, and no stand-in is registered
if _ORIGINAL is None:
    _ORIGINAL = _BatchNorm.forward  # only copied below; library_substitutes registers nothing
    _REGISTERED = False
else:
    _REGISTERED = True
original_forward = types.FunctionType(_ORIGINAL.__code__, _ORIGINAL.__globals__, "forward",
                                      _ORIGINAL.__defaults__, _ORIGINAL.__closure__)
original_forward.__qualname__ = "original_forward"
original_forward.__module__ = __name__

_REDUCED = (torch.bfloat16, torch.float16)
_EXACT_STATS = (torch.float32, torch.float64, torch.bfloat16)
_LAYOUTS = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)


def batch_norm_forward(self, input):
    if not _dtypes_accepted(self, input):
        return original_forward(self, input)  # eager's kernel raises
    if not (self.momentum is None and self.training and self.track_running_stats
            and self.num_batches_tracked is not None and self.running_mean is not None
            and self.running_var is not None and _kernel_reproduced(self, input)):
        return original_forward(self, input)
    self._check_input_dim(input)
    if not entry_check(self.num_batches_tracked != -1):  # NOTE [Entry checks]: eager divides by 0 below
        return original_forward(self, input)
    self.num_batches_tracked.add_(1)
    stats = torch.full_like(self.running_mean, -0.0), torch.full_like(self.running_var, -0.0)
    out = F.batch_norm(input, stats[0], stats[1], self.weight, self.bias, True, 1.0, self.eps)
    with grad_mode(False):
        _blend_running_statistics(self, input.dtype, stats[0], stats[1])
    return out


def _dtypes_accepted(self, input) -> bool:
    """The dtypes that eager's CPU kernel accepts: all the input's, or float32 beside a reduced input."""
    params = {t.dtype for t in (self.weight, self.bias, self.running_mean, self.running_var)
              if isinstance(t, torch.Tensor)}
    return params <= {input.dtype} or (input.dtype in _REDUCED and params == {torch.float32})


def _kernel_reproduced(self, input) -> bool:
    """The configurations whose update `_blend_running_statistics` computes exactly as eager's kernel."""
    if self.running_mean.dtype not in _EXACT_STATS:
        return False
    if input.dim() < 2 or input.numel() == 0:
        return False
    return any(input.is_contiguous(memory_format=layout) for layout in _LAYOUTS
               if layout == torch.contiguous_format or input.dim() == (4 if layout == torch.channels_last else 5))


def _blend_running_statistics(self, input_dtype, batch_mean, unbiased_var):
    stats = self.running_mean.dtype
    acc = torch.float64 if input_dtype in (torch.float32, torch.float64) else torch.float32
    factor = (1.0 / self.num_batches_tracked.double()).to(stats)
    keep = 1 - factor
    new_mean = factor * batch_mean + keep * self.running_mean
    new_var = factor.to(acc) * unbiased_var.to(acc) + (keep * self.running_var).to(acc)
    undefined = self.num_batches_tracked == 0  # eager: ZeroDivisionError, statistics untouched
    self.running_mean.copy_(torch.where(undefined, self.running_mean, new_mean))
    self.running_var.copy_(torch.where(undefined, self.running_var, new_var.to(stats)))
