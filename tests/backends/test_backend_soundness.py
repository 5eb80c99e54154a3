"""Differential soundness tests of the lowered backends (onnxrt, triton) on special values.

Each op case is compiled with `framejit.compile(fn, backend=..., fullgraph=True)` and called on inputs
that hold NaN, +-inf, -0.0 and +0.0 next to ordinary values (one row entirely NaN, one without any), then
on an empty input and on broadcasting inputs. The result must equal eager's exactly where eager's is NaN
(NaN in the same places), have the same sign of zero, the same shape, dtype and close values elsewhere.
Triton runs under TRITON_INTERPRET=1 (tests/backends/conftest.py) on tiny shapes and a subset of cases.
Eager's own gelu(inf) depends on the tensor's length, so gelu is checked on finite values; so do eager's
+-0.0 ties in maximum/minimum/amax, so the sign-of-zero cases (compared bit for bit, further below) use
inputs shorter than eager's vector loops.

The view cases check aliasing: a view of an input returned by the graph must be a view (a write to it
reaches the input), and an in-place update through a view must reach the input when the graph also
breaks at a boolean-mask index (the view is then a graph output handed to the resume function).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import OnnxrtRecorder

NAN, INF = float("nan"), float("inf")


def _special(rows: int = 4, cols: int = 5) -> torch.Tensor:
    """Row 0: NaN, inf, -inf, -0.0, 0.0; row 1: all NaN; row 2: -0.0 and negatives; others: ordinary."""
    g = torch.Generator().manual_seed(rows * 31 + cols)
    x = torch.randn(rows, cols, generator=g)
    x[0, : min(cols, 5)] = torch.tensor([0.5, INF, NAN, -0.0, -INF])[: min(cols, 5)]
    if rows > 1:
        x[1] = NAN
    if rows > 2:
        x[2] = -x[2].abs()
        x[2, 0] = -0.0
    return x


def _ordinary_like(t: torch.Tensor) -> torch.Tensor:
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(7))


# name -> (function, [input makers], broadcast input makers or None)
# Every function takes tensors whose last dimension may be 0 (the empty case reshapes them).
X = lambda: _special()  # noqa: E731
Y = lambda: _special().flip(0).flip(1).contiguous()  # noqa: E731
ROW = lambda: _special(1, 5)[0]  # noqa: E731  broadcasts against X
IMG = lambda: _special(8, 8).reshape(1, 4, 4, 4)  # noqa: E731  NaN and inf inside pooling windows

CASES = {
    # reductions
    "amax": (lambda x: x.amax(1), [X]),
    "amin": (lambda x: x.amin(dim=0), [X]),
    "max_all": (lambda x: x.max(), [X]),
    "min_all": (lambda x: x.min(), [X]),
    "max_dim": (lambda x: torch.max(x, dim=1), [X]),
    "min_dim_keepdim": (lambda x: torch.min(x, dim=0, keepdim=True), [X]),
    "argmax": (lambda x: x.argmax(1), [X]),
    "argmin": (lambda x: x.argmin(0), [X]),
    "argmax_flat": (lambda x: x.argmax(), [X]),
    "sum": (lambda x: x.sum(1), [X]),
    "mean": (lambda x: x.mean(1), [X]),
    "mean_all": (lambda x: x.mean(), [X]),
    "var": (lambda x: x.var(1), [X]),
    "std_unbiased0": (lambda x: x.std(1, unbiased=False), [X]),
    "prod": (lambda x: x.prod(1), [X]),
    "logsumexp": (lambda x: torch.logsumexp(x, 1), [X]),
    "softmax": (lambda x: torch.softmax(x, 1), [X]),
    "log_softmax": (lambda x: F.log_softmax(x, 1), [X]),
    "cumsum": (lambda x: x.cumsum(1), [X]),
    "norm": (lambda x: torch.linalg.vector_norm(x, dim=1), [X]),
    # pointwise
    "add_broadcast": (lambda x, y: x + y, [X, ROW]),
    "mul": (lambda x, y: x * y, [X, Y]),
    "div": (lambda x, y: x / y, [X, Y]),
    "neg_abs": (lambda x: (-x, x.abs()), [X]),
    "relu": (lambda x: torch.relu(x), [X]),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), [X]),
    "clamp_one_side": (lambda x: (x.clamp_min(0.0), x.clamp(max=-1.0), x.clamp(min=0.5)), [X]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [IMG]),
    "atan2": (lambda x, y: torch.atan2(x, y), [X, Y]),
    "floor_divide_remainder": (lambda x: (torch.floor_divide(x, 0.7), torch.remainder(x, 1.5)), [X]),
    "div_rounding": (lambda x, y: (torch.div(x, y, rounding_mode="floor"), torch.div(x, 2.0, rounding_mode="trunc")),
                     [X, Y]),
    "maximum_minimum": (lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)), [X, ROW]),
    "where": (lambda x, y: torch.where(x > 0, x, y), [X, Y]),
    "sqrt_exp_log": (lambda x: (x.sqrt(), x.exp(), x.log()), [X]),
    "sigmoid_tanh": (lambda x: (x.sigmoid(), x.tanh()), [X]),
    # eager's own gelu(inf) is inf on a 1-element tensor and NaN in its vectorized loop: no semantics to
    # match, so infinities are clamped away for gelu
    "gelu_silu": (lambda x: (F.gelu(x.clamp(-1e4, 1e4)), F.silu(x)), [X]),
    "sign_floor_round": (lambda x: (x.sign(), x.floor(), x.round()), [X]),
    "compare": (lambda x, y: (x < y, x == y, x != y), [X, Y]),
    "isnan_isinf": (lambda x: (x.isnan(), x.isinf()), [X]),
    "nan_to_num": (lambda x: torch.nan_to_num(x), [X]),
    "masked_fill": (lambda x: x.masked_fill(x.isnan(), 0.5), [X]),
    "pow": (lambda x: x.pow(2) + x.abs().pow(0.5), [X]),
    "copy_broadcast": (lambda x, w: x.clone().copy_(w), [X, ROW]),
    "matmul": (lambda x, y: x @ y.mT, [X, Y]),
}

# the subset triton runs (interpret mode is slow): the reductions, where the NaN and empty semantics
# live in framejit's own code generation, and a few pointwise ops
TRITON_CASES = ["amax", "amin", "max_all", "max_dim", "min_dim_keepdim", "argmax", "argmin", "sum", "mean",
                "var", "softmax", "add_broadcast", "relu", "maximum_minimum", "clamp", "clamp_one_side", "copy_broadcast",
                "where", "neg_abs", "sign_floor_round"]


def assert_identical(actual, expected, where: str) -> None:
    """Same structure, shape, dtype; NaN at the same places; same sign of zero; close values."""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) or hasattr(expected, "_fields"), where
        assert len(actual) == len(expected), where
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_identical(a, e, f"{where}[{k}]")
        return
    assert isinstance(actual, torch.Tensor), f"{where}: {type(actual)}"
    assert actual.shape == expected.shape, f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
    if expected.is_floating_point():
        assert torch.equal(actual.isnan(), expected.isnan()), f"{where}: NaN at other places\n{actual}\n{expected}"
        zeros = expected == 0
        assert torch.equal(actual[zeros].signbit(), expected[zeros].signbit()), \
            f"{where}: sign of zero differs\n{actual}\n{expected}"
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True, msg=where)
    else:
        assert torch.equal(actual, expected), f"{where}:\n{actual}\n{expected}"


def _empty_like_inputs(makers) -> list:
    """The case's inputs with their last dimension cut to 0 (a row vector becomes empty too)."""
    return [m()[..., :0].contiguous() for m in makers]


def _calls(makers) -> list[tuple[str, list]]:
    first = [m() for m in makers]
    return [
        ("special values", first),
        ("ordinary values", [_ordinary_like(t) for t in first]),
        ("special values again", [m() for m in makers]),
        ("empty", _empty_like_inputs(makers)),
    ]


# cases whose ops run in torch by design on onnxrt (wrong on special values in ONNX: translate.py)
# copy_broadcast is data movement only: it stays in torch since NOTE [Copies stay in torch] (584d6b6)
ONNXRT_IN_TORCH = {"atan2", "floor_divide_remainder", "div_rounding", "copy_broadcast"}




def _run_case(name: str, backend: str) -> None:
    fn, makers = CASES[name]
    recorder = OnnxrtRecorder() if backend == "onnxrt" else None
    compiled = framejit.compile(fn, backend=recorder or backend, fullgraph=True)
    if recorder is not None and name not in ONNXRT_IN_TORCH:
        compiled(*[m() for m in makers])
        assert recorder.ort_nodes() > 0, f"{name}: nothing ran in ONNX Runtime"
    for label, inputs in _calls(makers):
        try:
            expected = fn(*[t.clone() for t in inputs])
        except Exception as e:  # noqa: BLE001 - eager rejects this input (amax over nothing): so must we
            with pytest.raises(type(e)):
                compiled(*[t.clone() for t in inputs])
            continue
        actual = compiled(*[t.clone() for t in inputs])
        assert_identical(actual, expected, f"{name} on {label} ({backend})")


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnxrt_matches_eager_on_special_values(name):
    _run_case(name, "onnxrt")


@pytest.mark.parametrize("name", TRITON_CASES)
def test_triton_matches_eager_on_special_values(name):
    _run_case(name, "triton")


def test_case_lists_name_known_cases():
    assert set(TRITON_CASES) <= set(CASES) and ONNXRT_IN_TORCH <= set(CASES)


# -- views ------------------------------------------------------------------------------------------
BACKENDS = ["eager", "onnxrt", "triton"]


def _returns_slice(x):
    return x[1:]


def _returns_transpose_and_sum(x):
    return x.mT, x.sum()


def _returns_output_and_its_view(x):
    y = x * 2
    return y, y[0]


def _mutates_then_returns_view(x):
    x.add_(1)
    return x[1:]


def _mutates_then_returns_view_and_input(x):
    x.mul_(2)
    return x.mT, x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_returns_slice, _returns_transpose_and_sum, _returns_output_and_its_view,
                                _mutates_then_returns_view, _mutates_then_returns_view_and_input],
                         ids=lambda f: f.__name__)
def test_returned_views_alias_as_in_eager(backend, fn):
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for seed in range(3):
        x = torch.randn(3, 3, generator=torch.Generator().manual_seed(seed))
        xe, xc = x.clone(), x.clone()
        expected, actual = fn(xe), compiled(xc)
        for out_e, out_c in zip(*(r if isinstance(r, tuple) else (r,) for r in (expected, actual))):
            out_e.add_(100) if out_e.dim() else None
            out_c.add_(100) if out_c.dim() else None
        torch.testing.assert_close(xc, xe)
        torch.testing.assert_close(actual, expected)


def _inplace_through_view_then_mask(t):
    v = t.mT
    y = t[t > 0.5]  # data-dependent shape: a graph break after the view was made
    v += 1
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_update_through_view_across_a_mask_break(backend):
    compiled = framejit.compile(_inplace_through_view_then_mask, backend=backend)
    for seed in range(3):
        t = torch.rand(3, 3, generator=torch.Generator().manual_seed(seed))
        te, tc = t.clone(), t.clone()
        expected = _inplace_through_view_then_mask(te)
        actual = compiled(tc)
        torch.testing.assert_close(tc, te)
        torch.testing.assert_close(actual, expected)


def _transpose_in_place(x):
    x.t_()
    x.unsqueeze_(0)
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_shape_change_of_an_input(backend):
    """Soundness finding #4: `x.t_()` crashed the triton graph (the functionalized copy-back overlaps)."""
    compiled = framejit.compile(_transpose_in_place, backend=backend)
    for rows in (2, 2, 3):
        x = torch.arange(rows * 3.0).view(rows, 3)
        xe, xc = x.clone(), x.clone()
        torch.testing.assert_close(compiled(xc), _transpose_in_place(xe))
        assert xc.shape == xe.shape and xc.stride() == xe.stride()
        torch.testing.assert_close(xc, xe)


def _int64_reductions(x):
    return x.sum(), x.prod(), x.sum(0), x.cumprod(0)


def _near_zero(x):
    return torch.expm1(x), torch.log1p(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_where_eager_is_exact(backend):
    """Soundness findings #6 and #9: int64 sums above 2**53 and expm1/log1p near 0 (onnxrt computed them
    through a float, and as exp(x) - 1)."""
    big = framejit.compile(_int64_reductions, backend=backend, fullgraph=True)
    for x in (torch.tensor([2**60 + 1, 3]), torch.tensor([2**55 + 7, 1])):
        for actual, expected in zip(big(x.clone()), _int64_reductions(x.clone())):
            assert torch.equal(actual, expected), (actual, expected)
    small = framejit.compile(_near_zero, backend=backend, fullgraph=True)
    for x in (torch.tensor([1e-10, -1e-7, 1e-4]), torch.tensor([3e-9, 0.5, -2e-8])):
        for actual, expected in zip(small(x.clone()), _near_zero(x.clone())):
            torch.testing.assert_close(actual, expected, rtol=1e-6, atol=0)


def _bool_arithmetic(a, b):
    return a + a, a + b, a * b + a, (a + b).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_arithmetic(backend):
    """Soundness finding #7: triton added bools as 1-bit integers (True + True gave False)."""
    compiled = framejit.compile(_bool_arithmetic, backend=backend, fullgraph=True)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.rand(6, generator=g) > 0.5, torch.rand(6, generator=g) > 0.3
        for actual, expected in zip(compiled(a, b), _bool_arithmetic(a, b)):
            assert actual.dtype == expected.dtype and torch.equal(actual, expected), (actual, expected)


def _copy_into_clone(x, w):
    t1 = x.clone()
    t1.copy_(w)
    return t1


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_with_broadcasting_source_keeps_destination_shape(backend):
    compiled = framejit.compile(_copy_into_clone, backend=backend, fullgraph=True)
    for shape in [(4,), (1, 4), (3, 1)]:
        x, w = torch.randn(3, 4), torch.randn(*shape)
        torch.testing.assert_close(compiled(x, w), _copy_into_clone(x, w))


@pytest.mark.parametrize("op", ["argmax", "argmin", "max"])
def test_triton_looped_arg_reductions_take_the_first_nan(op):
    """Rows longer than the persistent-reduction limit are reduced in a loop over blocks: the first NaN
    still wins over every number and over later NaNs."""
    def fn(x):
        result = getattr(torch, op)(x, 1)
        return (result.values, result.indices) if op == "max" else result

    compiled = framejit.compile(fn, backend="triton", fullgraph=True, options={"persistent_reduction_limit": 4})
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(3))
    x[0, 17] = x[0, 30] = NAN
    x[1, 39] = NAN
    x[1, 0] = INF
    for inputs in (x, x.flip(1).contiguous(), torch.randn(3, 40)):
        assert_identical(compiled(inputs.clone()), fn(inputs.clone()), f"{op} looped (triton)")


def _random_draws(x):
    noise = torch.randn_like(x) * 2 + torch.rand(x.shape[0])
    return x + noise, F.dropout(x, 0.5, training=True), torch.randint(0, 10, (3,))


def test_onnxrt_random_ops_follow_torch_manual_seed():
    """Soundness finding #11: ORT's random ops drew from ORT's own generator, so the same torch.manual_seed
    gave other numbers than eager and torch's generator did not advance. They run in torch now."""
    compiled = framejit.compile(_random_draws, backend="onnxrt", fullgraph=True)
    for seed in range(3):
        x = torch.randn(5)
        torch.manual_seed(seed)
        expected, after_eager = _random_draws(x), torch.rand(2)
        torch.manual_seed(seed)
        actual, after_compiled = compiled(x), torch.rand(2)
        for a, e in zip(actual, expected):
            assert torch.equal(a, e), (a, e)
        assert torch.equal(after_compiled, after_eager)  # the generator advanced as in eager


# -- sign of zero and ties, compared bit for bit ------------------------------------------------------
# Eager's own answer on +-0.0 ties depends on the loop that computes it: maximum(-0.0, 0.0) is -0.0 in
# its scalar loop and 0.0 in its vector loop (from 16 floats or 8 doubles on AVX512, 8 and 4 on AVX2),
# amax keeps the first of tied zeros and max() the last in rows shorter than 32. The inputs here are
# shorter than any vector (eager's scalar loops), where eager has one answer, in both argument orders.
_A = [-0.0, 0.0, -0.0, 0.0, NAN, -0.0, 0.0, NAN, 1.5, -1.5, -0.4, 0.4, INF, -INF]
_B = [0.0, -0.0, -0.0, 0.0, -0.0, NAN, NAN, NAN, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0]
ZA = lambda: torch.tensor(_A)  # noqa: E731
ZB = lambda: torch.tensor(_B)  # noqa: E731

ZERO_CASES = {
    "maximum_minimum_ties": lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.max(a, b), torch.min(a, b)),
    "clamp_tensor_bounds": lambda a, b: (torch.clamp(a, min=b), torch.clamp(a, max=b), torch.clamp(a, b, b)),
    "clamp_zero_bounds": lambda a, b: (a.clamp(min=-0.0), a.clamp(max=-0.0), a.clamp(-0.0, 0.0), a.clamp(0.0, -0.0),
                                       a.clamp_min(0.0), F.relu(a), F.hardtanh(a, -0.0, 0.0)),
    "clamp_nan_bound": lambda a, b: (a.clamp(min=NAN), a.clamp(max=NAN), a.clamp(NAN, 1.0)),
    "where_zero_sign": lambda a, b: (torch.where(a > 0, b, a), torch.where(b.isnan(), a, b), torch.where(a == 0, -0.0, a),
                                     torch.where(a == 0, a, 0.0), a.masked_fill(a == 0, -0.0), F.threshold(a, 0.0, -0.0)),
    "rounding_zero_sign": lambda a, b: (a.trunc(), a.frac(), a.floor(), a.ceil(), a.round(), (a * 0.3).trunc()),
    "roots_of_zero": lambda a, b: (a ** 0.5, a ** -0.5, a.sqrt(), a.rsqrt(), a ** 2, a ** 3),
    "arithmetic_zero_sign": lambda a, b: (-a, a.abs(), a * 0, a * -0.0, a * b, a / b, a + b, a - b, b - a,
                                          torch.copysign(a, b), torch.sign(a)),
    "sums_from_plus_zero": lambda a, b: (torch.stack([a, b]).cumsum(0), torch.stack([a, b]).sum(0),
                                         F.avg_pool1d(torch.stack([a, b]).T.reshape(1, 1, -1), 2)),
    "reductions_of_ties": lambda a, b: (torch.stack([a, b]).amax(0), torch.stack([a, b]).amin(0),
                                        torch.stack([a, b]).max(0).values, torch.stack([a, b]).min(0).values,
                                        torch.stack([a, b]).T.amax(1)),
    "max_all_of_ties": lambda a, b: (a[:2].max(), b[:2].max(), a[:4].min(), b[:3].min(), a[1:3].max()),
    "odd_functions_at_zero": lambda a, b: (torch.tanh(a), F.tanhshrink(a), F.celu(a), torch.expm1(a), torch.sin(a)),
    "signbit_and_nan_tests": lambda a, b: (torch.signbit(a), torch.xlogy(b, a), torch.heaviside(a, b)),
    "logit_eps": lambda a, b: torch.logit(a, eps=0.1),
}
# pure bit patterns (no transcendental rounding): these must match eager's bits exactly
_NOT_BITWISE = {"odd_functions_at_zero", "logit_eps", "signbit_and_nan_tests"}
TRITON_ZERO_CASES = ["maximum_minimum_ties", "clamp_zero_bounds", "clamp_nan_bound", "where_zero_sign",
                     "rounding_zero_sign", "roots_of_zero", "arithmetic_zero_sign", "reductions_of_ties",
                     "max_all_of_ties", "odd_functions_at_zero"]


def assert_bitwise(actual, expected, where: str) -> None:
    """Same structure; tensors with the same dtype, shape and bits (NaN matches any NaN: eager's NaN sign
    bits are not part of its contract)."""
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), where
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_bitwise(a, e, f"{where}[{k}]")
        return
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, where
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), f"{where}:\n{actual}\n{expected}"
        return
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), f"{where}: NaN at other places\n{actual}\n{expected}"
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}[expected.dtype]
    same = actual.view(bits) == expected.view(bits)
    assert bool((same | nan).all()), f"{where}: bits differ (sign of zero?)\n{actual.tolist()}\n{expected.tolist()}"


def _run_zero_case(name: str, backend: str) -> None:
    fn = ZERO_CASES[name]
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    check = assert_identical if name in _NOT_BITWISE else assert_bitwise
    pairs = [(ZA()[:7], ZB()[:7]), (ZA()[7:], ZB()[7:]), (ZA().flip(0)[:7], ZB()[:7])]
    pairs += [(b, a) for a, b in pairs] + [(ZA()[:3].double(), ZB()[:3].double())]
    for a, b in pairs:
        check(compiled(a.clone(), b.clone()), fn(a.clone(), b.clone()), f"{name} ({backend}, {a.tolist()})")


@pytest.mark.parametrize("name", sorted(ZERO_CASES))
def test_onnxrt_sign_of_zero_and_ties(name):
    _run_zero_case(name, "onnxrt")


@pytest.mark.parametrize("name", TRITON_ZERO_CASES)
def test_triton_sign_of_zero_and_ties(name):
    _run_zero_case(name, "triton")


def test_onnxrt_where_cases_stay_in_ort():
    """The exact where (NOTE [Where keeps -0.0]) runs in ONNX Runtime, not in torch."""
    recorder = OnnxrtRecorder()
    compiled = framejit.compile(ZERO_CASES["where_zero_sign"], backend=recorder, fullgraph=True)
    compiled(ZA(), ZB())
    (info,) = recorder.rows()
    assert info["ort_nodes"] > 0 and not info["eager_graph"], info
    assert not [r for r in info["eager_nodes"].values() if "free op" not in r], info


def _topk_and_pool(x, img):
    values, indices = torch.topk(x, 3)
    pooled, where = F.max_pool2d(img, 2, return_indices=True)
    return values, indices, pooled, where


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_indices_of_tied_values_and_nan_windows(backend):
    """topk's order among tied values (NaN included) and max_pool's index in a window holding NaN are
    eager's own (onnxrt runs both in torch: ORT orders ties by index and skips NaN in MaxPool)."""
    compiled = framejit.compile(_topk_and_pool, backend=backend, fullgraph=True)
    rows = [[1.0, NAN, 2.0, NAN, 0.5, NAN], [2.0, 2.0, 2.0, 1.0, 2.0, 0.0], [NAN, NAN, NAN, 1.0, -0.0, 0.0]]
    for row in rows:
        x = torch.tensor(row)
        img = torch.tensor(row * 6).reshape(1, 1, 6, 6)
        assert_bitwise(compiled(x.clone(), img.clone()), _topk_and_pool(x.clone(), img.clone()), f"{row} ({backend})")


def _as_strided_input(x, v):
    return x + v.as_strided((2, 4), (4, 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_as_strided_reads_the_input_storage(backend):
    """Fuzzer seed 1011: as_strided of a transposed input reads its storage in eager's order (onnxrt read
    the dense transposed copy it hands to ORT)."""
    compiled = framejit.compile(_as_strided_input, backend=backend)
    views = [torch.arange(16.)[0:8].view(2, 4), torch.arange(8.).view(4, 2).t(), torch.arange(16.)[3:11].view(2, 4),
             torch.arange(8.).view(4, 2).t()]
    for k, v in enumerate(views):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(k))
        assert torch.equal(compiled(x, v), _as_strided_input(x, v)), (k, v.stride())


@pytest.mark.parametrize("layers,shape", [
    (lambda: [torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6)], (8, 4)),
    (lambda: [torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, momentum=None)], (2, 3, 6, 6)),
], ids=["linear_bn1d", "conv_bn2d_cumulative"])
def test_onnxrt_batch_norm_in_train_mode_without_grad(layers, shape):
    """NOTE [Batch norm in train mode on ORT]: outputs and running statistics as eager's, 3 calls."""
    import copy
    torch.manual_seed(0)
    model = torch.nn.Sequential(*layers()).train()
    reference = copy.deepcopy(model)
    compiled = framejit.compile(model, backend="onnxrt")
    for _ in range(3):
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), reference(x), rtol=1e-5, atol=1e-5)
        for name, buffer in reference.named_buffers():
            torch.testing.assert_close(dict(model.named_buffers())[name], buffer, rtol=1e-5, atol=1e-6)


def _layout_facts(t: torch.Tensor) -> tuple:
    """What a caller can observe of `t`'s layout: strides, contiguity, whether `.view(-1)` works."""
    try:
        t.view(-1)
        views = True
    except RuntimeError:
        views = False
    return tuple(t.stride()), t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last), views


def _channels_last(*shape):
    return torch.randn(*shape).to(memory_format=torch.channels_last)


def _permuted(*shape):
    return torch.randn(*shape).permute(2, 0, 1)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("fn,make,shapes", [
    (lambda x: x.relu() * 2, _channels_last, [(2, 3, 4, 5), (2, 3, 4, 5)]),
    (lambda x: (x + 1, x.sum(1), x[:, :1]), _channels_last, [(2, 3, 4, 5), (3, 2, 5, 4)]),
    (lambda x: x + x, _permuted, [(3, 4, 5), (4, 5, 6), (2, 3, 7)]),
    (lambda x: (x.t() + 1, x.view(-1)[1:], x[1:].t()), torch.randn, [(3, 4), (5, 6), (2, 8)]),
], ids=["channels_last", "channels_last_and_views", "permuted_dynamic", "transposed_results_dynamic"])
def test_pointwise_results_keep_eager_layout(backend, fn, make, shapes):
    """NOTE [Output strides follow eager] (backends/layout.py): eager keeps a pointwise op's input layout
    (channels_last, permuted); the lowered kernels wrote row-major results, so `.stride()`,
    `.is_contiguous()` and `.view(-1)` afterwards differed. Returned views of the input stay views."""
    compiled = framejit.compile(fn, backend=backend)
    for shape in shapes:
        torch.manual_seed(len(shape) + shape[0])
        x = make(*shape)
        expected, actual = fn(x), compiled(x)
        for k, (a, e) in enumerate(zip(torch.utils._pytree.tree_leaves(actual),
                                       torch.utils._pytree.tree_leaves(expected))):
            assert _layout_facts(a) == _layout_facts(e), f"output {k} on {shape} ({backend})"
            assert (a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
                (e.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()), f"aliasing of output {k}"
            torch.testing.assert_close(a, e)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_reductions_over_an_empty_dim_after_a_shape_change(backend):
    """NOTE [Empty inputs compile per signature] (onnxrt/compiler.py): a symbolic program traced over a
    (3, 0) input returned 0 for mean/var of the empty dim on every later empty input (eager: NaN)."""
    fn = lambda x: (x.mean(1), x.var(1), x.sum(1))  # noqa: E731
    compiled = framejit.compile(fn, backend=backend)
    with pytest.warns(UserWarning):  # eager's and the compiled var() warn about 0 degrees of freedom
        for shape in [(0, 4), (3, 0), (2, 0), (3, 5), (4, 0)]:
            x = torch.randn(*shape)
            assert_identical(compiled(x), fn(x), f"{shape} ({backend})")
