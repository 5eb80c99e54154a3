"""Ints of 0-d tensors computed from sizes (NOTE [Ints of tensors computed from sizes]), issue 11: transformers'
EncodecConv1d/MimiConv1d padding, reduced to torch. Differential checks over changing lengths, with graph, break
and eager-frame counts. (First written by h11enc for 58b2d3e, reverted in bd3c3c7; max() of such tensors is now
decided by a guard and returns the operand eager returns. Soundness: test_derived_ints_soundness.py.)"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, logged_breaks


class PaddedConv(nn.Module):
    """EncodecConv1d reduced: padding amounts from 0-d int64 buffers and the input length."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, causal: bool) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride)
        self.causal = causal
        self.stride = nn.Buffer(torch.tensor(stride), persistent=False)
        self.kernel_size = nn.Buffer(torch.tensor(kernel), persistent=False)
        self.padding_total = nn.Buffer(torch.tensor(kernel - stride), persistent=False)

    def _extra_padding(self, h: torch.Tensor) -> torch.Tensor:
        length = h.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        return ideal_length - length

    @staticmethod
    def _pad1d(h: torch.Tensor, paddings: tuple) -> torch.Tensor:
        length = h.shape[-1]
        padding_left, padding_right = paddings
        max_pad = max(padding_left, padding_right)
        extra_pad = 0
        if length <= max_pad:
            extra_pad = max_pad - length + 1
            h = F.pad(h, (0, extra_pad))
        padded = F.pad(h, paddings, "reflect")
        end = padded.shape[-1] - extra_pad
        return padded[..., :end]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        extra = self._extra_padding(h)
        if self.causal:
            return self.conv(self._pad1d(h, (self.padding_total, extra)))
        padding_right = self.padding_total // 2
        padding_left = self.padding_total - padding_right
        return self.conv(self._pad1d(h, (padding_left, padding_right + extra)))


class Stack(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        specs = [(1, 4, 7, 1), (4, 4, 4, 2), (4, 8, 3, 1), (8, 8, 8, 4), (8, 4, 3, 1)]
        self.layers = nn.ModuleList([PaddedConv(*spec, causal=causal) for spec in specs])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.elu(layer(x))
        return x


LENGTHS = (400, 400, 333, 250, 401, 402, 97)


def _counts(fn, calls) -> tuple[CountingBackend, int, int]:
    """Runs `calls` (argument tuples) eagerly and compiled, comparing; (backend, breaks, eager frames)."""
    backend = CountingBackend()
    stats0 = framejit.stats()
    compiled = framejit.compile(fn, backend=backend)
    with logged_breaks() as breaks:
        for args in calls:
            torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
    stats = framejit.stats()
    return backend, len(breaks), stats["eager_frames"] - stats0["eager_frames"]


@pytest.mark.parametrize("causal", [False, True])
def test_padded_conv_stack_has_no_break_over_changing_lengths(causal):
    """Before: breaks at max(), the `if` and F.pad in every conv, and frames over the recompile limit ran
    eagerly; stock torch.compile breaks at each `if`. Now: no break, a static graph then a dynamic one, and
    (non-causal) one more for each order of max(padding_left, padding_right + extra) the lengths reach: the
    order depends on the length modulo the strides and max() returns one of its operands (a guard)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Stack(causal).eval()
    gen = torch.Generator().manual_seed(1)
    calls = [(torch.randn(2, 1, n, generator=gen),) for n in LENGTHS]
    with torch.no_grad():
        backend, breaks, eager = _counts(model, calls)
    assert eager == 0 and breaks == 0
    assert backend.graph_count <= (2 if causal else 4)


def test_short_input_takes_the_extra_reflect_padding():
    """`if length <= max_pad` true: the extra zero padding, then reflect, then the slice by a tensor end."""
    p = torch.tensor(6)

    def f(h):
        pr = p // 2
        pl = p - pr
        max_pad = max(pl, pr)
        extra = 0
        if h.shape[-1] <= max_pad:
            extra = max_pad - h.shape[-1] + 1
            h = F.pad(h, (0, extra))
        padded = F.pad(h, (pl, pr), "reflect")
        return padded[..., :padded.shape[-1] - extra] * 2

    calls = [(torch.randn(2, n),) for n in (2, 3, 10, 11, 2, 5)]
    backend, breaks, eager = _counts(f, calls)
    assert eager == 0 and breaks == 0 and backend.graph_count <= 4


def test_a_changed_buffer_value_recompiles():
    """The buffer's value is read at frame entry and guarded: a new value is a new entry, not a stale int."""
    k = torch.tensor(3)

    def f(h):
        n = (h.shape[-1] - k) // 2
        return F.pad(h, (0, n)) + n

    compiled = framejit.compile(f, backend=CountingBackend())
    for value, length in ((3, 9), (5, 9), (5, 13), (8, 20), (2, 6)):
        k.fill_(value)
        h = torch.randn(1, length)
        torch.testing.assert_close(compiled(h), f(h))


def test_a_buffer_written_in_the_frame_is_read_after_the_write():
    k = torch.tensor(3)

    def f(h):
        k.add_(1)
        if k > h.shape[-1] // 2:
            return h * 2
        return h - 1

    compiled = framejit.compile(f, backend=CountingBackend())
    for length in (10, 10, 11, 12, 13, 14, 15):
        h = torch.randn(length)
        k0 = k.clone()
        want = f(h)
        k.copy_(k0)
        torch.testing.assert_close(compiled(h), want)


def test_float_rounding_of_large_values_is_not_assumed_exact():
    """ceil((n + 1) / 3) in float32: wrong as an exact rational at 2**25 (the guard on the bound fails)."""
    def f(t, h):
        m = torch.ceil((t + 1) / 3).to(torch.int64)
        if m > 5:
            return h + 1
        return h - 1

    h = torch.zeros(3)
    for values in ((4, 20, 2 ** 25 + 1, 16777219, 13), (2 ** 25 + 1, 7, 30)):
        compiled = framejit.compile(f, backend=CountingBackend())
        for v in values:
            t = torch.tensor(v)
            torch.testing.assert_close(compiled(t, h), f(t, h))
    for v in (16777215, 16777216, 16777217, 33554433, 50331651):  # float32 steps of 2 and 4 up there
        t = torch.tensor(v)
        want = torch.ceil((t + 1) / 3).to(torch.int64)
        compiled = framejit.compile(lambda t: torch.zeros(int(torch.ceil((t + 1) / 3).to(torch.int64)) % 7))
        assert compiled(t).shape[0] == int(want) % 7


def test_max_of_derived_tensors_keeps_identity():
    """max() of derived tensors returns the operand eager returns (returned, written, in a set)."""
    def returned(h):
        a = h.shape[-1] - torch.tensor(3)
        b = (h.shape[-1] + 1) // torch.tensor(2)
        m = max(a, b)
        return m, a, b

    def written(h):
        a = h.shape[-1] - torch.tensor(3)
        b = (h.shape[-1] + 1) // torch.tensor(2)
        m = max(a, b)
        m.add_(10)
        return h[: int(a)], h[: int(b)]

    def in_set(h):
        a = h.shape[-1] - torch.tensor(3)
        b = (h.shape[-1] + 1) // torch.tensor(2)
        return len({max(a, b), a, b}) + h

    for fn in (returned, written, in_set):
        compiled = framejit.compile(fn, backend=CountingBackend())
        for n in (4, 4, 5, 9, 12, 3):
            h = torch.arange(float(n))
            got, want = compiled(h), fn(h)
            if fn is returned:
                assert [got[0] is g for g in got[1:]] == [want[0] is w for w in want[1:]]
            torch.testing.assert_close(got, want)


def test_max_of_derived_tensors_serves_both_orders():
    """The order is guarded: a graph per order (static, then dynamic), no break, the operand's identity kept."""
    def f(h):
        a = h.shape[-1] % torch.tensor(4)
        b = torch.tensor(2) - a
        m = max(a, b)
        return F.pad(h, (0, m)) * (2 if m is a else 3)

    calls = [(torch.randn(n),) for n in (8, 8, 9, 10, 11, 12, 13, 14, 15)]
    backend, breaks, eager = _counts(f, calls)
    assert eager == 0 and breaks == 0 and backend.graph_count <= 3


def test_a_long_chain_of_int_arithmetic_stays_a_break():
    """A derivation visits a bounded number of nodes: 600 steps ran the frame eagerly (RecursionError). 200 steps
    (over 3 times the bound, a third of the tracing time) are a break with the bound; without it they are
    derived (no break: this test fails)."""
    def f(x):
        s = x.shape[0] - torch.tensor(1)
        for _ in range(200):
            s = s + 1
        if s > 5:
            return x + s
        return x - s

    backend, breaks, eager = _counts(f, [(torch.randn(n),) for n in (3, 4, 9)])
    assert eager == 0 and breaks >= 1  # the break at the `if`
