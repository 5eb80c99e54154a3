"""Tensor values: an FX node plus the fake tensor that carries its metadata (never real data)."""
from __future__ import annotations

import torch

from ..sources import Source
from .base import Value


# NOTE [Host devices have no index]: a real CPU (or meta) tensor made with `device="cpu:0"` reports
# `device(type='cpu')` (index None, `get_device()` -1); a fake tensor keeps the index it was given, so the
# trace answered `cpu:0`, and `t.device == torch.device("cpu")` False where eager says True. The fake's
# device is set to what the real tensor would report (also what later ops on it propagate).
def _drop_host_index(fake: torch.Tensor) -> None:
    device = getattr(fake, "fake_device", None)
    if device is not None and device.type in ("cpu", "meta") and device.index is not None:
        fake.fake_device = torch.device(device.type)


class TensorValue(Value):
    watch = None  # a graph input whose reads are noted (NOTE [Tensors passed through unread] in unread_inputs.py)

    def __init__(self, node: torch.fx.Node, fake: torch.Tensor, source: Source | None = None,
                 cls: type = torch.Tensor) -> None:
        self.node = node
        self._fake = fake
        _drop_host_index(fake)
        self.source = source
        self.cls = cls

    @property
    def fake(self) -> torch.Tensor:
        """The fake tensor carrying the metadata; a read of a watched input's notes that the trace read it."""
        if self.watch is not None:
            self.watch.read = True
        return self._fake

    @fake.setter
    def fake(self, fake: torch.Tensor) -> None:
        self._fake = fake

    def python_type(self) -> type:
        return self.cls

    def known_data(self) -> torch.Tensor | None:
        """The real contents when tracing knows them: fake tensors made from Python constants
        (`torch.tensor(2)`, `torch.as_tensor(2)`) carry them, through ops on such constants, as long as
        nothing writes to them (FakeTensorMode's constant propagation). Never for graph inputs."""
        return getattr(self.fake, "constant", None)

    def describe(self) -> str:
        return f"Tensor({self.node.name}, {tuple(self.fake.shape)}, {self.fake.dtype})"
