"""torch's grouping of tensor lists by device and dtype, traced as the Python it stands for.

NOTE [Gradient clipping]: `torch.nn.utils.clip_grad_norm_` (and `clip_grad_value_`, `get_total_norm`,
`clip_grads_with_norm_`) is Python over parameters and their `.grad`. It used to be a graph op (a torch
function, run once on fake tensors while tracing): the fakes of parameters carry no `.grad`, so the
clipping saw no gradients and scaled nothing; the compiled training step returned the right norm and left
the gradients unclipped. torch.nn.utils is now inlined like torch.optim (builder._INLINED_TORCH_PACKAGES),
so `p.grad` is read through its source and `torch._foreach_mul_` writes the real gradients.

Its foreach path groups tensors with `torch._C._group_tensors_by_device_and_dtype(tensorlistlist,
with_indices)`, which returns {(device, dtype): ([one list per input list], indices)} holding the same
tensor objects (None entries kept; an empty list stays empty; indices only `with_indices`). A dict of lists
cannot be a graph op's result, so `_group` below builds it from the tensors' devices and dtypes (guarded with
every tensor input).

NOTE [Foreach groups in the C++ order]: the C++ function orders its groups by its hash map, and code that
iterates over them observes that order (float addition order of sums over the groups, the order of an
optimizer's per-group kernels). With tensors of several devices or dtypes (EMA over float parameters
and BatchNorm's int64 `num_batches_tracked` in AveragedModel(use_buffers=True); mixed bf16/fp32 optimizers)
this was a graph break, and the resumed Python stepped the caller's per-tensor loop (12 graphs per call where
stock torch.compile made 2). The order of the C++ function's groups, and which indices each holds, depend
only on the sequence of (device, dtype) keys of the first list, which the trace reads (and guards with every
tensor): it is computed at trace time by the C++ function itself, called on empty stand-in tensors with that
key sequence (`_cpp_groups`), and the groups are built from the real tensors in that order.
"""
from __future__ import annotations

import functools

import torch

from .breaks import BreakKind, Unsupported


def first_keys(tensorlistlist):
    """The (device, dtype) of each tensor of the first list (read in the trace: guarded)."""
    return [(t.device, t.dtype) for t in tensorlistlist[0]]


def build_groups(tensorlistlist, plan, with_indices):
    """{(device, dtype): ([one list per input list], indices)} in the order `plan` gives."""
    return {key: ([[tensors[i] for i in indices] if tensors else [] for tensors in tensorlistlist],
                  list(indices) if with_indices else []) for key, indices in plan}


@functools.lru_cache(maxsize=256)
def _cpp_groups(keys: tuple) -> tuple:
    """((key, indices), ...) as torch._C._group_tensors_by_device_and_dtype orders the groups of tensors with
    this sequence of (device, dtype) keys (NOTE [Foreach groups in the C++ order])."""
    stand_ins = [torch.empty(0, device=device, dtype=dtype) for device, dtype in keys]
    grouped = torch._C._group_tensors_by_device_and_dtype([stand_ins], True)
    return tuple((key, tuple(indices)) for key, (_, indices) in grouped.items())


def _group(tx, args, kwargs):
    from .values import ConstantValue, UserFunctionValue
    bound = dict(zip(("tensorlistlist", "with_indices"), args), **kwargs)
    if set(bound) - {"tensorlistlist", "with_indices"} or "tensorlistlist" not in bound:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch._C._group_tensors_by_device_and_dtype with these arguments")
    lists, with_indices = bound["tensorlistlist"], bound.get("with_indices", ConstantValue(False))
    keys = tx.inline(UserFunctionValue(first_keys), [lists], {})
    if not keys.is_constant() or not with_indices.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "grouping tensors whose devices or dtypes are not known")
    key_tuple = tuple(tuple(k) for k in keys.as_constant())
    if not key_tuple:
        return tx.inline(UserFunctionValue(build_groups), [lists, ConstantValue(()), with_indices], {})
    try:
        plan = _cpp_groups(key_tuple)
    except Exception as e:  # a device the stand-ins cannot be made on: torch's own function runs
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"grouping tensors by device and dtype ({type(e).__name__})")
    return tx.inline(UserFunctionValue(build_groups), [lists, ConstantValue(plan), with_indices], {})


def _register_handlers() -> None:
    from .builtins import BUILTIN_HANDLERS
    from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype as python_wrapper

    handler = _group
    # the C function, and torch's Python function around it (under its `@no_grad()`, which has no effect here)
    BUILTIN_HANDLERS[torch._C._group_tensors_by_device_and_dtype] = handler
    BUILTIN_HANDLERS[python_wrapper.__wrapped__] = handler


_register_handlers()
