"""Symbolic sizes and ints carried across graph breaks into resume functions (NOTE [Symbols carried into
resume functions]): a resume function made by a trace whose sizes were symbolic starts symbolic, so
`mark_dynamic` or a frame that already went dynamic compiles each resume function once, not twice."""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, RecordingBackend


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _run(fn, compiled, tensors):
    """Eager and compiled on the same inputs: values and printed output equal."""
    for x in tensors:
        eager_out, compiled_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_out):
            expected = fn(x.clone())
        with contextlib.redirect_stdout(compiled_out):
            got = compiled(x)  # x itself: a clone would drop its mark_dynamic marker
        assert eager_out.getvalue() == compiled_out.getvalue()
        assert type(got) is type(expected)
        for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
            if isinstance(e, torch.Tensor):
                assert g.shape == e.shape and torch.allclose(g, e, atol=1e-5), (x.shape, g, e)
            else:
                assert g == e


def _marked(*shape):
    x = torch.randn(*shape)
    framejit.mark_dynamic(x, 0)
    return x


def two_prints(x):
    y = x * 2
    print("first", y.dim())
    y = y.relu() + 1
    print("second")
    return y.sum(0), y


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_mark_dynamic_compiles_each_resume_function_once(backend):
    # the frame and its two resume functions: 3 graphs over 6 sizes (before: 5, stock torch.compile 5)
    counter = CountingBackend() if backend == "eager" else RecordingBackend("onnxrt")
    compiled = framejit.compile(two_prints, backend=counter)
    before = framejit.stats()["eager_frames"]  # a count over the process (earlier tests' frames stay)
    _run(two_prints, compiled, [_marked(n, 3) for n in (2, 3, 4, 5, 6, 7)])
    assert counter.graph_count == 3
    assert framejit.stats()["eager_frames"] == before


def size_then_int(x):
    n = x.size(0)
    y = x.t()
    print("n is known")
    return x[: n - 1] * n, y * 2


def test_a_symbolic_int_and_a_transposed_tensor_carried_across_a_break():
    # n (a symbol) and y (a view with a symbolic dim 1) reach the resume function symbolic: 2 graphs over
    # 6 sizes (before: 3)
    counter = CountingBackend()
    compiled = framejit.compile(size_then_int, backend=counter)
    _run(size_then_int, compiled, [_marked(n, 3) for n in (3, 4, 5, 6, 7, 9)])
    assert counter.graph_count == 2


def size_in_a_string(x):
    key = f"{x.shape[0]}x{x.shape[1]}"
    return x * len(key)


def test_a_size_formatted_under_automatic_dynamic_does_not_recompile_resume_functions_per_tensor():
    # the frame goes dynamic at the 2nd size, then breaks at formatting; its resume functions get x (read
    # or passed on unread) and the opaque string symbolic from their first trace: 5 graphs over 10 sizes
    # (before: 7, each resume function recompiling once on x's size; stock torch.compile 8); 3 since the
    # graphs that only read the sizes before the break reach no backend (NOTE [Graphs that only read sizes])
    counter = CountingBackend()
    compiled = framejit.compile(size_in_a_string, backend=counter)
    before = framejit.stats()["eager_frames"]
    _run(size_in_a_string, compiled, [torch.randn(n, 3) for n in (2, 3, 4, 5, 6, 10, 11, 12, 13, 14)])
    assert counter.graph_count == 3
    assert framejit.stats()["eager_frames"] == before


def test_dynamic_false_carries_nothing():
    counter = CountingBackend()
    compiled = framejit.compile(two_prints, backend=counter, dynamic=False)
    _run(two_prints, compiled, [torch.randn(n, 3) for n in (2, 3, 2, 3)])
    assert counter.graph_count == 6  # 3 frames x 2 sizes, each static
