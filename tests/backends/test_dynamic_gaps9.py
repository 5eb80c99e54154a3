"""Dynamic shapes, issue 13 (ninth round of gaps, h13dyn2): programs whose sizes or int arguments change
between calls, eager vs compiled, with the compilations counted against stock torch.compile's on the same
calls (each `stock` below was measured with torch.compile(backend=CompileCounter), dynamic=None and True).

Specialisations removed (each compiled a graph per size or per value before):
- `x.new_tensor([x.size(0), 2.5])`, nested `[[x.size(0), 1], [2, x.size(1)]]`, floats of sizes
  `[x.size(0) / 3, x.size(1) ** 0.5]`, `torch.tensor([x.size(1), True, ...])` (NOTE [Tensors of mixed
  numbers], capture/sym_arith.py); on triton the float items are scalar_tensors of float inputs, cast
  (NOTE [Float inputs as tensors], backends/float_inputs.py);
- `x.size(0) * 0.1 * (x.size(1) > 3)`: a SymFloat times a relation (NOTE [Bools in size arithmetic]);
- `x.size(1) ** -1 * x` (NOTE [Negative powers of sizes]);
- `0.5 ** (step // 2)` with a step counter (NOTE [Float bases to int powers]).
The adversarial programs after those (views with computed heads, size arithmetic in slices, control flow on
sizes, step counters, padding to a multiple, chunks, windowed masks, expand/repeat, gathers by computed
indices, norms scaled by sizes, tensors of sizes, loops over half a size, roll/narrow) are compared with eager
on every backend, with 0- and 1-sized dimensions among the calls.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, RecordingBackend, assert_same


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _exact(actual, expected):
    assert_same(actual, expected, rtol=0, atol=0)


def _close(actual, expected):
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)


def _run(fn, calls, dynamic, backend="eager"):
    """Graphs compiled over `calls`, each result checked against eager's (exact on the eager backend)."""
    counting = CountingBackend() if backend == "eager" else RecordingBackend(backend)
    compiled = framejit.compile(fn, backend=counting, dynamic=dynamic)
    eager_frames = framejit.stats()["eager_frames"]
    check = _exact if backend == "eager" else _close
    with torch.no_grad():
        for args in calls:
            check(compiled(*args), fn(*args))
    assert framejit.stats()["eager_frames"] == eager_frames
    return counting.graph_count


# ---- tensors of sizes mixed with constants (revB finding 6) -------------------------------------------------
def _nt_mixed(x):
    return x + x.new_tensor([x.size(0), 2.5]).sum()


def _nt_nested(x):
    return x.new_tensor([[x.size(0), 1], [2, x.size(1)]]) * 2


def _nt_float(x):
    return x.new_tensor([x.size(0) / 3, x.size(1) ** 0.5]) + 1


def _t_mixed(x):
    return torch.tensor([x.size(1), True, x.size(0) // 2]) + 1


def _t_dtypes(x):
    return (torch.tensor([[x.size(0) / 7, 1], [x.size(1), 0]], dtype=torch.float64),
            torch.tensor([x.size(1) / 2, 3], dtype=torch.int32), torch.tensor([x.size(0), False]),
            torch.tensor([x.size(0) > 2, True]))


def _rel_mul(x):
    return x - x.size(0) * 0.1 * (x.size(1) > 3)


_SHAPES = [(5, 4), (6, 7), (3, 9), (1, 2), (0, 3), (7, 7)]
_MIXED_CALLS = [(_r(*s, seed=i),) for i, s in enumerate(_SHAPES)]


# stock: 4 with dynamic=None (static, dynamic, size 1, size 0), 3 with dynamic=True; framejit was 6 / 6 for
# every program here but _t_dtypes (new) and _t_mixed
@pytest.mark.parametrize("fn", [_nt_mixed, _nt_nested, _nt_float, _t_mixed, _t_dtypes, _rel_mul])
@pytest.mark.parametrize("dynamic,stock", [(None, 4), (True, 3)])
def test_numbers_of_sizes_compile_as_stock_does(fn, dynamic, stock):
    assert _run(fn, _MIXED_CALLS, dynamic) <= stock


@pytest.mark.parametrize("fn", [_rel_mul])
def test_numbers_of_sizes_on_onnxrt(fn):
    assert _run(fn, _MIXED_CALLS, True, "onnxrt") <= 3


@pytest.mark.parametrize("fn", [_nt_float, _nt_nested])
def test_numbers_of_sizes_on_triton_one_module_per_graph(fn, triton_modules):
    graphs = _run(fn, _MIXED_CALLS, True, "triton")
    assert graphs <= 3
    assert sum(triton_modules.values()) <= graphs, triton_modules  # _nt_float before: 6 modules (per shape)


def test_tensor_of_ragged_sizes_raises_as_eager():
    def ragged(x):
        return torch.tensor([[x.size(0), 1], [x.size(1)]])
    compiled = framejit.compile(ragged, backend="eager", dynamic=True)
    for shape in ((3, 4), (5, 6)):
        with pytest.raises(ValueError) as eager:
            ragged(torch.zeros(shape))
        with pytest.raises(ValueError) as ours:
            compiled(torch.zeros(shape))
        assert str(ours.value) == str(eager.value)


# ---- powers (revA F3, and a step counter) -------------------------------------------------------------------
def _neg_pow(x):
    return x.size(1) ** -1 * x + x.size(0) ** -2


def _decay(x, step):
    lr = 0.1 * (0.5 ** (step // 2)) / math.sqrt(step + 1)
    return x * lr + step % 3


_WIDTHS = [(_r(3, w, seed=w),) for w in (4, 6, 7, 9, 12)]


@pytest.mark.parametrize("dynamic,stock", [(None, 2), (True, 1)])
def test_a_negative_power_of_a_size_is_symbolic(dynamic, stock):
    assert _run(_neg_pow, _WIDTHS, dynamic) <= stock  # before: 5 (one per width)


@pytest.mark.parametrize("dynamic,stock", [(None, 2), (True, 1)])
def test_a_float_to_a_step_counters_power_is_symbolic(dynamic, stock):
    calls = [(_r(3, 4, seed=s), s) for s in range(6)]
    assert _run(_decay, calls, dynamic) <= stock  # before: 4 / 3 (0.5 ** (step // 2) specialised step // 2)


def test_powers_that_raise_raise_as_eager():
    def zero_base(x, n):
        return x * (0.0 ** (n - 3))
    compiled = framejit.compile(zero_base, backend="eager", dynamic=True)
    for n in (5, 4, 3, 2, 6):
        try:
            expected = zero_base(torch.ones(2), n)
        except ZeroDivisionError as e:
            with pytest.raises(ZeroDivisionError) as ours:
                compiled(torch.ones(2), n)
            assert str(ours.value) == str(e)
            continue
        _exact(compiled(torch.ones(2), n), expected)


def test_size_powers_on_triton_and_onnxrt(triton_modules):
    assert _run(_neg_pow, _WIDTHS, True, "triton") == 1
    assert sum(triton_modules.values()) == 1
    calls = [(_r(3, 4, seed=s), s) for s in range(4)]
    assert _run(_decay, calls, True, "onnxrt") == 1


# ---- adversarial programs -------------------------------------------------------------------------------------
def _heads(x, h):
    b, t, c = x.shape
    q = x.view(b, t, h, c // h).transpose(1, 2)
    att = (q @ q.transpose(-1, -2)) * (c // h) ** -0.5
    return att.softmax(-1).matmul(q).transpose(1, 2).reshape(b, t, c)


def _slices(x):
    n = x.size(-1)
    return x[..., n // 2:].sum(-1) + x[..., n // 3: n - n // 3].sum(-1) - x[..., -(n // 4) - 1:].mean(-1)


def _flow(x):
    if x.size(0) * x.size(1) > 30:
        y = x.reshape(-1, 2) if x.numel() % 2 == 0 else x.flatten()[:-1].reshape(-1, 2)
    else:
        y = x.t().contiguous().view(-1, x.size(0))
    return y.sum(0) * len(y)


def _pos(x, offset):
    t = x.size(1)
    pos = torch.arange(offset, offset + t)
    return x + pos * 0.01 + x[:, : max(1, t - offset % 3)].sum(1, keepdim=True)


def _pad(x):
    n = x.size(-1)
    m = (n + 7) // 8 * 8
    return F.pad(x, (0, m - n)).view(x.size(0), -1, 8).sum(-1)


def _chunks(x):
    parts = x.chunk(max(1, x.size(0) // 2), 0)
    return torch.cat([p.sum(0, keepdim=True) * p.size(0) for p in parts]) / len(parts)


def _mask(x):
    t = x.size(-1)
    i = torch.arange(t)
    m = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < t // 2 + 1)
    return x.unsqueeze(-2).expand(*x.shape[:-1], t, t).masked_fill(~m, 0).sum(-1)


def _expand(x, y):
    return x[:, :1].expand(-1, y.size(0)) * y.unsqueeze(0) + y.repeat(x.size(0), 1)


def _gather(x):
    n = x.size(1)
    idx = (torch.arange(x.size(0)) * 7) % n
    return x[torch.arange(x.size(0)), idx] + x.flatten()[n - 1::n]


def _norm(x):
    d = x.size(-1)
    return x / (x.pow(2).sum(-1, keepdim=True) / d + 1e-5).sqrt() * (d / (d + 1)) + 1 / d


def _sizes_tensor(x):
    s = torch.tensor(x.shape, dtype=torch.float32)
    return x * s.prod() / (s.sum() + 1) + x.new_tensor([x.size(-1) / 2.0])


def _loop(x):
    acc = x[:, 0] * 0
    for i in range(x.size(1) // 2):
        acc = acc + x[:, 2 * i] - x[:, 2 * i + 1]
    return acc


def _roll(x):
    n = x.size(0)
    return torch.roll(x, shifts=n // 3, dims=0).narrow(1, x.size(1) // 2, x.size(1) - x.size(1) // 2) * n


_MATS = [(4, 6), (5, 9), (1, 3), (7, 4), (6, 10), (3, 1)]


def _mats():
    return [(_r(*s, seed=i),) for i, s in enumerate(_MATS)]


# (program, calls, stock graphs with dynamic=None, with dynamic=True)
_ADVERSARIAL = {
    "heads": (_heads, lambda: [(_r(*s, seed=h), h) for s, h in
                               zip([(2, 5, 8), (3, 4, 12), (1, 7, 4), (4, 1, 16), (2, 3, 8)], (2, 3, 1, 4, 2))], 4, 3),
    "slices": (_slices, _mats, 4, 3),
    "flow": (_flow, _mats, 6, 5),
    "decay": (_decay, lambda: [(_r(3, 4, seed=s), s) for s in range(6)], 2, 1),
    "pos": (_pos, lambda: [(_r(2, t, seed=o), o) for t, o in ((5, 0), (5, 1), (6, 2), (7, 3), (3, 4), (1, 5))], 4, 2),
    "pad": (_pad, _mats, 4, 3),
    "chunks": (_chunks, _mats, 5, 4),
    "mask": (_mask, _mats, 4, 3),
    "expand": (_expand, lambda: [(_r(a, 3, seed=a), _r(b, seed=b)) for a, b in ((2, 5), (3, 7), (4, 1), (1, 4), (5, 2))],
               4, 3),
    "gather": (_gather, _mats, 4, 3),
    "norm": (_norm, _mats, 4, 3),
    "sizes_tensor": (_sizes_tensor, _mats, 4, 3),
    "loop": (_loop, lambda: [(_r(*s, seed=i),) for i, s in enumerate(((3, 4), (2, 6), (4, 8), (2, 5), (3, 2)))], 5, 4),
    "roll": (_roll, _mats, 4, 3),
}


@pytest.mark.parametrize("name", list(_ADVERSARIAL))
@pytest.mark.parametrize("dynamic", [None, True])
def test_adversarial_programs_on_eager(name, dynamic):
    fn, calls, stock_none, stock_true = _ADVERSARIAL[name]
    assert _run(fn, calls(), dynamic) <= (stock_none if dynamic is None else stock_true)


# a subset on the other backends (every program was run on both, dynamic=None and True, while writing this:
# values within 1e-5 of eager's, graphs equal to the eager backend's; kept small for CI time)
@pytest.mark.parametrize("name", ["slices", "decay"])
def test_adversarial_programs_on_onnxrt(name):
    fn, calls, _, stock_true = _ADVERSARIAL[name]
    assert _run(fn, calls(), True, "onnxrt") <= stock_true


@pytest.mark.parametrize("name", ["chunks", "pad"])
def test_adversarial_programs_on_triton(name, triton_modules):
    fn, calls, stock_none, _ = _ADVERSARIAL[name]
    assert _run(fn, calls(), None, "triton") <= stock_none


# ---- mark_dynamic with a range ----------------------------------------------------------------------------
def _md_cumsum(x):
    return x.reshape(-1, x.size(1)).cumsum(0)[-1] * x.size(0)


def _md_branch(x):
    if x.size(0) > 8:
        return x[: x.size(0) // 2] * 2
    return x.flip(0) + x.size(0)


def _md_view(x):
    return x.view(x.size(0), -1, 2).sum(-1) / x.size(0)


# (program, sizes, min, graphs); stock torch.compile with torch._dynamo.mark_dynamic(t, 0, min=.., max=16)
# compiles 1 for each
@pytest.mark.parametrize("fn,sizes,low", [(_md_cumsum, (3, 5, 9, 16, 2, 12), 2), (_md_view, (3, 5, 9, 16, 2, 12), 2),
                                          (_md_branch, (9, 13, 16, 10), 9)])
@pytest.mark.parametrize("backend", ["eager"])
def test_mark_dynamic_with_a_range_serves_every_size_in_it(fn, sizes, low, backend):
    calls = []
    for n in sizes:
        x = _r(n, 4, seed=n)
        framejit.mark_dynamic(x, 0, min=low, max=16)
        calls.append((x,))
    assert _run(fn, calls, None, backend) == 1


def test_mark_dynamic_with_a_range_on_triton(triton_modules):
    calls = []
    for n in (3, 5, 9, 16):
        x = _r(n, 4, seed=n)
        framejit.mark_dynamic(x, 0, min=2, max=16)
        calls.append((x,))
    assert _run(_md_view, calls, None, "triton") == 1
    assert sum(triton_modules.values()) == 1


def test_mark_dynamic_range_a_branch_splits_raises_as_stock():
    # stock torch.compile raises ConstraintViolationError too (the branch guards size(0) <= 8 inside 2..16)
    x = _r(5, 4)
    framejit.mark_dynamic(x, 0, min=2, max=16)
    with pytest.raises(Exception) as raised:
        framejit.compile(_md_branch, backend="eager")(x)
    assert type(raised.value).__name__ == "ConstraintViolationError"


# ---- triton: extrema of sizes, clamp by floats of sizes -------------------------------------------------------
def _extrema(x, step):
    return x + min(step, x.size(0)) - max(step, x.size(1))


def _clamped(x, step):
    return x.clamp(min=-step / x.size(1), max=step * 0.5 + x.size(0) / 4)


_STEPS = [(_r(*s, seed=i), i) for i, s in enumerate([(4, 6), (5, 6), (3, 8), (6, 4), (2, 10), (7, 5)])]


def test_a_max_of_sizes_is_not_fitted_at_probes():
    # NOTE [Extrema of sizes are not fitted]: before, the second call ((5, 6), step 1) was off by 5 (the module
    # fitted max(step, 6) as step at probes where step > 6)
    assert _run(_extrema, _STEPS, None, "triton") == 3  # stock 3


def test_clamp_by_floats_of_sizes_is_one_module_per_graph(triton_modules):
    # NOTE [Float inputs as tensors]: clamp's min/max keywords are cast as its positional bounds; before, a float
    # input there kept the graph per shape (6 modules over 3 graphs)
    graphs = _run(_clamped, _STEPS, None, "triton")
    assert graphs == 3  # stock 3
    assert sum(triton_modules.values()) == graphs, triton_modules
