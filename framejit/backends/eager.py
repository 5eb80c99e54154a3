"""The eager backend: runs the captured FX graph as the Python code torch.fx generated for it.

It is the reference backend: it adds nothing but the GraphModule's own call, so compiled code under it
computes exactly what eager PyTorch computes.
"""
from __future__ import annotations

import torch


def eager(gm: torch.fx.GraphModule, example_inputs: list):
    """Return the GraphModule's forward: the graph runs op by op, exactly as eager PyTorch would."""
    return gm.forward
