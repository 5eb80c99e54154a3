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

    def known_data(self) -> torch.Tensor | None:
        """The real contents when tracing knows them: fake tensors made from Python constants
        (`torch.tensor(2)`, `torch.as_tensor(2)`) carry them, through ops on such constants, as long as
        nothing writes to them (FakeTensorMode's constant propagation). Never for graph inputs."""
        return getattr(self.fake, "constant", None)

    def describe(self) -> str:
        return f"Tensor({self.node.name}, {tuple(self.fake.shape)}, {self.fake.dtype})"
