"""Convolution gradients in onnxrt training graphs (NOTE [Convolution gradients as convolutions] in
framejit/backends/onnxrt/conv_backward.py): `convolution_backward` becomes forward convolutions, so a conv
net's backward runs as one ORT program instead of ORT parts around torch's op.

The decomposition is compared with eager's `convolution_backward` in float64 over strides, paddings,
dilations, groups, 1-3 spatial dims and output masks; conv nets train through onnxrt for 3 steps on
changing inputs (input gradients included) and match eager, with the whole backward in one ORT part.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import framejit
from framejit.backends.onnxrt.conv_backward import convolution_backward
from tests.backends.test_training_backends import (  # noqa: F401 (_count_ort_runs: the autouse fixture)
    TOL, Recording, _count_ort_runs, assert_backward_in_backend, assert_same_state)

aten = torch.ops.aten

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]

# (spatial sizes, kernel, stride, padding, dilation, groups, channels in, channels out)
CASES = [
    ((9,), (3,), [1], [0], [1], 1, 4, 6),
    ((10,), (3,), [2], [1], [2], 2, 4, 6),
    ((9, 8), (3, 2), [2, 1], [1, 0], [1, 2], 1, 3, 5),
    ((8, 8), (3, 3), [2, 2], [1, 1], [1, 1], 4, 8, 4),   # each group: 2 channels in, 1 out
    ((7, 9), (1, 1), [2, 2], [0, 0], [1, 1], 1, 4, 8),   # 1x1 projection with stride (resnet downsample)
    ((9, 7), (3, 3), [3, 2], [2, 3], [2, 1], 3, 6, 6),   # depthwise, padding wider than the kernel reach
    ((5, 6, 7), (2, 3, 2), [2, 1, 3], [1, 1, 0], [1, 2, 1], 2, 4, 4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}d-s{c[2]}-p{c[3]}-d{c[4]}-g{c[5]}")
def test_decomposition_matches_convolution_backward(case):
    space, kernel, stride, padding, dilation, groups, cin, cout = case
    gen = torch.Generator().manual_seed(len(space) * 7 + groups)
    x = torch.randn(3, cin, *space, generator=gen, dtype=torch.float64)
    w = torch.randn(cout, cin // groups, *kernel, generator=gen, dtype=torch.float64)
    y = aten.convolution(x, w, None, stride, padding, dilation, False, [0] * len(space), groups)
    grad = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    for mask in ([True, True, True], [False, True, False], [True, False, False]):
        args = (grad, x, w, [cout], stride, padding, dilation, False, [0] * len(space), groups, mask)
        expected, actual = aten.convolution_backward(*args), convolution_backward(*args)
        for k, (e, a) in enumerate(zip(expected, actual)):
            if not mask[k]:
                assert a is None
                continue
            assert a.shape == e.shape and a.is_contiguous()
            torch.testing.assert_close(a, e, atol=1e-10, rtol=1e-10)


class ConvNet(nn.Module):
    """Strided, dilated, grouped and bias-free convs, 1d and 2d."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(4, 8, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
        self.c2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8, bias=False)
        self.c3 = nn.Conv1d(8, 6, 3, stride=2, padding=1)

    def forward(self, x):
        h = torch.relu(self.c1(x))
        h = torch.tanh(self.c2(h)) + h
        return self.c3(h.flatten(2))


def test_conv_net_trains_on_onnxrt_with_the_backward_in_one_part():
    torch.manual_seed(0)
    model = ConvNet()
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, fast_model)]
    for step in range(3):  # new values every step; the input requires grad (grad_input of the first conv)
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(2, 4, 9, 8, generator=gen)
        inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        for m, x, opt in zip((model, fast), inputs, opts):
            m(x).square().mean().backward()
            opt.step()
        torch.testing.assert_close(inputs[1].grad, inputs[0].grad, **TOL)
        for opt in opts:
            opt.zero_grad()
    assert_same_state(fast_model, model)
    assert_backward_in_backend(recording)
    (joint,) = recording.joints()
    (backward,) = joint.compiled_backwards
    (program,) = [p for p in backward.programs.values() if p is not None]
    assert program.num_parts == 1
    assert not any("convolution" in name for name in program.eager_nodes), program.eager_nodes
