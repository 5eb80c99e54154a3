"""In-place writes through views on the onnxrt backend (helper hsound, issue 12): differential, eager vs
framejit.compile(backend="onnxrt") over sizes that change, so the later calls run the program of symbolic
sizes; the input mutated in place and the returned value are compared after every call.

- NOTE [Temporaries written in place] (backends/onnxrt/partition.py): the view replay of
  `t.diagonal().mul_(10)` writes into a clone of `t` with `prims.copy_to`; the clone and its views were in an
  ORT part (fresh copies) and the write was lost on every call with symbolic sizes.
- NOTE [Writes through unfold] (backends/onnxrt/view_writes.py): functionalization's inverse of unfold zeroed
  the elements no window covers, static sizes or not.
"""
from __future__ import annotations

import operator

import pytest
import torch

import framejit
from tests.helpers import assert_same

PROGRAMS = {
    "diagonal_returned": lambda t: t.diagonal().mul_(10),
    "diagonal_then_read": lambda t: (t.diagonal().mul_(10), t.sum() * 2)[1],
    "diagonal_of_a_clone": lambda t: (lambda c: (c.diagonal().add_(5), c.exp().sum(0))[1])(t.clone()),
    "diagonal_read_before_and_after": lambda t: (lambda s: (t.diagonal().mul_(3), s + t.sum())[1])(t.sum()),
    "unfold_uncovered": lambda t: t.view(-1).unfold(0, 2, 2).mul_(3),
    "unfold_view_of_window": lambda t: (t.view(-1).unfold(0, 3, 3)[:, 0].add_(7), t * 1)[1],
}


@pytest.mark.parametrize("dynamic", [None, False])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_writes_through_views_reach_the_input(name, dynamic):
    fn = PROGRAMS[name]
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for n in (3, 2, 4, 5):
        expected_input = torch.arange(float(n * n)).reshape(n, n) - 4
        actual_input = expected_input.clone()
        expected = fn(expected_input)
        actual = compiled(actual_input)
        assert_same(actual, expected)
        assert_same(actual_input, expected_input)


def test_graphs_without_writes_through_unfold_keep_running_in_ort():
    """The unfold check only sends graphs that write into a window to eager torch."""
    from framejit.backends.onnxrt import onnxrt
    fn = lambda t: (t.view(-1).unfold(0, 2, 2).clone().mul_(3) + 1).sum(-1)  # noqa: E731
    compiled = onnxrt(torch.fx.symbolic_trace(fn), [torch.randn(9)])
    for n in (9, 9):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), fn(x))
    (info,) = compiled.summary()
    assert info["parts"] >= 1 and not info["eager_graph"], info


RETURNED_VIEWS = {  # NOTE [Views over a copied view] (backends/aliasing.py)
    "strided_slice": lambda t: t.view(-1)[::2].mul_(2),
    "column_of_transpose": lambda t: t.T[0].zero_(),
    "moved_dim": lambda t: t.movedim(0, 1)[0].add_(2),
    "unsqueezed_select": lambda t: t.unsqueeze(0)[0, 0].add_(1),
    "flat_reshape": lambda t: t.reshape(-1).mul_(2),
    "view_of_a_view": lambda t: t.view(-1)[1:].view(-1, 1)[0].add_(100),
    "upper_triangle_of_transpose": lambda t: t.t().triu_(),
}


@pytest.mark.parametrize("dynamic", [None, False])
@pytest.mark.parametrize("name", list(RETURNED_VIEWS))
def test_returned_views_of_written_inputs_alias_them(name, dynamic):
    """Eager returns a view of `t`: a later write through it reaches `t`; onnxrt returned a fresh copy."""
    fn = RETURNED_VIEWS[name]
    compiled = framejit.compile(fn, backend="onnxrt", dynamic=dynamic)
    for n in (3, 2, 4, 5):
        expected_input = torch.arange(float(n * n)).reshape(n, n)
        actual_input = expected_input.clone()
        expected, actual = fn(expected_input), compiled(actual_input)
        assert_same(actual, expected)
        assert actual.stride() == expected.stride() and actual.storage_offset() == expected.storage_offset()
        expected.add_(1000)
        actual.add_(1000)
        assert_same(actual_input, expected_input)


OVERLAPPING_WRITES = {  # NOTE [Writes over their own reads] (backends/onnxrt/view_writes.py)
    "copy_shifted": lambda t: t[1:].copy_(t[:-1]),
    "add_shifted": lambda t: t[1:].add_(t[:-1]),
    "iadd_shifted": lambda t: operator.iadd(t[1:], t[:-1]),
    "mul_by_transpose": lambda t: t.mul_(t.T),
    "copy_transpose": lambda t: t.copy_(t.T),
    "add_self": lambda t: t.add_(t),
    "row_plus_diagonal": lambda t: t[0].add_(t.diagonal()),
    "copy_of_a_clone": lambda t: t[1:].copy_(t[:-1].clone()),
    "setitem_shifted": lambda t: (operator.setitem(t, slice(1, None), t[:-1]), t)[1],
    "setitem_column_into_row": lambda t: (operator.setitem(t, 0, t[:, 0]), t)[1],
    "overlapping_as_strided": lambda t: t.as_strided((3, 2), (1, 1)).mul_(2),
    "expanded_row": lambda t: t[:1].expand(3, -1).zero_(),
    "setitem_of_a_product": lambda t: (operator.setitem(t, (slice(None), slice(1, None)), t[:, :-1] * 2), t)[1],
}


def _outcome(fn, t):
    try:
        return fn(t).tolist()
    except RuntimeError as e:
        return type(e), str(e)


@pytest.mark.parametrize("name", list(OVERLAPPING_WRITES))
def test_writes_over_their_own_reads_raise_as_eager(name):
    """Eager raises for a write that partially overlaps its source (and leaves the input); onnxrt computed it."""
    fn = OVERLAPPING_WRITES[name]
    compiled = framejit.compile(fn, backend="onnxrt")
    for n in (3, 2, 4):
        expected_input = torch.arange(float(n * n)).reshape(n, n)
        actual_input = expected_input.clone()
        assert _outcome(compiled, actual_input) == _outcome(fn, expected_input)
        assert_same(actual_input, expected_input)


def test_training_graphs_writing_through_unfold_match_eager():
    """AOT autograd's functionalization has the same unfold inverse (NOTE [Writes through unfold]): the loss,
    the returned tensor and the gradient lost the uncovered element on odd sizes."""
    def fn(x, w):
        c = x * w
        c.view(-1).unfold(0, 2, 2).mul_(3)
        return (c * c).sum(), c
    compiled = framejit.compile(fn, backend="onnxrt")
    for n in (3, 2, 4, 5):
        x = torch.arange(float(n * n)).reshape(n, n) / 10
        w_eager, w_compiled = torch.ones(n, n, requires_grad=True), torch.ones(n, n, requires_grad=True)
        expected, actual = fn(x, w_eager), compiled(x, w_compiled)
        expected[0].backward()
        actual[0].backward()
        assert_same(actual, expected)
        assert_same(w_compiled.grad, w_eager.grad)
