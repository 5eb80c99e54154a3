"""A module storing a buffer back under its own name in forward (NOTE [Buffers stored back under their name],
capture/modules.py): `self.pe = self.extend_pe(x, self.pe)` as in transformers' SeamlessM4T conformer
relative positional embedding. Before, every such store was "registering 'pe' (a tensor marked as a
Buffer) on a module inside the graph", a graph break in each frame of the stack."""
from __future__ import annotations

import torch

import framejit


class _RelPE(torch.nn.Module):
    def __init__(self, persistent):
        super().__init__()
        self.pe = torch.nn.Buffer(torch.randn(1, 8), persistent=persistent)

    def extend_pe(self, x, pe):
        if pe.size(1) >= x.size(1):
            return pe  # the marked buffer itself
        return torch.cat([pe, pe * 2], 1)  # a new plain tensor

    def forward(self, x):
        self.pe = self.extend_pe(x, self.pe)
        return x * 2 + self.pe[:, : x.size(1)]


class _Outer(torch.nn.Module):
    """The store happens in a submodule's forward, as in SeamlessM4TConformerEncoder."""

    def __init__(self, persistent):
        super().__init__()
        self.inner = _RelPE(persistent)

    def forward(self, x):
        return self.inner(x) - 1


def _counts():
    s = framejit.stats()
    return s["graphs"], s["eager_frames"]


def _run(persistent):
    framejit.reset()
    model, ref = _Outer(persistent), _Outer(persistent)
    ref.inner.pe = torch.nn.Buffer(model.inner.pe.clone(), persistent=persistent)
    compiled = framejit.compile(model)
    graphs, eager = _counts()
    for n in (4, 6, 12, 12, 5):
        x = torch.randn(1, n)
        torch.testing.assert_close(compiled(x), ref(x))
        torch.testing.assert_close(model.inner.pe, ref.inner.pe)
        assert list(model.state_dict()) == list(ref.state_dict())
        assert dict(model.named_buffers())["inner.pe"] is model.inner.pe
    return model, graphs, eager


def test_buffer_stored_back_is_captured_non_persistent():
    model, graphs, eager = _run(False)
    assert _counts()[1] == eager
    explained = framejit.explain(model)(torch.randn(1, 3))
    assert explained.graph_break_count == 0, explained.break_reasons


def test_buffer_stored_back_is_captured_persistent():
    model, graphs, eager = _run(True)
    assert _counts()[1] == eager
    explained = framejit.explain(model)(torch.randn(1, 3))
    assert explained.graph_break_count == 0, explained.break_reasons


def test_later_call_sees_replaced_buffer_and_persistence_change():
    framejit.reset()
    model, ref = _Outer(False), _Outer(False)
    ref.inner.pe = torch.nn.Buffer(model.inner.pe.clone(), persistent=False)
    compiled = framejit.compile(model)
    graphs, eager = _counts()
    for step in range(5):
        if step == 2:  # the name becomes persistent outside; the marked buffer says not: eager re-files it
            for m in (model, ref):
                m.inner._non_persistent_buffers_set.discard("pe")
        if step == 3:  # a new, larger buffer object from outside
            big = torch.randn(1, 20)
            model.inner.pe, ref.inner.pe = torch.nn.Buffer(big.clone(), persistent=True), torch.nn.Buffer(big, persistent=True)
        x = torch.randn(1, 7)
        torch.testing.assert_close(compiled(x), ref(x))
        assert list(model.state_dict()) == list(ref.state_dict())
        torch.testing.assert_close(model.inner.pe, ref.inner.pe)
    assert _counts()[1] == eager


class _NewName(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pe = torch.nn.Buffer(torch.randn(1, 4))

    def forward(self, x):
        self.other = self.pe  # registers a second buffer: still a break, and correct
        return x + len(list(self.named_buffers()))


def test_marked_tensor_under_a_new_name_stays_correct():
    framejit.reset()
    model, ref = _NewName(), _NewName()
    compiled = framejit.compile(model)
    for n in (2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), ref(x))
        assert sorted(dict(model.named_buffers())) == sorted(dict(ref.named_buffers()))
