"""torch.istft in the graph, its window check (NOLA) a run-time check: NOTE [istft's window check]."""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, OnnxrtRecorder, assert_same, manual_seed


def _roundtrip(x, w):
    S = torch.stft(x, n_fft=16, hop_length=4, window=w, return_complex=True)
    return torch.istft(S, n_fft=16, hop_length=4, window=w, length=x.shape[-1]), S.abs().pow(2)


def _method_options(S, w):  # Tensor.istft, win_length < n_fft (the window padded), no length
    return S.istft(16, 4, 12, w, normalized=True) * 2


def _no_window(S):
    return torch.istft(S, 16, hop_length=4, onesided=True)


def _counted(fn, backend):
    framejit.reset()
    return framejit.compile(fn, backend=backend)


def _same_error(fn, compiled, args):
    with pytest.raises(RuntimeError) as expected:
        fn(*args)
    with pytest.raises(RuntimeError) as actual:
        compiled(*args)
    assert str(actual.value) == str(expected.value)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_istft_in_one_graph_across_lengths_and_bad_window(backend):
    counter = CountingBackend() if backend == "eager" else OnnxrtRecorder()
    compiled = _counted(_roundtrip, counter)
    for i, n in enumerate([64, 72, 80, 64]):
        manual_seed(i)
        x, w = torch.randn(2, n), torch.hann_window(16)
        assert_same(compiled(x, w), _roundtrip(x, w), atol=1e-5, rtol=1e-5)
    explained = framejit.explain(_roundtrip)(torch.randn(2, 64), torch.hann_window(16))
    assert explained.break_reasons == []
    if backend == "eager":
        assert counter.graph_count == 2  # the first length, then a symbolic one
        assert any(n.target is torch.istft for n in counter.graphs[-1].graph.nodes)
    bad = torch.zeros(16)
    bad[:3] = 1.0  # the envelope is 0 between frames: eager raises "window overlap add min"
    _same_error(_roundtrip, compiled, (torch.randn(2, 72), bad))
    x, w = torch.randn(2, 80), torch.hann_window(16)
    assert_same(compiled(x, w), _roundtrip(x, w), atol=1e-5, rtol=1e-5)  # good windows compiled again


@pytest.mark.parametrize("backend", ["eager"])
def test_istft_method_padded_window_and_default_window(backend):
    for fn, make in [(_method_options, lambda n: (torch.randn(9, n, dtype=torch.complex64), torch.hann_window(12) + 0.1)),
                     (_no_window, lambda n: (torch.stft(torch.randn(3, n), 16, 4, window=torch.ones(16),
                                                        return_complex=True),))]:
        counter = CountingBackend()
        compiled = _counted(fn, counter if backend == "eager" else backend)
        for i, n in enumerate([5, 7, 9]):
            manual_seed(i)
            args = make(n if fn is _method_options else 16 * n)
            assert_same(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
        if backend == "eager":
            assert counter.graph_count == 2
            assert framejit.explain(fn)(*make(40 if fn is _no_window else 5)).break_reasons == []
    bad = torch.zeros(12)
    bad[:2] = 1.0  # nonzero on 2 samples of each hop of 4: the envelope is 0 on the others
    compiled = _counted(_method_options, backend)
    _same_error(_method_options, compiled, (torch.randn(9, 5, dtype=torch.complex64), bad))


def test_istft_gradients_equal_eager():
    def fn(x, w):
        S = torch.stft(x, 16, 4, window=w, return_complex=True)
        return torch.istft(S * 0.5, 16, 4, window=w, length=x.shape[-1]).pow(2).sum()
    counter = CountingBackend()
    compiled = _counted(fn, counter)
    for n in (64, 72, 88):
        x = torch.randn(2, n, requires_grad=True)
        w = (torch.hann_window(16) + 0.1).requires_grad_()
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        fn(x, w).backward()
        compiled(x2, w2).backward()
        assert_same((x2.grad, w2.grad), (x.grad, w.grad), atol=1e-4, rtol=1e-4)
    assert counter.graph_count == 2


def test_istft_length_beyond_signal_keeps_the_break():
    def fn(S):
        return torch.istft(S, 16, 4, window=torch.hann_window(16), length=100) + 1
    compiled = _counted(fn, CountingBackend())
    S = torch.stft(torch.randn(64), 16, 4, window=torch.hann_window(16), return_complex=True)
    assert_same(compiled(S), fn(S))
    assert len(framejit.explain(fn)(S).break_reasons) == 1
