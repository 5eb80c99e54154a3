"""Dynamic shapes and scalars, issue 13 (h13dyn3's sweep of serving-style workloads against stock
torch.compile): differential tests, eager vs compiled over 10+ values, with compilation counts asserted.

- A changing int (a layer index, a step, a size) formatted into a string (`d[f"layer_{i}"]`, `str(i)`,
  `f"b{x.shape[0]}"`) was specialised by value: 8 traces, then the whole frame ran eagerly (stock
  torch.compile: one graph, then the frame runs eagerly from its second call). The formatting now breaks
  and runs as Python, and the strings and floats made from it are dynamic in the resume functions from
  their first trace (NOTE [Dynamic ints formatted into strings]): the frame keeps its graphs and stops
  tracing after the first few calls.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames

_SCALES = {f"layer_{i}": float(i + 1) for i in range(16)}


def _traced() -> int:
    return framejit.stats()["frames_traced"]


def _layer_scale(x, i):
    y = x.sin()
    s = _SCALES[f"layer_{i}"]
    return y * s + 1


def _layer_scale_str(x, i):
    y = x.cos() * 2
    s = _SCALES["layer_" + str(i)]
    return y - s


def _labelled(x, i):
    y = x.cos() * 2
    name = f"step {i}"
    return y + 1, name


def _run_values(fn, dynamic, values):
    """Compiled vs eager over `values` of the int; frames traced after the 4th call and at the end."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    traced, eager = _traced(), eager_frames()
    after_four = None
    for n, i in enumerate(values):
        x = torch.randn(5)
        assert_same(compiled(x, i), fn(x, i))
        if n == 3:
            after_four = _traced() - traced
    return backend.graph_count, after_four, _traced() - traced, eager_frames() - eager


VALUES = [0, 1, 2, 3, 5, 7, 9, 10, 12, 4, 15, 11]


def test_a_changing_int_formatted_into_a_dict_key_is_not_traced_per_value():
    graphs, after_four, traced, eager = _run_values(_layer_scale, None, VALUES)
    assert eager == 0
    assert traced == after_four, (after_four, traced)  # no trace after the fourth call: not one per value
    assert traced <= 5 and graphs <= 3, (traced, graphs)  # static entry, symbolic entry, resume functions


def test_str_of_a_changing_int_is_not_traced_per_value():
    graphs, after_four, traced, eager = _run_values(_layer_scale_str, None, VALUES)
    assert eager == 0
    assert traced == after_four, (after_four, traced)
    assert graphs <= 3, graphs


def test_a_dynamic_int_formatted_and_returned_keeps_its_graph_under_dynamic_true():
    graphs, after_four, traced, eager = _run_values(_labelled, True, VALUES)
    assert eager == 0
    assert traced == after_four, (after_four, traced)
    assert graphs <= 2, graphs  # the graph before the formatting, the one after it


def _size_key(x):
    key = f"b{x.shape[0]}"
    return x.sum(0) * 2, key


SIZES = [3, 4, 6, 2, 9, 5, 7, 11, 8, 10, 13, 1]


def test_a_symbolic_size_formatted_into_a_string_is_not_traced_per_size():
    backend = CountingBackend()
    compiled = framejit.compile(_size_key, backend=backend)
    traced, eager = _traced(), eager_frames()
    for n, size in enumerate(SIZES[:-1]):
        x = torch.randn(size, 3)
        assert_same(compiled(x), _size_key(x))
        if n == 3:
            after_four = _traced() - traced
    assert eager_frames() == eager
    assert _traced() - traced == after_four, (after_four, _traced() - traced)


def test_a_marked_dim_formatted_into_a_string_runs_instead_of_violating_its_mark():
    # stock torch.compile raises ConstraintViolationError here (the mark is specialised by the format)
    backend = CountingBackend()
    compiled = framejit.compile(_size_key, backend=backend)
    eager = eager_frames()
    for size in SIZES:
        x = torch.randn(size, 3)
        framejit.mark_dynamic(x, 0)
        assert_same(compiled(x), _size_key(x))
    assert eager_frames() == eager
    assert backend.graph_count <= 3, backend.graph_count  # symbolic (graph before and after), size 1


_WEIGHTS = [torch.full((5,), float(k)) for k in range(16)]


def _indexed(x, i):
    return x * _WEIGHTS[i] + _WEIGHTS[i - 1]


def _indexed_list(x, ws, i):
    y = x.relu()
    return y * ws[i] - ws[-i]


def test_a_list_of_tensors_indexed_by_a_changing_int_is_not_traced_per_value():
    # before: one trace per value (the guard i == v) until the recompile limit ran the frame eagerly (stock
    # torch.compile the same); the subscript now breaks and the resume function takes the tensor
    graphs, after_four, traced, eager = _run_values(_indexed, None, VALUES[1:])
    assert eager == 0
    assert traced == after_four, (after_four, traced)
    assert graphs <= 4, graphs


def test_a_list_argument_of_tensors_indexed_by_a_changing_int_under_dynamic_true():
    backend = CountingBackend()
    compiled = framejit.compile(_indexed_list, backend=backend, dynamic=True)
    traced, eager = _traced(), eager_frames()
    ws = [torch.randn(5) for _ in range(16)]
    for n, i in enumerate(VALUES[1:]):
        x = torch.randn(5)
        assert_same(compiled(x, ws, i), _indexed_list(x, ws, i))
        if n == 3:
            after_four = _traced() - traced
    assert eager_frames() == eager
    assert _traced() - traced == after_four, (after_four, _traced() - traced)


def test_fullgraph_formats_a_changing_int_by_specialising():
    """With fullgraph=True a break is an error, so formatting a changing int specialises it (one trace per
    value, as stock torch.compile) instead of breaking: before, the second value raised framejit.Unsupported
    where eager returns."""
    backend = CountingBackend()
    compiled = framejit.compile(_layer_scale, backend=backend, fullgraph=True)
    for i in (0, 1, 2, 1):
        x = torch.randn(3)
        assert_same(compiled(x, i), _layer_scale(x, i))
    assert backend.graph_count == 3  # one per value (0, 1, 2); the repeated 1 hits its entry
