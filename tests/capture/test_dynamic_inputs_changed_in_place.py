"""Dynamic shapes (issue 13, hhuntD HIGH-1): an op of the frame that changes an input's sizes or strides in place
(an `out=` tensor the op resizes, `x.unsqueeze_(0)`, `x.as_strided_(...)`) once a size is symbolic.

The entry's guards described the input as the trace left it (`out.size(0) == x.size(0)` where every call passes an
empty `out`), so the entry never served its own calling pattern: every call recompiled, even at the same size, until
the recompile limit sent the frame to eager for good. Guards describe the input as it arrived now (NOTE [Guards
describe inputs as they arrived] in capture/shapes.py). Bounds: stock torch.compile(backend=CompileCounter) over the
same calls (dynamic=None / True): add_out 2 / 1, cat_out 2 / 1, mm_out 4 / 3, unsqueeze_ 2 / 2, as_strided_ 3 / 2.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, RecordingBackend, assert_same, eager_frames, reset_with_triton_interpreted

_reset = pytest.fixture(autouse=True)(reset_with_triton_interpreted)


def _add_out(x, out):
    torch.add(x, 1, out=out)
    return out * 2


def _cat_out(x, out):
    torch.cat([x, x], out=out)
    return out.sum(0)


def _mm_out(x, out):
    torch.mm(x, x.t(), out=out)
    return out + 1


def _unsqueeze_(x):
    x.unsqueeze_(0)
    return x * 2


def _as_strided_(x):
    x.as_strided_((x.numel() // 2, 2), (2, 1))
    return x + 1


SIZES = [3, 5, 5, 5, 7, 7, 4]
CASES = {  # name: (function, inputs of size n, stock's compilations for dynamic=None, for dynamic=True)
    "add_out": (_add_out, lambda n: (torch.randn(n), torch.empty(0)), 2, 1),
    "cat_out": (_cat_out, lambda n: (torch.randn(n, 2), torch.empty(0)), 2, 1),
    "mm_out": (_mm_out, lambda n: (torch.randn(n, 3), torch.empty(0)), 4, 3),
    "unsqueeze_": (_unsqueeze_, lambda n: (torch.randn(n, 3),), 2, 2),
    "as_strided_": (_as_strided_, lambda n: (torch.randn(2 * n),), 3, 2),
}


def _same_inputs(actual: tuple, expected: tuple) -> None:
    """The inputs after the call: values, and the sizes and strides the op gave them."""
    for a, e in zip(actual, expected):
        assert (a.shape, a.stride(), a.storage_offset()) == (e.shape, e.stride(), e.storage_offset())
        assert_same(a, e)


def _run(name: str, backend, dynamic=None) -> None:
    fn, make, _, _ = CASES[name]
    before = eager_frames()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    for n in SIZES:
        args = make(n)
        mine = tuple(a.clone() for a in args)
        expected = fn(*args)
        assert_same(compiled(*mine), expected)
        _same_inputs(mine, args)
    assert eager_frames() == before


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_input_changed_in_place_is_guarded_as_it_arrived(name, dynamic):
    """Was: add_out 8 compilations over these 7 calls (a new one on each call after the first), then eager."""
    backend = CountingBackend()
    _run(name, backend, dynamic)
    stock = CASES[name][2] if dynamic is None else CASES[name][3]
    assert backend.graph_count <= stock


def test_same_size_calls_reuse_the_entry():
    """sizes 3, then 5 ten times: 2 compilations (stock 2); was one per call until the recompile limit."""
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(_add_out, backend=backend)
    for n in [3] + [5] * 10:
        x, out = torch.randn(n), torch.empty(0)
        assert_same(compiled(x, out), _add_out(x, torch.empty(0)))
        assert out.shape == (n,)
    assert backend.graph_count == 2
    assert eager_frames() == before


@pytest.mark.parametrize("backend_name", ["onnxrt", "triton"])
def test_on_the_compiling_backends(backend_name):
    backend = RecordingBackend(backend_name)
    _run("add_out", backend)
    assert backend.graph_count <= CASES["add_out"][2]
