"""Grad mode as framejit itself reads and switches it: through torch._C, never through `torch.is_grad_enabled`,
`torch.no_grad` or `torch.set_grad_enabled`, which a user may monkeypatch.

NOTE [Grad mode read from torch._C]: the grad-mode guard of every entry, the mode a trace records, and every
switch framejit makes around fake runs and backend calls read the thread's real grad mode. A program may
replace `torch.is_grad_enabled` (a counter, a lambda answering a constant to steer library code): the guard
bound the patch (`is_grad_enabled() is True` held under a real no_grad, the entry traced with grad on ran:
eager's result required no grad, framejit's did), the trace recorded the patch's answer, and torch's own
context managers restore the mode the patch answers on exit (torch.set_grad_enabled's `prev`), so a trace made
under the user's no_grad turned grad mode on for the rest of the call (/tmp/hsound7/g1.py). User code that calls
`torch.is_grad_enabled()` still calls whatever the name holds, as in eager.
"""
from __future__ import annotations

import torch

is_enabled = torch._C.is_grad_enabled


class grad_mode:
    """`with grad_mode(b):` like `with torch.set_grad_enabled(b):`, switched when entered, restored on exit."""
    __slots__ = ("mode", "prev")

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self.prev = torch._C.is_grad_enabled()
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc) -> None:
        torch._C._set_grad_enabled(self.prev)
