"""`torch.set_default_device(d)` traced through: factory calls get the device its mode would give them.

NOTE [Default device mode]: `torch.set_default_device(d)` (and `with torch.device(d):`) puts a
`torch.utils._device.DeviceContext` on the torch function mode stack. All it does is give the torch
factories of `torch.utils._device._device_constructors()` (`torch.zeros`, `torch.tensor`, `torch.arange`, ...)
`device=d` when their `device` keyword is missing or None; every other call passes through it unchanged.
A frame called with that mode as the only mode (no dispatch mode) is traced, not run eagerly (NOTE [Torch
function and dispatch modes] in convert.py): the trace runs with the mode popped (so framejit's own tensors
and the fake tensors are not moved), each such factory node gets the `device=` keyword the mode would have
added, so the graph means the same under any backend, even one that never calls the mode, and
`torch.get_default_device()` answers `d`. The entry guards that the stack is still one DeviceContext of that
device (`sole_device_mode_device() == d`, beside the stack-length guards); under any other mode stack the
frame still runs eagerly.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch


def _device_context() -> type:
    from torch.utils._device import DeviceContext
    return DeviceContext


def sole_device_mode_device() -> torch.device | None:
    """The device of the DeviceContext when it is the only torch function mode and no dispatch mode is
    active; None otherwise. Read by the guards of frames traced under it."""
    if torch._C._len_torch_function_stack() != 1 or torch._C._len_torch_dispatch_stack():
        return None
    from torch.overrides import _get_current_function_mode_stack
    mode = _get_current_function_mode_stack()[0]
    return mode.device if type(mode) is _device_context() else None


@contextlib.contextmanager
def traced_without_mode(device: torch.device | None):
    """Pop the DeviceContext for the duration of a trace (a no-op when there is none)."""
    if device is None:
        yield
        return
    from torch.overrides import _pop_mode_temporarily
    with _pop_mode_temporarily():
        yield


def _constructors() -> set:
    from torch.utils._device import _device_constructors
    return _device_constructors()


def with_device(device: torch.device, target: Any, kwargs: dict) -> dict:
    """`kwargs` of a call of `target` as the DeviceContext would pass them on."""
    try:
        if target not in _constructors():
            return kwargs
    except TypeError:  # an unhashable target
        return kwargs
    given = kwargs.get("device")
    if given is not None and not (given.is_constant() and given.as_constant() is None):
        return kwargs
    from .values import ConstantValue
    return {**kwargs, "device": ConstantValue(device)}


def default_device(device: torch.device) -> torch.device:
    """What `torch.get_default_device()` returns under the mode (torch fills in the index of its type)."""
    if device.index is not None:
        return device
    return torch.tensor([], device=device).device


def query_under_mode(out, fn: Any, args: list) -> tuple[bool, Any]:
    """`(True, answer)` for a state query whose answer under the popped mode is not the caller's:
    `torch.get_default_device()`, whether a function mode is enabled and how many there are; `(False, None)`
    otherwise. The mode is the caller's or a device block's the trace is in (NOTE [Device blocks])."""
    device = out.default_device
    if device is None or args:
        return False, None
    if fn is getattr(torch, "get_default_device", None):
        return True, default_device(device)
    if fn is torch._C._is_torch_function_mode_enabled:
        return True, True
    if fn is torch._C._len_torch_function_stack:  # the popped DeviceContext counts (there is only ever one)
        return True, torch._C._len_torch_function_stack() + 1
    return False, None
