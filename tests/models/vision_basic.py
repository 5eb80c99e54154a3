"""Zoo models without attention: a residual MLP and a small ResNet-style CNN with BatchNorm.

Role: the simplest realistic capture targets (nn.ModuleList loops, a Sequential of blocks, optional
sub-modules tested with `is not None`, `self.training` checks, shape checks on tensor metadata,
in-place activations). Each builder takes a size name and returns a `Case`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tests.models._case import Case, build_seeded, check_size, default_tolerance, generator, randn

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
}


class MLP(nn.Module):
    """Feed-forward classifier; hidden layers of equal width get a residual connection."""

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int,
                 activation: str = "gelu", dropout: float = 0.1) -> None:
        super().__init__()
        widths = [in_features, *hidden]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.residual = [a == b for a, b in zip(widths[:-1], widths[1:])]
        self.act = _ACTIVATIONS[activation]
        self.dropout = dropout
        self.norm = nn.LayerNorm(widths[-1])
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, residual in zip(self.layers, self.residual):
            h = self.act(layer(x))
            if self.training and self.dropout > 0:
                h = F.dropout(h, p=self.dropout)
            x = x + h if residual else h
        return self.head(self.norm(x))


def conv3x3(c_in: int, c_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BatchNorm; a 1x1 projection on the skip path when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = conv3x3(c_in, c_out, stride)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = conv3x3(c_out, c_out)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(c_out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return F.relu(out)


class SmallResNet(nn.Module):
    """Stem conv, stages of BasicBlocks (stride 2 between stages), global average pool, classifier."""

    def __init__(self, channels: Sequence[int], blocks_per_stage: int, num_classes: int,
                 in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv3x3(in_channels, channels[0]), nn.BatchNorm2d(channels[0]),
                                  nn.ReLU(inplace=True))
        stages = []
        c_prev = channels[0]
        for i, c in enumerate(channels):
            stride = 1 if i == 0 else 2
            blocks = [BasicBlock(c_prev, c, stride)]
            blocks += [BasicBlock(c, c) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            c_prev = c
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c_prev, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.stages(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.fc(x)


_MLP_SIZES = {
    # batch, in_features, hidden widths, classes
    "small": (2, 16, (32, 32, 32), 8),
    "bench": (64, 256, (512, 512, 512, 512), 10),
}


def build_mlp(size: str) -> Case:
    check_size(size)
    batch, in_features, hidden, classes = _MLP_SIZES[size]
    model = build_seeded(lambda: MLP(in_features, hidden, classes))

    def make_inputs(seed: int) -> tuple:
        return (randn(generator(seed), batch, in_features),)

    return Case("mlp", size, model, make_inputs, fx_traceable=True, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description="Linear+GELU layers with residuals, LayerNorm, classifier head")


_CNN_SIZES = {
    # batch, image side, channels per stage, blocks per stage, classes
    "small": (2, 8, (4, 8), 1, 10),
    "bench": (8, 64, (32, 64, 128), 2, 100),
}


def build_cnn(size: str) -> Case:
    check_size(size)
    batch, side, channels, blocks, classes = _CNN_SIZES[size]
    model = build_seeded(lambda: SmallResNet(channels, blocks, classes))

    def make_inputs(seed: int) -> tuple:
        return (randn(generator(seed), batch, 3, side, side),)

    return Case("cnn", size, model, make_inputs, fx_traceable=True, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description="ResNet-style conv net, BatchNorm in eval mode, residual blocks")
