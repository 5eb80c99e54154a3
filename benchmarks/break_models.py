"""Models with graph breaks for benchmarks/coldstart.py (beside the zoo): module-level classes, so that the
frame cache can find them again by name in a new process.

- `Branchy`: two linear layers around one data-dependent branch (`if h.sum() > 0`).
- `AttnBranch`: nn.MultiheadAttention, LayerNorm and a data-dependent branch.
"""
from __future__ import annotations

import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum() > 0:
            h = h * 2
        return self.b(h).softmax(-1)


class AttnBranch(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, 4, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        y = self.norm(x + y)
        if x.mean() > 0:  # not y.mean(): a LayerNorm output's mean is 0 up to rounding (|mean| ~ 1e-8), so
            # its sign is decided by rounding and ORT's and torch's answers may differ (ok=NO, a knife edge)
            y = y + 1
        return self.out(y)
