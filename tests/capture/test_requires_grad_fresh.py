"""`requires_grad_()` on a tensor the graph itself made, under no_grad (issue 11, h11sweep).

transformers' MRA (`mra2_attention` without its CUDA kernel) returns `torch.zeros_like(query).requires_grad_()`
and the HF tests call models under `torch.no_grad()`: every frame on the way broke there (6 graphs and 18
breaks per forward where stock torch.compile has 1 graph). Such a call is now a graph node (NOTE
[requires_grad_ on fresh tensors]); on an input, or with grad mode on, it still runs as Python.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _inputs(seed: int, n: int = 4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, n, 8, generator=g), torch.randn(2, n, 8, generator=g)


def fresh_zeros(q, k):
    z = torch.zeros_like(q).requires_grad_()  # the MRA idiom
    return z, (z + q) @ k.transpose(-1, -2)


def fresh_flag_kw(q, k):
    z = (q * 0 + 1).requires_grad_(requires_grad=True)
    return (z * k).sum(-1), z


def _same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert (g.requires_grad, g.is_leaf) == (w.requires_grad, w.is_leaf)


@pytest.mark.parametrize("fn", [fresh_zeros, fresh_flag_kw])
def test_requires_grad_on_fresh_tensor_under_no_grad_is_captured(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in (0, 1):  # fresh values each call
        q, k = _inputs(seed)
        with torch.no_grad():
            _same(compiled(q, k), fn(q, k))
    assert backend.graph_count == 1, backend.graph_count


def test_requires_grad_on_input_or_with_grad_still_matches_eager():
    def on_input(q, k):
        y = q * 2
        q.requires_grad_()
        return y + k, q.requires_grad

    compiled = framejit.compile(on_input, backend="eager")
    for seed in (2, 3):
        q, k = _inputs(seed)
        q2 = q.clone()
        with torch.no_grad():
            got, want = compiled(q, k), on_input(q2, k)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and q.requires_grad == q2.requires_grad
    compiled = framejit.compile(fresh_zeros, backend="eager")
    for seed in (4, 5):  # grad mode on: the fresh leaf joins autograd; gradients as eager's
        q, k = _inputs(seed)
        z_got, out_got = compiled(q, k)
        z_want, out_want = fresh_zeros(q, k)
        out_got.sum().backward()
        out_want.sum().backward()
        torch.testing.assert_close(out_got, out_want)
        torch.testing.assert_close(z_got.grad, z_want.grad)


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_detach_in_place_of_an_input_detaches_the_callers_tensor(backend):
    """NOTE [detach_ of a tensor from outside] (capture/unbound_tensor_methods.py): `h.detach_()` on an argument
    (truncated backpropagation's hidden state) leaves the caller's tensor detached, as eager does; onnxrt's graph left
    it requiring grad with its grad_fn."""
    def fn(x):
        y = x * 2
        x.detach_()
        return y, x * 3

    compiled = framejit.compile(fn, backend=backend)
    for make in (lambda: torch.ones(3, requires_grad=True) * 1, lambda: torch.ones(3, requires_grad=True)):
        x, x_eager = make(), make()
        got, want = compiled(x), fn(x_eager)
        _same(got, want)
        assert (x.requires_grad, x.grad_fn is None) == (x_eager.requires_grad, x_eager.grad_fn is None)


class _Sub(torch.Tensor):
    pass


def detach_results(a):
    y = a * 2  # of a subclass: a view in eager (torch's _convert re-wraps it by as_subclass)
    return y.detach().detach_()


def test_detach_in_place_of_a_subclass_result_raises_as_eager():
    """NOTE [detach_ of a tensor from outside]: eager raises RuntimeError "Can't detach views in-place" for an op
    result of a plain subclass; the trace returned a tensor (hfixPre). Plain tensors: a graph node, as before."""
    compiled = framejit.compile(detach_results, backend="eager")
    for i, make in enumerate((lambda n: torch.ones(n, requires_grad=True).as_subclass(_Sub),
                              lambda n: torch.ones(n, requires_grad=True))):
        outcomes = []
        for fn in (detach_results, compiled):
            try:
                r = fn(make(2 + i))
                outcomes.append((type(r).__name__, r.requires_grad, r.tolist()))
            except RuntimeError as e:
                outcomes.append(("RuntimeError", str(e)[:40]))
        assert outcomes[1] == outcomes[0], i
