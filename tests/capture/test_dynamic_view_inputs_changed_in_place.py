"""Dynamic shapes (issue 13, review revK MED-1): an in-place metadata op (`x.unsqueeze_(0)`, `x.t_()`, squeeze_,
transpose_, swapdims_, as_strided_) of an input that is a VIEW (`torch.randn(3, n).t()`, `torch.randn(n + 2, 3)[1:-1]`).

The op checks that the new view fits its storage, a guard written with the symbols of the view's base, which no
occurrence of the input named: the entry's guards fell back to pinning every size by value, so each new size
recompiled until the recompile limit sent the frame to eager for good (stock 2 compilations). The base's sizes are
now named `x._base.size(d)` (NOTE [Symbols of a view's base] in capture/shapes.py). Bounds: stock
torch.compile(backend=CompileCounter) over the same calls (dynamic=None): 2 for unsqueeze_/t_/squeeze_/transpose_,
1 for swapdims_ then unsqueeze_, 3 for as_strided_; framejit 2 for all (was 8, then eager).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames

SIZES = [3, 5, 7, 4, 9, 6, 8, 10, 11]
VIEWS = {
    "transposed": lambda n: torch.randn(3, n).t(),
    "sliced": lambda n: torch.randn(n + 2, 3)[1:-1],
    "row_of_3d": lambda n: torch.randn(2, n, 3)[1],
}


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _unsqueeze_(x):
    x.unsqueeze_(0)
    return x * 2


def _t_(x):
    x.t_()
    return x.shape, x + 1


def _squeeze_(x):
    x.unsqueeze_(1)
    x.squeeze_(1)
    return x * 2


def _transpose_(x):
    x.transpose_(0, 1)
    return x.sum(0)


def _swapdims_unsqueeze_(x):
    x.swapdims_(0, -1)
    x.unsqueeze_(1)
    return x * 3


def _as_strided_(x):
    x.as_strided_((x.size(0),), (x.stride(0),))
    return x + 1


CASES = [_unsqueeze_, _t_, _squeeze_, _transpose_, _swapdims_unsqueeze_, _as_strided_]


def _views(view: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two equal fresh views (eager's and the compiled function's), each with its own base."""
    torch.manual_seed(seed)
    a = VIEWS[view](n)
    torch.manual_seed(seed)
    return a, VIEWS[view](n)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_a_view_input_changed_in_place_keeps_its_sizes_symbolic(fn, view, dynamic):
    """Was: 8 compilations over the first 8 sizes, then the frame ran eagerly for good."""
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    for i, n in enumerate(SIZES):
        expected_in, mine = _views(view, n, i)
        expected = fn(expected_in)
        assert_same(compiled(mine), expected)
        assert (mine.shape, mine.stride(), mine.storage_offset()) == \
            (expected_in.shape, expected_in.stride(), expected_in.storage_offset())
        assert_same(mine, expected_in)
    assert backend.graph_count <= (1 if dynamic else 2)
    assert eager_frames() == before


def test_a_plain_tensor_after_views_recompiles_and_keeps_eagers_results():
    """The entry's guard reads `x._base`: a tensor that is no view (or a view of a larger base) is a miss, not
    an error, and every result stays eager's."""
    backend = CountingBackend()
    compiled = framejit.compile(_unsqueeze_, backend=backend)
    makers = [lambda n: torch.randn(3, n).t(), lambda n: torch.randn(n, 3),
              lambda n: torch.randn(6, n)[1:4].t(), lambda n: torch.randn(3, n).t()]
    for i, n in enumerate([3, 5, 7, 4, 9, 6, 8, 10]):
        torch.manual_seed(i)
        expected_in = makers[i % 4](n)
        torch.manual_seed(i)
        mine = makers[i % 4](n)
        assert_same(compiled(mine), _unsqueeze_(expected_in))
        assert (mine.shape, mine.stride(), mine.storage_offset()) == \
            (expected_in.shape, expected_in.stride(), expected_in.storage_offset())
    assert backend.graph_count <= 5


class _Logged(torch.Tensor):
    """A subclass whose __torch_function__ logs every call and returns plain tensors (so `w.t()` is a plain view
    whose `_base` is the subclass tensor)."""
    log: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.log.append(getattr(func, "__name__", str(func)))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def test_the_guard_reads_a_subclass_base_without_calling_its_torch_function():
    """Review revP MED-1: the base's size/stride/offset guards read `x._base.size(d)` through the subclass's
    __torch_function__: 8 calls of the user's function on every cache hit, where eager makes none."""
    compiled = framejit.compile(_unsqueeze_, backend=CountingBackend())
    for i, n in enumerate([3, 5, 7, 4, 9, 6]):
        runs = []
        for f in (_unsqueeze_, compiled):
            torch.manual_seed(i)
            x = torch.Tensor._make_subclass(_Logged, torch.randn(3, n)).t()
            _Logged.log.clear()
            out = f(x)
            runs.append((out, x.shape, x.stride(), list(_Logged.log)))
        assert_same(runs[1][0], runs[0][0])
        assert runs[1][1:3] == runs[0][1:3]
        if i >= 2:  # the first two calls trace (tracing reads the base's metadata through it); hits must not
            assert runs[1][3] == runs[0][3] == [], (n, runs[1][3])
