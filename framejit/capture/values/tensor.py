"""Tensor values: an FX node plus the fake tensor that carries its metadata (never real data)."""
from __future__ import annotations

import torch

from ..sources import Source
from .base import Value


class TensorValue(Value):
    def __init__(self, node: torch.fx.Node, fake: torch.Tensor, source: Source | None = None,
                 cls: type = torch.Tensor) -> None:
        self.node = node
        self.fake = fake
        self.source = source
        self.cls = cls

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"Tensor({self.node.name}, {tuple(self.fake.shape)}, {self.fake.dtype})"
