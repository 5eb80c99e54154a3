"""Ints that pick a kernel (a convolution's stride, padding, dilation and groups, a pooling window) reach the
graph as plain ints even when they are symbolic (NOTE [Ints that shape a kernel stay static] in
capture/kernel_ints.py): blocks of one class with other strides, compiled one by one, share their code
without a symbolic stride, so onnxrt runs every convolution in ONNX Runtime."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import framejit
from framejit import logs
from tests.helpers import CountingBackend

_KERNEL_OPS = ("conv", "pool", "pixel_shuffle", "im2col", "col2im")


@pytest.fixture
def eager_fallback_logs(caplog):
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    yield caplog
    logs.set_logs("")


class Down(torch.nn.Module):
    """A residual block whose stride is a plain int attribute (as torchvision's BasicBlock)."""

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, None, self.stride, 1)
        y = torch.relu(self.bn(y))
        return y + F.avg_pool2d(x, self.stride, self.stride) if self.stride > 1 else y + x


class Plain(torch.nn.Conv2d):
    """A convolution that reads its own stride and padding (as nn.Conv2d does), nothing else."""

    def forward(self, x):
        return torch.relu(F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation))


def _symbolic_kernel_args(be: CountingBackend) -> list[str]:
    """The kernel ops of the backend's graphs given an int computed in the graph (a symbol)."""
    found = []
    for gm in be.graphs:
        for node in gm.graph.nodes:
            if node.op != "call_function" or not any(k in str(node.target) for k in _KERNEL_OPS):
                continue
            ints = [a for a in node.args[1:] if not (isinstance(a, torch.fx.Node) and a.meta.get("val") is not None
                                                     and isinstance(a.meta["val"], torch.Tensor))]
            leaves = [i for a in ints for i in (a if isinstance(a, (list, tuple)) else [a])]
            if any(isinstance(i, torch.fx.Node) for i in leaves):
                found.append(node.format_node())
    return found


def _blocks():
    torch.manual_seed(0)
    return [Down(s).eval() for s in (1, 2, 1, 3, 2, 1)]


def test_blocks_with_other_strides_share_code_with_static_strides():
    blocks = _blocks()
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    for n, h in ((2, 12), (3, 12), (2, 18), (4, 24)):
        x = torch.randn(n, 4, h, h)
        for b, c in zip(blocks, compiled):
            with torch.no_grad():
                torch.testing.assert_close(c(x), b(x), rtol=1e-5, atol=1e-5)
    assert _symbolic_kernel_args(be) == []
    # per stride (1, 2, 3): static sizes, then the batch symbolic, then the height too (stock torch.compile
    # makes 8 graphs here and reaches its recompile limit); not one per block and size
    assert 3 <= be.graph_count <= 9, be.graph_count


def test_blocks_with_other_strides_on_onnxrt_run_no_convolution_eagerly(eager_fallback_logs):
    torch.manual_seed(2)
    blocks = [Plain(4, 4, 3, stride=s, padding=s - 1, dilation=d) for s, d in ((1, 1), (2, 1), (3, 2), (1, 2))]
    compiled = [framejit.compile(b, backend="onnxrt") for b in blocks]
    for n in (2, 3):
        x = torch.randn(n, 4, 12, 12)
        for b, c in zip(blocks, compiled):
            with torch.no_grad():
                torch.testing.assert_close(c(x), b(x), rtol=1e-4, atol=1e-4)
    assert "runs in eager torch" not in eager_fallback_logs.text, eager_fallback_logs.text


@pytest.mark.parametrize("dynamic", [None, True])
def test_changing_int_arguments_of_kernel_ops_stay_static(dynamic):
    def fn(x, w, stride, k, groups):
        y = F.conv2d(x, w, None, stride, stride - 1, 1, groups)
        y = F.max_pool2d(y, k, k) + F.avg_pool2d(y, k)
        z = F.pixel_shuffle(y[:, :4], 2)
        return y.sum((2, 3)), z.mean(), F.unfold(y, k, stride=k).shape

    be = CountingBackend()
    compiled = framejit.compile(fn, backend=be, dynamic=dynamic)
    torch.manual_seed(1)
    for stride, k, groups, h in ((1, 2, 1, 12), (2, 2, 2, 12), (1, 3, 1, 12), (2, 2, 1, 16)):
        x = torch.randn(2, 4, h, h)
        w = torch.randn(8, 4 // groups, 3, 3)
        got, want = compiled(x, w, stride, k, groups), fn(x, w, stride, k, groups)
        torch.testing.assert_close(got[:2], want[:2], rtol=1e-4, atol=1e-4)
        assert got[2] == want[2]
    assert _symbolic_kernel_args(be) == []
    assert be.graph_count <= 4, be.graph_count


def test_a_changing_batch_beside_a_static_stride_stays_one_entry():
    block = Down(2).eval()
    be = CountingBackend()
    compiled = framejit.compile(block, backend=be)
    for n in (2, 3, 4, 5, 6):
        x = torch.randn(n, 4, 8, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), block(x), rtol=1e-5, atol=1e-5)
    assert be.graph_count == 2, be.graph_count  # static, then the batch symbolic
