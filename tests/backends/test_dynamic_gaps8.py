"""Dynamic shapes, issue 13 (eighth round of gaps, h13dyn): programs whose sizes change between calls,
eager vs compiled, with the compilations counted against stock torch.compile's on the same calls (each
bound below was measured with torch.compile(backend=CompileCounter), dynamic=None and True, eager first).

On triton (TRITON_INTERPRET=1) these compiled one module per shape before, where stock compiles once
(dynamic=True) or twice (automatic dynamic):
- `x * (1 / x.size(-1) ** 0.5)`, `x / (step + 1.5)` (a float computed from sizes or a symbolic int was baked
  into the kernel: NOTE [Floats of sizes as inputs], backends/size_floats.py): 6 modules over 6 widths;
- `x[:, :n]` with n an int argument: the backend made n's symbol nonpositive (NOTE [Int symbols have no
  sign], backends/symbolic.py), so sympy read the frontend's guard `n <= w` as True and probes broke it;
- `x[:, x.size(1) % 3:]` under automatic dynamic: torch's Mod in the guard `s % 3 != 0` was not seen as a
  residue (NOTE [Residues of probes], probe_relations.py), so the probe 48 broke it;
- `x.split([n // 2, n - n // 2], 1)` then both halves summed: the sums fused where n is even and not where
  it is odd (NOTE [Fusions kept apart at every probe], scheduler.py).
And one wrong answer: `for c in x.split(3): c.sum(0) * c.size(0)` at 10 rows was fitted at probes that broke
the frontend's guard on the number of chunks (NOTE [Probes that break a guard], dynamic.py).
On every backend: `x.new_tensor([x.size(0), x.size(1)])` compiled once per size (NOTE [Tensors of
symbolic ints]). The adversarial programs after those (views with -1 and computed sizes, expand/repeat,
pad to a multiple, interpolate, arange of sizes, masks from size comparisons, sizes in control flow and
loops) compile no more graphs than stock on the eager backend and match eager exactly.
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




def _run_triton(fn, calls, dynamic, check=_exact):
    backend = RecordingBackend("triton")
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    eager = framejit.stats()["eager_frames"]
    with torch.no_grad():
        for args in calls:
            check(compiled(*args), fn(*args))
    assert framejit.stats()["eager_frames"] == eager
    return backend


# ---- triton: one module where stock compiles once --------------------------------------------------------
def _inv_sqrt(x):
    return x * (1 / x.size(-1) ** 0.5)


def _step_div(x, step):
    return x / (step + 1.5) + x * (x.size(1) / 3)


def _int_slice(x, n):
    return x[:, :n] + 1


def _mod_slice(x):
    return x[:, x.size(1) % 3:] * 2


def _split_half(x):
    n = x.size(1)
    a, b = x.split([n // 2, n - n // 2], dim=1)
    return a.sum(1) - b.sum(1)


_WIDTHS = [(_r(3, w, seed=w),) for w in (4, 5, 6, 7, 8, 9)]


@pytest.mark.parametrize("dynamic,stock", [(None, 2), (True, 1)])
def test_a_float_of_a_size_scales_in_one_module(triton_modules, dynamic, stock):
    backend = _run_triton(_inv_sqrt, _WIDTHS, dynamic)
    assert backend.graph_count == stock
    assert sum(triton_modules.values()) <= stock, triton_modules  # before: 6 (one per width)


def test_a_float_of_a_symbolic_int_divides_in_one_module(triton_modules):
    calls = [(_r(2, w, seed=w), step) for w, step in ((4, -4), (5, -1), (6, 2), (7, 5), (8, 8), (9, 11))]
    backend = _run_triton(_step_div, calls, True)
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: 6


def test_a_slice_to_an_int_argument_is_one_module(triton_modules):
    calls = [(_r(3, 10, seed=n), n) for n in (2, 3, 4, 5, 6, 9)]
    backend = _run_triton(_int_slice, calls, True)
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules  # before: 7 (one per n)


def test_a_slice_from_a_residue_of_a_size_under_automatic_dynamic(triton_modules):
    backend = _run_triton(_mod_slice, _WIDTHS, None)
    assert backend.graph_count == 3  # stock 3: static, then s % 3 != 0, then s % 3 == 0
    assert sum(triton_modules.values()) <= 3, triton_modules  # before: 6


@pytest.mark.parametrize("dynamic,stock", [(None, 2), (True, 1)])
def test_split_halves_summed_are_one_module(triton_modules, dynamic, stock):
    backend = _run_triton(_split_half, _WIDTHS, dynamic, check=assert_same)
    assert backend.graph_count == stock
    assert sum(triton_modules.values()) <= stock, triton_modules  # before: 6


def test_fusions_kept_apart_are_reset_after_a_size_generic_module(triton_modules):
    """The keep-apart set of NOTE [Fusions kept apart at every probe] holds only while one graph is made."""
    from framejit.backends.triton import scheduler
    _run_triton(_split_half, _WIDTHS[:2], True, check=assert_same)
    assert scheduler.KEEP_APART == set()


def _relation_added(x):
    return x * 2 + (x.size(0) >= x.size(1))


def _float_for_a_size_too(x):
    s = x.size(1) / 4
    return x * s, torch.zeros(int(s * 10)) + s


_SHAPES = [(_r(b, t, seed=b * t),) for b, t in ((3, 5), (6, 4), (5, 5), (7, 9), (9, 7), (4, 8))]


@pytest.mark.parametrize("fn", [_relation_added, _float_for_a_size_too])
def test_a_relation_of_sizes_used_as_a_number_is_one_module(triton_modules, fn):
    """NOTE [Relations of sizes as inputs]: `x.size(0) >= x.size(1)` added to a tensor compiled per shape
    (6 modules; stock 1); a float of sizes also used for a size keeps that use in the graph."""
    backend = _run_triton(fn, _SHAPES, True)
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) == 1, triton_modules


def _chunks_scaled(x):
    out = []
    for c in x.split(3, dim=0):
        out.append(c.sum(0) * c.size(0))
    return torch.stack(out).sum(0)


def test_chunks_of_a_symbolic_size_match_eager(triton_modules):
    """NOTE [Probes that break a guard]: four chunks of 3 rows guard `(s + 2) // 3 == 4`; the probes broke it
    and the fitted module took the last chunk for 3 rows at every size (off by up to 1e21 before)."""
    calls = [(_r(t, b, seed=t * b),) for t, b in ((10, 4), (10, 5), (11, 4), (12, 3), (10, 6))]
    backend = _run_triton(_chunks_scaled, calls, True, check=assert_same)
    assert backend.graph_count == 1
    assert sum(triton_modules.values()) <= 3, triton_modules  # s pinned at 10: 11 and 12 compile per shape


# ---- every backend: a tensor of sizes ---------------------------------------------------------------------
def _sizes_tensor(x):
    sizes = [x.size(0)] * 2 + [x.size(1)]
    return x.new_tensor(sizes).float().sum() + x.sum() * x.new_tensor(x.size(1), dtype=torch.int64)


_BT = [(2, 6), (3, 8), (4, 10), (5, 12), (2, 9), (6, 14)]


@pytest.mark.parametrize("dynamic,stock", [(None, 2), (True, 1)])
def test_new_tensor_of_sizes_stays_symbolic(dynamic, stock):
    backend = CountingBackend()
    compiled = framejit.compile(_sizes_tensor, backend=backend, dynamic=dynamic)
    for i, (b, t) in enumerate(_BT):
        x = _r(b, t, seed=i)
        _exact(compiled(x), _sizes_tensor(x))
    assert backend.graph_count <= stock, backend.graph_count  # before: 6 (one per size)


def test_new_tensor_of_sizes_on_onnxrt():
    backend = RecordingBackend("onnxrt")
    compiled = framejit.compile(_sizes_tensor, backend=backend, dynamic=True)
    for i, (b, t) in enumerate(_BT[:4]):
        x = _r(b, t, seed=i)
        assert_same(compiled(x), _sizes_tensor(x))
    assert backend.graph_count == 1


def test_new_tensor_keeps_its_defaults_and_keywords():
    def fn(x):
        return (x.new_tensor([x.size(0), 2]), x.new_tensor(x.size(1), dtype=torch.float64),
                x.to(torch.int32).new_tensor([x.size(1)]))
    compiled = framejit.compile(fn, backend=CountingBackend(), dynamic=True)
    for i, (b, t) in enumerate(_BT[:3]):
        x = _r(b, t, seed=i)
        _exact(compiled(x), fn(x))


# ---- adversarial programs on the eager backend ----------------------------------------------------------
def _view_computed(x):
    b, t, c = x.shape
    y = x.reshape(b * t, -1).view(b, t * c // 2, 2)
    return y.sum(-1) + x.view(-1, c).mean()


def _expand_repeat(x):
    b, n = x.shape
    e = x[:, None, :].expand(b, n, n) * x[:, :, None]
    return e + x.repeat(1, n).view(b, n, n) + x.new_ones(n).repeat(b).view(b, n)[:, :, None]


def _pad_to_multiple(x):
    n = x.size(-1)
    y = F.pad(x, (0, (8 - n % 8) % 8))
    return y.view(x.size(0), -1, 8).sum(-1)


def _interp(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest") + \
        F.interpolate(x, size=(x.size(2) * 2, x.size(3) * 2), mode="bilinear", align_corners=False)


def _arange_sizes(x):
    n = x.size(0)
    pos = torch.arange(n, 0, -1, dtype=torch.float32)
    idx = torch.arange(0, x.size(1), 2)
    return x[:, idx] * pos[:, None] + torch.arange(n * 2).view(n, 2).sum(1, keepdim=True)


def _size_mask(x):
    t = x.size(1)
    causal = torch.arange(t)[None, :] <= torch.arange(t)[:, None]
    m = torch.arange(t) < (t // 2)
    return x.masked_fill(~m, 0.0) + causal.float().sum(0)[:t]


def _control_flow(x):
    y = x * 2 if x.size(0) > 4 else x - 1
    if x.size(1) % 2 == 0:
        y = y.flip(1)
    return y + (x.size(0) >= x.size(1))


def _size_loop(x):
    acc = x.new_zeros(x.size(1))
    for i in range(x.size(0)):
        acc = acc + x[i] * (i + 1)
    return acc


def _chunk_loop(x):
    return torch.stack([c.sum(0) * c.size(0) for c in x.split(3, dim=0)]).sum(0)


def _heads(x):
    b, t, d = x.shape
    q = x.view(b, t, 2, d // 2).transpose(1, 2)
    s = (q @ q.transpose(-1, -2)) / math.sqrt(d // 2)
    return (s.softmax(-1) @ q).transpose(1, 2).reshape(b, t, -1)


def _narrow_tail(x):
    n = x.size(1)
    return x.narrow(1, n // 3, n - n // 3) * 3 + x[:, -(n // 2):].sum(1, keepdim=True)


def _roll_cat(x):
    n = x.size(0)
    return torch.cat([x[n // 2:], x[: n // 2]], 0) - x.roll(n - n // 2, 0)


def _zeros_then_fill(x):
    z = torch.zeros(x.size(0), x.size(1) + 1)
    z[:, 1:] = x
    return z.cumsum(1) + torch.full((x.size(0), 1), float(x.size(1)))


def _unfold_window(x):
    w = max(2, x.size(-1) // 3)
    return x.unfold(-1, w, w).sum(-1)


def _topk_half(x):
    return x.topk(x.size(-1) // 2, dim=-1).values.sum(-1)


# program, inputs per (b, t), stock graphs with dynamic=None and with dynamic=True
_PROGRAMS = {
    "view_computed": (_view_computed, lambda b, t, s: (_r(b, t, 4, seed=s),), 2, 1),
    "expand_repeat": (_expand_repeat, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "pad_to_multiple": (_pad_to_multiple, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "interpolate": (_interp, lambda b, t, s: (_r(b, 2, t, t + 1, seed=s),), 2, 2),
    "arange_sizes": (_arange_sizes, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "size_mask": (_size_mask, lambda b, t, s: (_r(t, t, seed=s),), 2, 1),
    "control_flow": (_control_flow, lambda b, t, s: (_r(b, t, seed=s),), 4, 3),
    "size_loop": (_size_loop, lambda b, t, s: (_r(b, t, seed=s),), 6, 5),
    "chunk_loop": (_chunk_loop, lambda b, t, s: (_r(t, b, seed=s),), 4, 4),
    "heads": (_heads, lambda b, t, s: (_r(b, t, 8, seed=s),), 2, 1),
    "narrow_tail": (_narrow_tail, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "roll_cat": (_roll_cat, lambda b, t, s: (_r(t, b, seed=s),), 2, 1),
    "zeros_then_fill": (_zeros_then_fill, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "unfold_window": (_unfold_window, lambda b, t, s: (_r(b, t, seed=s),), 4, 3),
    "topk_half": (_topk_half, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
    "sizes_tensor": (_sizes_tensor, lambda b, t, s: (_r(b, t, seed=s),), 2, 1),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_adversarial_programs_compile_no_more_than_stock(name, dynamic):
    fn, make, stock_none, stock_true = _PROGRAMS[name]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    eager = framejit.stats()["eager_frames"]
    for i, (b, t) in enumerate(_BT):
        args = make(b, t, i)
        _exact(compiled(*args), fn(*args))
    assert backend.graph_count <= (stock_none if dynamic is None else stock_true), backend.graph_count
    assert framejit.stats()["eager_frames"] == eager
