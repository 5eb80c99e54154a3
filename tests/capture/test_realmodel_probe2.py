"""Defects found by the fourth new-user probe of real library code (issue 11, helper h11d), each reduced to a
small program. Differential: eager vs compiled on fresh inputs over several calls and shapes, with graph counts
where capturing whole is the point.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

import framejit
from tests.helpers import CountingBackend, eager_frames


def _compiled(fn):
    backend = CountingBackend()
    return framejit.compile(fn, backend=backend), backend


class _UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)

    def forward(self, x):
        return self.up(self.down(x), output_size=x.size()) + x  # output_size picks the odd/even size back


def test_conv_transpose_with_output_size_is_one_graph():
    """nn.ConvTranspose2d's `output_size=` path builds lists with `torch.jit.annotate(list[int], [])`, a
    TorchScript hint that returns its value: it was a graph break (3 graphs, stock 1)."""
    torch.manual_seed(0)
    model = _UNet()
    compiled, backend = _compiled(model)
    before = eager_frames()
    for h, w in ((7, 9), (8, 9), (7, 9)):  # odd and even heights need different output paddings
        x = torch.randn(1, 2, h, w)
        torch.testing.assert_close(compiled(x), model(x))
    assert eager_frames() == before
    assert backend.graph_count == 2  # one per input size


_MISSING = object()
_OTHER = object()


def _fill(x, default=_MISSING):
    if default is _MISSING:
        return x + 1
    return x * default


def test_sentinel_object_is_compared_by_identity():
    """`_MISSING = object()` (torch.nn.utils._named_member_accessor, many libraries' sentinels) was an
    unsupported value: every comparison with it was a graph break."""
    compiled, backend = _compiled(_fill)
    before = eager_frames()
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.testing.assert_close(compiled(x, 2.0), x * 2.0)
    assert backend.graph_count == 2
    global _MISSING
    saved, _MISSING = _MISSING, _OTHER  # another sentinel: the identity is guarded, so the trace is redone
    try:
        with pytest.raises(TypeError):
            _fill(x)  # eager: `x * <object>`
        with pytest.raises(TypeError):
            compiled(x)
    finally:
        _MISSING = saved
    torch.testing.assert_close(compiled(x), x + 1)
    assert eager_frames() == before


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight  # tied, as input and output embeddings are
        self.shared = self.a  # one module under two names

    def forward(self, x):
        return self.b(self.a(x))


def _names_and_sums(model, x):
    out = model(x)
    for name, p in model.named_parameters(prefix="m", remove_duplicate=False):
        out = out + p.sum() * len(name)
    for name, m in model.named_modules(prefix="top", remove_duplicate=False):
        out = out + len(name)
    return out, [n for n, _ in model.named_parameters(remove_duplicate=False)], \
        [n for n, _ in model.named_buffers(prefix="p")], [n for n, _ in model.named_modules(prefix="t")]


def test_named_members_with_prefix_and_duplicates():
    """`named_parameters(remove_duplicate=False)` (torch.func.functional_call's tied-weights analysis) and
    `prefix=` were graph breaks; tied parameters and shared modules are listed under each name."""
    torch.manual_seed(0)
    model = _Tied()
    compiled, backend = _compiled(_names_and_sums)
    before = eager_frames()
    for n in (2, 2, 5):
        x = torch.randn(n, 3)
        got, want = compiled(model, x), _names_and_sums(model, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
        if n == 2:  # one graph for the size (the second size compiles a dynamic one)
            assert backend.graph_count == 1
    assert eager_frames() == before


def _with_params(net, x, scale):
    params = {k: v * scale for k, v in net.named_parameters()}
    return functional_call(net, params, (x,)), net(x)


def test_functional_call_runs_the_module_with_the_given_tensors():
    """torch.func.functional_call swaps tensors into `module._parameters` (a dict write), runs the module and
    swaps them back. Module attribute reads went to the real dict, which the trace had not written yet (writes
    are replayed after the graph): the compiled call silently ran with the module's own weights."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    compiled, backend = _compiled(_with_params)
    before = eager_frames()
    for n in (4, 4, 6):
        x, scale = torch.randn(n, 3), torch.rand(())
        got, want = compiled(net, x, scale), _with_params(net, x, scale)
        torch.testing.assert_close(got, want)
        assert not torch.allclose(got[0], got[1])
        assert all(type(p) is nn.Parameter for p in net.parameters())  # swapped back, as in eager
        if n == 4:
            assert backend.graph_count == 1
    assert eager_frames() == before


def _swap_weight(model, x, w):
    saved = model._parameters["weight"]
    model._parameters["weight"] = w
    try:
        first = model(x)
    finally:
        model._parameters["weight"] = saved
    return first, model(x), F.linear(x, model.weight, model.bias)


@pytest.mark.parametrize("backend_name", ["counting", "onnxrt"])
def test_writes_into_a_modules_parameter_dict_are_seen_by_its_forward(backend_name):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    backend = CountingBackend() if backend_name == "counting" else "onnxrt"
    compiled = framejit.compile(_swap_weight, backend=backend)
    before = eager_frames()
    for n in (2, 2, 3):
        x, w = torch.randn(n, 3), torch.randn(2, 3)
        got, want = compiled(model, x, w), _swap_weight(model, x, w)
        torch.testing.assert_close(got, want)
        assert model._parameters["weight"] is model.weight and type(model.weight) is nn.Parameter
        if n == 2 and backend_name == "counting":
            assert backend.graph_count == 1
    assert eager_frames() == before


def _maml_loss(net, x, y):
    params = dict(net.named_parameters())
    loss = F.mse_loss(functional_call(net, params, (x,)), y)
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    fast = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads)}
    return F.mse_loss(functional_call(net, fast, (x,)), y)


def test_maml_inner_step_matches_eager():
    """A MAML inner step: functional_call with the adapted parameters after torch.autograd.grad."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1))
    compiled, backend = _compiled(_maml_loss)
    before = eager_frames()
    for n in (4, 4, 7):
        x, y = torch.randn(n, 3), torch.randn(n, 1)
        torch.testing.assert_close(compiled(net, x, y), _maml_loss(net, x, y))
        if n == 4:  # torch.autograd.grad is a break: 2 graphs for the size, as stock torch.compile
            assert backend.graph_count == 2
    assert eager_frames() == before
