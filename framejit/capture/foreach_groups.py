"""torch's grouping of tensor lists by device and dtype, traced as the Python it stands for.

NOTE [Gradient clipping]: `torch.nn.utils.clip_grad_norm_` (and `clip_grad_value_`, `get_total_norm`,
`clip_grads_with_norm_`) is Python over parameters and their `.grad`. It used to be a graph op (a torch
function, run once on fake tensors while tracing): the fakes of parameters carry no `.grad`, so the
clipping saw no gradients and scaled nothing; the compiled training step returned the right norm and left
the gradients unclipped. torch.nn.utils is now inlined like torch.optim (builder._INLINED_TORCH_PACKAGES),
so `p.grad` is read through its source and `torch._foreach_mul_` writes the real gradients.

Its foreach path groups tensors with `torch._C._group_tensors_by_device_and_dtype(tensorlistlist,
with_indices)`, which returns {(device, dtype): ([one list per input list], indices)} holding the same
tensor objects (None entries kept; indices only `with_indices`). A dict of lists cannot be a graph op's
result, so `group_by_device_and_dtype` below computes it from the tensors' devices and dtypes (guarded
with every tensor input). Only one group is modelled: with several, the C++ function orders them by its
hash map, which code that sums over the groups would observe (float addition order), so that is a graph
break and torch's own function runs.
"""
from __future__ import annotations

import torch

from .modules import graph_break


def group_by_device_and_dtype(tensorlistlist, with_indices=False):
    first = tensorlistlist[0]
    if not first:
        return {}
    keys = {(t.device, t.dtype) for t in first}
    if len(keys) != 1:
        graph_break("grouping tensors of several devices or dtypes (the C++ function's group order)")
    lists = [list(tensors) for tensors in tensorlistlist]
    return {keys.pop(): (lists, list(range(len(first))) if with_indices else [])}


def _register_handlers() -> None:
    from .builtins import BUILTIN_HANDLERS
    from .values import UserFunctionValue
    from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype as python_wrapper

    def handler(tx, args, kwargs):
        return tx.inline(UserFunctionValue(group_by_device_and_dtype), args, kwargs)
    # the C function, and torch's Python function around it (under its `@no_grad()`, which has no effect here)
    BUILTIN_HANDLERS[torch._C._group_tensors_by_device_and_dtype] = handler
    BUILTIN_HANDLERS[python_wrapper.__wrapped__] = handler


_register_handlers()
