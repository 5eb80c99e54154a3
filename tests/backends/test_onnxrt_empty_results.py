"""Empty results on onnxrt (NOTE [Empty results as constants], backends/onnxrt/translate.py).

ORT's optimizer dropped an Expand of a size-1 dimension to size 0 (the result kept size 1), which is the
backward of a mean over a dimension of size 0 (revD D3): backward raised "invalid gradient ... got [1, 3] but
expected shape compatible with [0, 3]" where eager gives a (0, 3) gradient, and a forward-only expand to 0
returned a (3, 1) tensor. Differential: eager vs onnxrt on fresh inputs over sizes that include 0, static and
dynamic, values and gradients (shapes included) compared.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import OnnxrtRecorder


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _expand_to_empty(t, z):
    return t.unsqueeze(1).expand(-1, z.size(0)) * 2 + 1


@pytest.mark.parametrize("dynamic", [False, None])
def test_expand_of_a_size_one_dimension_to_zero(dynamic):
    recorder = OnnxrtRecorder()
    compiled = framejit.compile(_expand_to_empty, backend=recorder, dynamic=dynamic)
    for seed, (n, m) in enumerate([(3, 0), (4, 0), (5, 0), (4, 2)]):
        t, z = torch.randn(n, generator=_g(seed)), torch.randn(m)
        expected, got = _expand_to_empty(t, z), compiled(t, z)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected)
    rows = recorder.rows()
    assert rows and all(row["ort_nodes"] and not row["eager_graph"] for row in rows), rows
    assert not [n for row in rows for n in row["eager_nodes"] if "expand" in n], rows


REDUCTIONS = {
    "mean_of_transpose": lambda x: x.t().mean(1),
    "sum_and_mean_keepdim": lambda x: x.t().sum(1, keepdim=True) + x.t().mean(1, keepdim=True),
    "var_of_permute": lambda x: x.unsqueeze(-1).permute(1, 2, 0).var(-1),
    "mean_of_chunk": lambda x: torch.cat([c.mean(0, keepdim=True) for c in x.chunk(1, 0)]),
    "mean_of_expand": lambda x: x.unsqueeze(0).expand(2, -1, -1).mean(1),
    "amax_of_transpose": lambda x: x.t().amax(1),  # raises at size 0, as in eager
    "sum_of_split": lambda x: torch.stack([p.sum(0) for p in x.split(1, 0)] + [x.t().sum(1)]),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_training_reductions_over_an_empty_dimension(name):
    fn = REDUCTIONS[name]
    compiled = framejit.compile(fn, backend="onnxrt")  # size 0 specialises: static and symbolic graphs
    for seed, rows in enumerate([0, 2, 0, 3]):
        x = torch.randn(rows, 3, generator=_g(seed))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        try:
            expected = fn(xe)
        except Exception as error:  # amax over nothing: IndexError
            with pytest.raises(type(error)):
                compiled(xc)
            continue
        got = compiled(xc)
        torch.testing.assert_close(got, expected, equal_nan=True)
        weights = torch.linspace(0.5, 1.5, expected.numel()).reshape(expected.shape)
        (expected * weights).sum().backward()
        (got * weights).sum().backward()
        assert xc.grad.shape == xe.grad.shape == x.shape
        torch.testing.assert_close(xc.grad, xe.grad, equal_nan=True)
