"""Triton-backend fixes found by a read-only review of issue 13/14 commits (h13tri2): a float64 LSTM's
workspace measured in float32 (recurrent.sized_workspaces), ... . Values compared with eager; what ran
in the backend and what was logged on `eager_fallback` checked."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.backends.test_training_gaps6 import _sgd, fallback_log, train_twins  # noqa: F401 (fixture)
from tests.backends.test_training_backends import _count_ort_runs  # noqa: F401 (the autouse fixture)
from tests.backends.test_training_backends import assert_backward_in_backend

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


class Float64Lstm(nn.Module):
    """An LSTM in float64 on the raw input, then a linear head (NOTE [The workspace's size])."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True).double()
        self.head = nn.Linear(4, 2).double()

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out[:, -1]) + h.sum() * 0.1 + c.mean()


def test_a_float64_lstm_trains_with_its_backward_on_triton(fallback_log):
    """The review's program: passes before and after (a float64 LSTM never reaches oneDNN's layer, which
    takes float32 and bfloat16 only, so no workspace is measured); kept as the twin of the bfloat16 test."""
    recording = train_twins(Float64Lstm, lambda g: (torch.randn(2, 3, 3, generator=g, dtype=torch.float64),),
                            "triton", _sgd)
    assert_backward_in_backend(recording, steps=3)
    assert not fallback_log()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bfloat16_layers_workspace_example_has_the_real_ops_size(dtype):
    """Before: measured on float32 zeros whatever the layer's dtype: a bfloat16 layer of 7 steps x 5 x 33
    got 102400 bytes where oneDNN gives it 86016, so the backward's example differed from every real call."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from framejit.backends import recurrent
    steps, batch, width, hidden = 7, 5, 3, 33
    gen = torch.Generator().manual_seed(0)
    layer = [torch.randn(steps, batch, width, generator=gen), torch.randn(4 * hidden, width, generator=gen),
             torch.randn(4 * hidden, hidden, generator=gen), torch.randn(4 * hidden, generator=gen),
             torch.randn(4 * hidden, generator=gen), torch.zeros(batch, hidden), torch.zeros(batch, hidden)]
    layer = [t.to(dtype) for t in layer]
    with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():
        out, hy, cy, workspace = torch.ops.aten.mkldnn_rnn_layer.default(
            *layer, False, [], 2, hidden, 1, True, False, False, True)

    def backward(*args):
        *tensors, ws = args
        return torch.ops.aten.mkldnn_rnn_layer_backward.default(
            *tensors, False, 2, hidden, 1, True, True, False, [], False, ws)

    grads = [torch.randn_like(t) for t in (out, hy, cy)]
    fake = torch.empty(0, dtype=torch.uint8)  # the meta kernel's workspace, as AOT autograd's example
    graph = make_fx(backward, tracing_mode="fake")(*layer, out, hy, cy, *grads, fake)
    examples = recurrent.sized_workspaces(graph, [*layer, out, hy, cy, *grads, fake])
    assert examples[-1].shape == workspace.shape
