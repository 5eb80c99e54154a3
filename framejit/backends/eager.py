"""The eager backend: runs the captured FX graph as the Python code torch.fx generated for it.

It is the reference backend: it adds nothing but the GraphModule's own call, so compiled code under it
computes exactly what eager PyTorch computes. Persisting it (`save`/`load`, see backends/artifact.py)
keeps nothing: the graph module handed to `load` is the whole program.
"""
from __future__ import annotations

import types

import torch

from .checks import CheckedGraph, entry_checks, has_size_truth


def _forward(gm: torch.fx.GraphModule):
    """`gm.forward`; where the graph checks a truth over symbolic sizes, a method of `gm` that first computes
    its entry conditions as checks.py does (an exception there is the check's failure, not the user's error
    raised before the graph's input writes: NOTE [A failing entry condition fails the check])."""
    if not has_size_truth(gm):
        return gm.forward
    at_entry = entry_checks(gm)

    def checked_forward(self: torch.fx.GraphModule, *args):
        at_entry(*args)  # NOTE [A failing entry condition fails the check] in checks.py
        return self.forward(*args)
    return types.MethodType(checked_forward, gm)  # a method of `gm`, as gm.forward is (saved_hooks.hook_aware)


def conditions_first(gm: torch.fx.GraphModule, compiled):
    """What a backend made of `gm`, computing the entry conditions of a truth over symbolic sizes first (NOTE [A
    failing entry condition fails the check]): `gm.forward` itself (a custom backend that runs the graph as
    Python) as the eager backend's method; another callable that does not already (CheckedGraph, the eager
    backend's method) wrapped in a CheckedGraph with no further checks."""
    if not has_size_truth(gm) or isinstance(compiled, CheckedGraph) or \
            getattr(compiled, "__self__", None) is gm and getattr(compiled, "__func__", None) is not type(gm).forward:
        return compiled
    if getattr(compiled, "__self__", None) is gm:
        return _forward(gm)
    return CheckedGraph(compiled, [], False, entry_checks(gm))


def eager(gm: torch.fx.GraphModule, example_inputs: list):
    """Return the GraphModule's forward: the graph runs op by op, exactly as eager PyTorch would."""
    return _forward(gm)


def save(compiled) -> bytes:
    """Nothing to persist: the program is the graph module itself."""
    return b""


def load(data: bytes, gm: torch.fx.GraphModule, example_inputs=None):
    """The graph module's forward, as `eager` returns it."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"eager load(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    return _forward(gm)
