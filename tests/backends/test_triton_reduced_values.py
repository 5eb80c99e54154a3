"""float16/bfloat16 and narrow-integer values on the triton backend (TRITON_INTERPRET=1), bit for bit against eager.

Found by a differential sweep of pointwise ops and reductions in those dtypes (/tmp/htri/cases.py, helper htri).
Each group names the NOTE of its fix. Every function runs compiled on several fresh inputs, edge values included.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import framejit  # noqa: E402
from framejit.backends.triton import triton as triton_backend  # noqa: E402
from framejit.backends.triton.runtime import CompiledGraph  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]
REDUCED = [torch.float16, torch.bfloat16]


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.is_floating_point():
        assert torch.equal(got, want), (got, want)
        return
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), (got, want)
    assert torch.equal(got.signbit()[~nan], want.signbit()[~nan]), (got, want)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    assert torch.equal(got[~nan].view(bits), want[~nan].view(bits)), (got, want)


def _compare(fn, calls):
    framejit.reset()
    compiled = framejit.compile(fn, backend="triton", dynamic=False)
    for args in calls:
        _same(compiled(*[a.clone() for a in args]), fn(*args))


def _kernels(fn, example, externs=0):
    """`fn` compiled by the triton backend itself: its kernels compute, `externs` ops run eager's kernel."""
    compiled = triton_backend(torch.fx.symbolic_trace(fn), list(example))
    assert isinstance(compiled, CompiledGraph), getattr(compiled, "reason", "?")
    assert len(compiled.fallbacks) == externs, compiled.fallbacks
    return compiled


def _values(dtype, seed, n=8):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * 100).to(dtype)


# NOTE [Literals hold their dtype's value] (backends/triton/ir.py)
@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_fills_hold_the_value_their_dtype_stores(dtype):
    def fn(x):
        return (torch.full((4,), 9000.0, dtype=dtype) - 9000 + x[:4] * 0, torch.full_like(x, 0.1) * 3,
                x == torch.full_like(x, 9000.0), torch.zeros_like(x) + 1.1)

    calls = [(torch.tensor([9024.0, 9000.0, 0.1, 0.3, -1.0, math.inf, 8992.0, 1.1], dtype=dtype),)]
    _compare(fn, calls + [(_values(dtype, seed),) for seed in (1, 2)])


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8], ids=str)
def test_numbers_out_of_a_narrow_integer_range_wrap_or_raise_as_in_eager(dtype):
    def wraps(a):
        return a + 300, a % 300, a.clamp(-3, 5)

    def raises(a):
        return torch.where(a > 2, a, 300)

    calls = [(torch.tensor([0, 1, 2, 3, 7, 100, 127, 45], dtype=dtype),),
             (torch.arange(10, 20, dtype=dtype),), (torch.tensor([-1, -128, 5, 3], dtype=dtype),)]
    _compare(wraps, calls)
    compiled = _kernels(wraps, calls[0])  # the kernel computes them (Triton refused a literal 300 for int8)
    for args in calls:
        _same(compiled(*args), wraps(*args))
    compiled = _kernels(raises, calls[0], externs=1)  # scalar_tensor(300, dtype=int8): eager's op raises
    for (a,) in calls:
        with pytest.raises(RuntimeError, match="cannot be converted"):
            raises(a)
        with pytest.raises(RuntimeError, match="cannot be converted"):
            compiled(a)


# NOTE [bfloat16 widening in the interpreter] (backends/triton/codegen.py)
def test_bfloat16_subnormals_and_negative_zero_are_read_as_eager_reads_them():
    def fn(x):
        return x * 3, x.float(), x.to(torch.bool), x / 0.7, torch.where(x > 0, x, 1.0)

    tiny = torch.finfo(torch.bfloat16).tiny
    edges = torch.tensor([2.9e-39, -1.47e-39, tiny / 4, -0.0, 0.0, tiny, 1e-40, -tiny / 8], dtype=torch.bfloat16)
    compiled = _kernels(fn, (edges,))
    for x in (edges, edges.flip(0), (torch.randn(8, generator=torch.Generator().manual_seed(3)) * 1e-39).bfloat16()):
        _same(compiled(x), fn(x))
    _compare(fn, [(edges,), (edges.flip(0),)])


# NOTE [bfloat16 literals in the interpreter] (backends/triton/codegen.py)
def test_bfloat16_fills_and_negative_zero_literals():
    def fn(x):
        return (torch.full((4,), -0.0, dtype=torch.bfloat16), torch.full((4,), 1.5, dtype=torch.bfloat16),
                x + torch.full((4,), -0.0, dtype=torch.bfloat16), torch.where(x > 0, x, -0.0))

    calls = [(torch.tensor([1.0, -1.0, 0.0, -0.0], dtype=torch.bfloat16),), (_values(torch.bfloat16, 4, 4),)]
    compiled = _kernels(fn, calls[0])
    for args in calls:
        _same(compiled(*args), fn(*args))
    for got, want in zip(compiled(*calls[0]), fn(*calls[0])):
        assert torch.equal(got.signbit(), want.signbit())


# NOTE [Floor division as eager divides] (backends/triton/lowering_pointwise.py)
@pytest.mark.parametrize("dtype", REDUCED + [torch.float32], ids=str)
def test_floor_and_trunc_division_round_as_eager(dtype):
    def fn(a, b):
        return (torch.div(a, b, rounding_mode="floor"), torch.div(a, b, rounding_mode="trunc"),
                torch.div(a, 0.1, rounding_mode="floor"), torch.div(a, 0.7, rounding_mode="trunc"))

    a = torch.tensor([9024.0, 9024.0, math.inf, -math.inf, math.nan, 1.0, -0.0, 5.0, 9024.0, -9024.0], dtype=dtype)
    b = torch.tensor([45.0, 258.0, 3.0, 3.0, 3.0, 0.1, 3.0, 0.0, -45.0, 258.0], dtype=dtype)
    calls = [(a, b), (a.flip(0), b)]
    calls += [(_values(dtype, seed, 10) * 30, _values(dtype, seed + 9, 10) / 3) for seed in (1, 2)]
    compiled = _kernels(fn, calls[0])
    for args in calls:
        _same(compiled(*args), fn(*args))
    _compare(fn, calls)


# NOTE [Operands of remainder and pow in the result dtype], NOTE [bfloat16 cubes on CPU] (lowering_pointwise.py)
@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_remainder_fmod_and_pow_read_numbers_in_the_result_dtype(dtype):
    def fn(x):
        return (x % 3.3, torch.fmod(x, 3.3), x % torch.tensor(0.3, dtype=torch.float64),
                torch.fmod(x, torch.tensor(1.1)), x.abs() ** 1.1, x ** 3, x ** -2, x ** 0.5,
                x ** -0.5 if dtype == torch.float16 else x)  # bfloat16: eager's x ** -0.5 is not exactly rounded

    edges = torch.tensor([-2.5, 3.5, 34.5, -106.0, 62.0, -math.inf, math.inf, math.nan, -0.0, 1000.5], dtype=dtype)
    calls = [(edges,), (edges.flip(0),), (_values(dtype, 5, 10),), (_values(dtype, 6, 10),)]
    compiled = _kernels(fn, calls[0])
    for args in calls:
        _same(compiled(*args), fn(*args))


# (floor, ceil and trunc of a bool tensor already raise while the graph is traced)
@pytest.mark.parametrize("op", [torch.abs, torch.relu, torch.argmax, torch.argmin], ids=lambda f: f.__name__)
def test_ops_without_a_bool_kernel_raise_as_in_eager(op):
    def fn(mask):
        return op(mask)

    framejit.reset()
    compiled = framejit.compile(fn, backend="triton", dynamic=False)
    for mask in (torch.tensor([True, False, True]), torch.tensor([False, True, False])):
        with pytest.raises((RuntimeError, NotImplementedError)) as want:
            fn(mask)
        with pytest.raises(type(want.value)):
            compiled(mask)


# NOTE [Eager's maximum on ties] (codegen.py): written with two wheres
@pytest.mark.parametrize("dtype", REDUCED + [torch.float32], ids=str)
def test_maximum_and_minimum_with_a_0d_tensor(dtype):
    def fn(x, z):
        return torch.maximum(x, z), torch.minimum(z, x), torch.maximum(z, x)

    x = torch.tensor([0.1, -0.0, 0.0, math.nan, math.inf, -1.0, 0.5, 2.0], dtype=dtype)
    calls = [(x, torch.tensor(0.5)), (x.flip(0), torch.tensor(math.nan)), (_values(dtype, 7), torch.tensor(-0.0))]
    compiled = _kernels(fn, calls[0])
    for args in calls:
        _same(compiled(*args), fn(*args))


def test_log1p_of_values_near_the_dtype_maximum():
    def fn(x):
        return torch.log1p(x)

    for dtype in REDUCED + [torch.float32]:
        big = torch.finfo(dtype).max
        x = torch.tensor([big, big / 3, 1e-3, -0.5, 0.0, math.inf], dtype=dtype)
        compiled = _kernels(fn, (x,))
        for args in ((x,), (x.flip(0),)):
            torch.testing.assert_close(compiled(*args), fn(*args), equal_nan=True)
