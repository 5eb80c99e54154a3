"""bfloat16 results of the triton backend under Triton's interpreter, bit for bit against eager (issue 14,
h13fixB; review revB findings 5 and 6).

NOTE [bfloat16 rounding in the interpreter] (codegen.py): a cast to bfloat16 is built from the float32 bits,
subnormals included. NOTE [Scalars of reduced-precision addition on CPU] (lowering_pointwise.py): a 0-d tensor
of another dtype added to a bfloat16/float16 tensor is rounded to that dtype first, as eager's CPU kernel does.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit import config
from framejit.backends.triton import triton as triton_backend
from framejit.backends.triton.runtime import CompiledGraph

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


def _same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan)
    differ = actual[~nan].view(torch.int16) != expected[~nan].view(torch.int16)
    assert int(differ.sum()) == 0, (f"{int(differ.sum())} of {expected.numel()} differ, e.g. "
                                    f"{actual[~nan][differ][:3].tolist()} vs {expected[~nan][differ][:3].tolist()}")


def _compiled_graph(fn, example):
    gm = torch.fx.symbolic_trace(fn)
    compiled = triton_backend(gm, list(example))
    assert isinstance(compiled, CompiledGraph), f"ran eagerly: {getattr(compiled, 'reason', '?')}"
    assert compiled.fallbacks == []
    return compiled


def _first(result):
    return result[0] if isinstance(result, (list, tuple)) else result


def _subnormals(seed: int, n: int = 3000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * 100 * 1e-40  # ~1e-38 and below: bf16 subnormals and normals near them


def test_casts_of_subnormal_float32_values_to_bfloat16_round_as_eager():
    def fn(x):
        return x.to(torch.bfloat16)

    compiled = _compiled_graph(fn, [_subnormals(0)])
    for seed in (0, 1, 2):
        x = _subnormals(seed)
        _same_bits(_first(compiled(x)), fn(x))
    edges = torch.tensor([1.17e-38, 9.2e-41, 1.26e-40, -5e-39, -6.637e-39, 0.0, -0.0, 1e-45, -1e-45,
                          3.3961e38, 3.4e38, -3.4e38, float("inf"), -float("inf"), float("nan"), 1.0 + 2 ** -8,
                          1.0 + 3 * 2 ** -8, 2 ** -126, 2 ** -133 * 3])
    _same_bits(_first(compiled(edges)), fn(edges))


@pytest.mark.parametrize("op", ["add", "sub", "radd", "rsub"])
@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64, torch.int64])
def test_a_bfloat16_tensor_and_a_0d_tensor_of_another_dtype_round_the_0d_operand(op, scalar_dtype):
    def fn(x, t):
        x = x.to(torch.bfloat16)
        if op == "add":
            return x + t
        if op == "sub":
            return x - t
        return t + x if op == "radd" else t - x

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        value = [0.1, 7.77, 1001][seed % 3] if scalar_dtype != torch.int64 else [1001, 123457, 3][seed % 3]
        return torch.randn(3000, generator=g) * 100, torch.tensor(value, dtype=scalar_dtype)

    compiled = _compiled_graph(fn, inputs(0))
    for seed in (0, 1, 2):
        x, t = inputs(seed)
        _same_bits(_first(compiled(x, t)), fn(x, t))


def test_mul_by_a_0d_tensor_keeps_it_in_float32_as_eager():
    def fn(x, t):
        return x.to(torch.bfloat16) * t

    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(3000, generator=g) * 100, torch.tensor([0.1, 0.3, 7.77][seed])

    compiled = _compiled_graph(fn, inputs(0))
    for seed in (0, 1, 2):
        x, t = inputs(seed)
        _same_bits(_first(compiled(x, t)), fn(x, t))


def test_the_review_program_compiled_end_to_end():
    def f(x):
        return x.to(torch.bfloat16) + torch.tensor(0.1), (x * 1e-40).to(torch.bfloat16)

    c = framejit.compile(f, backend="triton")
    g = torch.Generator().manual_seed(1)
    for n in (3000, 3000, 2000):
        x = torch.randn(n, generator=g) * 100
        for actual, expected in zip(c(x), f(x)):
            _same_bits(actual, expected)
