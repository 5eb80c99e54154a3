"""The eager backend: runs the captured FX graph as the Python code torch.fx generated for it.

It is the reference backend: it adds nothing but the GraphModule's own call, so compiled code under it
computes exactly what eager PyTorch computes. Persisting it (`save`/`load`, see backends/artifact.py)
keeps nothing: the graph module handed to `load` is the whole program.
"""
from __future__ import annotations

import torch


def eager(gm: torch.fx.GraphModule, example_inputs: list):
    """Return the GraphModule's forward: the graph runs op by op, exactly as eager PyTorch would."""
    return gm.forward


def save(compiled) -> bytes:
    """Nothing to persist: the program is the graph module itself."""
    return b""


def load(data: bytes, gm: torch.fx.GraphModule, example_inputs=None):
    """The graph module's forward, as `eager` returns it."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"eager load(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    return gm.forward
