"""Graphs called while the caller's saved-tensors hooks are in force run as their own code.

NOTE [Saved-tensors hooks at the call]: `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` entered by
the caller applies to every tensor eager's autograd saves for the backward. A backend's training graph
(AOT autograd's joint: onnxrt, triton) saves other tensors (a recomputed or fused set), so a hook that
changes values (pack = t * 2) gave other gradients than eager's (stock torch.compile does the same). A
graph that records autograd (an input requires grad, and grad mode is on at entry or enabled inside) and
that the backend turned into something other than its own code checks at each call whether such hooks are
in force: then it runs as its own Python code (the graph module's forward, bound before the backend saw
it), where autograd saves what eager saves and the hooks see it (and checkpointed regions save what eager's
checkpoint saves); else the backend's callable runs. A check at the call, not a guard: a guard would
retrace under the hooks, and tracing runs them on fake tensors. Entries loaded from the frame cache are
wrapped the same way (frame_cache.restore). The same check sends a call with an argument that retains its
gradient to the graph's own code (NOTE [Retained gradients of inputs written in place] in tensor_hooks.py).

Main type: HookAware (`.compiled` is what the backend returned, as for KeptVersions: the persisted
artifact is of that object, input_versions.unwrapped).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

_top_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks


class HookAware:
    """The backend's `compiled`, or the graph's own `eager_forward` while saved-tensors hooks are in force."""

    __slots__ = ("compiled", "eager_forward")

    def __init__(self, compiled: Callable, eager_forward: Callable) -> None:
        self.compiled, self.eager_forward = compiled, eager_forward

    def __call__(self, *args: Any) -> Any:
        if _top_saved_hooks(False) is not None:
            return self.eager_forward(*args)
        for arg in args:  # NOTE [Retained gradients of inputs written in place] in tensor_hooks.py
            if type(arg) is torch.Tensor and arg.retains_grad:
                return self.eager_forward(*args)
        return self.compiled(*args)


def records_autograd(gm: torch.fx.GraphModule, grad_at_entry: bool, example_inputs: list) -> bool:
    """Whether the graph's ops are recorded by autograd (so saved-tensors hooks would see them)."""
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return False
    return grad_at_entry or any(n.target is torch._C._set_grad_enabled and n.args[:1] == (True,)
                                for n in gm.graph.nodes)


def hook_aware(gm: torch.fx.GraphModule, compiled: Callable, eager_forward: Callable, grad_at_entry: bool,
               example_inputs: list) -> Callable:
    """`compiled`, wrapped in HookAware where the graph records autograd and the backend made other code."""
    if getattr(compiled, "__self__", None) is gm or not records_autograd(gm, grad_at_entry, example_inputs):
        return compiled
    return HookAware(compiled, eager_forward)
