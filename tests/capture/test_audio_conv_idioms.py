"""Two idioms of HF audio models, reduced to torch (issue 11): differential checks plus their known gaps.

1. Encodec's and Mimi's padded conv (transformers' EncodecConv1d / MimiConv1d): the padding amounts are
   0-d int64 buffers (`stride`, `kernel_size`, `padding_total`) combined with the input length by tensor
   arithmetic (`/`, `torch.ceil`, `.to(torch.int64)`), then `max(pl, pr)` of tensors, `if length <= max_pad`
   and `F.pad(h, (pl, pr), "reflect")` with tensor pads; the conv is weight-normed, so every instance has its
   own class (torch.nn.utils.parametrize makes one per module). Each of these reads tensor data (a break in
   framejit and in stock torch.compile), and the frames resumed after the break inside a conv guard the
   conv's class, so a stack of 10 convs reached the recompile limit (8): with 3 calls at changing lengths a
   frame ran eagerly, in framejit and in stock (EncodecModel: framejit 4 eager frames, stock 2 frames over
   its limit). parametrize's classes now match by structure (NOTE [Parametrized classes alike]): no frame
   runs eagerly. The padding amounts are now derived from sizes without breaks (NOTE [Ints of tensors
   computed from sizes], tests/capture/test_tensor_ints.py). Values are eager's (checked here).
2. Musicgen's layer drop: `dropout_probability = random.uniform(0, 1)` in every decoder layer, read only in
   training. framejit broke at each draw ("call of Random.random"); stock traces it. Now the draws are made
   by the transformed code (NOTE [Draws from the random module]): seeded runs leave `random`'s state and the
   outputs as eager's (eval and train, where the comparison breaks), and eval is captured as stock does.
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend


class PaddedConv(nn.Module):
    """transformers' EncodecConv1d, reduced: weight-normed Conv1d, padding amounts as int64 buffers."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(cin, cout, kernel, stride))
        stride_t = torch.tensor(stride, dtype=torch.int64)
        kernel_t = torch.tensor(kernel, dtype=torch.int64)
        self.stride = nn.Buffer(stride_t, persistent=False)
        self.kernel_size = nn.Buffer(kernel_t, persistent=False)
        self.padding_total = nn.Buffer(kernel_t - stride_t, persistent=False)

    def _extra_padding(self, h: torch.Tensor) -> torch.Tensor:
        length = h.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        return ideal_length - length

    @staticmethod
    def _pad1d(h: torch.Tensor, paddings: tuple, mode: str = "reflect") -> torch.Tensor:
        length = h.shape[-1]
        padding_left, padding_right = paddings
        max_pad = max(padding_left, padding_right)
        extra_pad = 0
        if length <= max_pad:
            extra_pad = max_pad - length + 1
            h = nn.functional.pad(h, (0, extra_pad))
        padded = nn.functional.pad(h, paddings, mode)
        end = padded.shape[-1] - extra_pad
        return padded[..., :end]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        extra = self._extra_padding(h)
        padding_right = self.padding_total // 2
        padding_left = self.padding_total - padding_right
        return self.conv(self._pad1d(h, (padding_left, padding_right + extra)))


class ConvStack(nn.Module):
    SPECS = [(1, 4, 7, 1), (4, 4, 3, 1), (4, 8, 4, 2), (8, 8, 3, 1), (8, 8, 3, 1), (8, 16, 4, 2), (16, 16, 3, 1),
             (16, 16, 3, 1), (16, 16, 5, 1), (16, 4, 3, 1)]

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([PaddedConv(*spec) for spec in self.SPECS])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = nn.functional.elu(layer(x))
        return x


def _conv_stack() -> ConvStack:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ConvStack().eval()


LENGTHS = (400, 400, 333)  # the third call at a new length


def _run_padded_convs() -> int:
    """3 calls at changing lengths, each equal to eager; returns the frames framejit ran wholly eagerly."""
    model = _conv_stack()
    before = framejit.stats()["eager_frames"]
    compiled = framejit.compile(model, backend=CountingBackend())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for length in LENGTHS:
            x = torch.randn(2, 1, length, generator=gen)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    return framejit.stats()["eager_frames"] - before


def test_padded_convs_match_eager_and_run_no_frame_eagerly():
    """Values equal eager's at changing lengths (checked in _run_padded_convs), and no frame runs eagerly. The
    frames resumed inside each conv after the padding breaks guarded the conv's class, one per weight-normed
    conv; parametrize's classes now match by structure (NOTE [Parametrized classes alike]) (before: 1 eager
    frame, stock torch.compile: 1 frame over its recompile limit). One test: a separate values-only test ran
    the same three calls on the same model again."""
    assert _run_padded_convs() == 0


class LayerDropDecoder(nn.Module):
    """MusicgenDecoder's loop, reduced: a layer-drop draw per layer, used only in training."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.layerdrop = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            dropout_probability = random.uniform(0, 1)
            if self.training and dropout_probability < self.layerdrop:
                continue
            x = torch.relu(layer(x))
        return x


def _run_layer_drop(train: bool) -> CountingBackend:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LayerDropDecoder().train(train)
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    saved = random.getstate()
    try:
        for seed, rows in ((0, 2), (1, 3), (2, 5)):
            x = torch.randn(rows, 8, generator=torch.Generator().manual_seed(seed))
            random.seed(seed)
            want = model(x)
            want_state = random.getstate()
            random.seed(seed)
            got = compiled(x)
            assert random.getstate() == want_state  # as many draws as eager, in the same order
            torch.testing.assert_close(got, want)
    finally:
        random.setstate(saved)
    return backend


def test_layer_drop_draws_in_training_keep_the_random_state():
    # eval (train=False) runs the same check in the test below, which also compares the graphs with stock's
    _run_layer_drop(True)


def test_layer_drop_draws_in_eval_are_captured_as_stock_does():
    """In eval the draws are only made (NOTE [Draws from the random module]): no break, the graphs of stock
    torch.compile over the same calls (before: a break at every draw, 3 graphs per call)."""
    import torch._dynamo  # the reference compiler (tests only)
    torch._dynamo.reset()
    stock = CountingBackend()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LayerDropDecoder().eval()
    compiled = torch.compile(model, backend=stock)
    for rows in (2, 3, 5):
        compiled(torch.randn(rows, 8))
    torch._dynamo.reset()
    assert 1 <= _run_layer_drop(False).graph_count <= stock.graph_count
