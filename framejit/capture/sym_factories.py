"""Factories whose length is a symbolic int, kept symbolic through an opaque operator.

NOTE [Linspace of a symbolic length]: `torch.linspace(0, 1, x.size(0))` takes its step count as a C++ int,
so fake propagation specialises it: one graph per size (6 graphs over 6 sizes, stock torch.compile the same).
torch._refs.linspace would stay symbolic but is not eager's kernel bit for bit (the CPU kernel computes
vectors as `base + k * step` from a base per vector, which depends on the vector width). So such a call is
the operator `framejit::linspace` (a torch.library custom op): its kernel is torch.linspace itself (eager's
values exactly, computed at run time for the call's length), its fake kernel an empty tensor of the
symbolic length and the dtype torch.linspace gives (the default dtype where none is given: start and end
are real numbers here). Backends see an opaque op, as for any custom op: the eager backend runs it; a
backend that cannot lower it runs it in torch. Taken only for constant real start and end (ints below
2**53, exact as floats), an optional dtype and device, and no other keyword (`out=`, `requires_grad=True`,
a layout: the call as before). Persisted graphs name the op (NOTE [Persisted operator targets],
frame_cache.py); this module is imported with the capture package, so it is registered before a cached
graph is loaded.
"""
from __future__ import annotations

from typing import Optional

import torch

from .values import ConstantValue, SymNodeValue, Value


@torch.library.custom_op("framejit::linspace", mutates_args=())
def linspace(start: float, end: float, steps: int, dtype: Optional[torch.dtype],
             device: Optional[torch.device]) -> torch.Tensor:
    return torch.linspace(start, end, steps, dtype=dtype, device=device)


@linspace.register_fake
def _linspace_fake(start, end, steps, dtype, device):
    torch._check(steps >= 0, lambda: "number of steps must be non-negative")
    return torch.empty(steps, dtype=dtype if dtype is not None else torch._C.get_default_dtype(), device=device)


_NAMES = ("start", "end", "steps")
_EXACT = 2 ** 53


def _real(value: Value) -> float | None:
    """A constant int or float (not a bool) as the float the op takes, or None."""
    if not isinstance(value, ConstantValue) or type(value.value) not in (int, float):
        return None
    if type(value.value) is int and abs(value.value) >= _EXACT:
        return None
    return float(value.value)


def linspace_of_symbolic_steps(tx, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`torch.linspace(start, end, steps)` with a symbolic `steps` as `framejit::linspace` (NOTE [Linspace of
    a symbolic length]); None where the call is left as it is."""
    if len(args) > 3 or any(name in kwargs for name in _NAMES[:len(args)]):
        return None
    bound = dict(zip(_NAMES, args), **{k: v for k, v in kwargs.items() if k in _NAMES})
    options = {k: v for k, v in kwargs.items() if k not in _NAMES}
    steps = bound.get("steps")
    if len(bound) != 3 or not isinstance(steps, SymNodeValue) or type(steps.sym) is not torch.SymInt:
        return None
    start, end = _real(bound["start"]), _real(bound["end"])
    if start is None or end is None or not _plain_options(options):
        return None
    dtype, device = options.get("dtype"), options.get("device")
    dtype = None if dtype is None else dtype.value
    if dtype is not None and (not isinstance(dtype, torch.dtype) or dtype.is_complex):
        return None
    device = None if device is None else device.value
    if device is not None:
        if not isinstance(device, (str, int, torch.device)):
            return None
        device = torch.device(device)
    return tx.output.call("call_function", torch.ops.framejit.linspace.default,
                          (ConstantValue(start), ConstantValue(end), steps, ConstantValue(dtype),
                           ConstantValue(device)), {})


def _plain_options(options: dict[str, Value]) -> bool:
    if not set(options) <= {"dtype", "device", "layout", "requires_grad"}:
        return False
    if not all(isinstance(v, ConstantValue) for v in options.values()):
        return False
    layout = options.get("layout")
    grad = options.get("requires_grad")
    return (layout is None or layout.value in (None, torch.strided)) and (grad is None or grad.value is False)
