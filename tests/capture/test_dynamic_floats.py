"""Floats that change between calls become graph inputs (NOTE [Dynamic floats] in
framejit/capture/values/scalars.py).

A float argument is first specialised; the recompile caused by a new value makes it a graph input, so
every later value reuses one graph (the `.item()` results passed to resume functions are such
arguments). Uses that need the concrete value (comparisons, Python errors) specialise it again, so
results always equal eager's. Each test compares eager and compiled results on every call.
"""
from __future__ import annotations

import logging

import pytest
import torch

import framejit
from framejit import config
from tests.helpers import CountingBackend, assert_same, call_capturing


def run_values(fn, arg_sets, backend=None):
    backend = backend or CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for args in arg_sets:
        expected, expected_exc, expected_out = call_capturing(fn, args, {})
        actual, actual_exc, actual_out = call_capturing(compiled, args, {})
        assert actual_exc is expected_exc and actual_out == expected_out
        if expected_exc is None:
            assert_same(actual, expected)
    return backend, compiled


def item_then_math(x):
    s = (x * 2).sum().item()
    return x * s + s * 2 - 1.5, s
def temperature(x, t):
    return torch.softmax(x / t, -1) * (1 / t) + (-t)
def compared(x, t):
    if t > 1.0:
        return x * t
    return x - t
def derived_returned(x, t):
    return x * t, t * 2
def python_error(x, t):
    return x * (1 / (t - 1.0))


def test_item_result_recompiles_once():
    torch.manual_seed(0)
    backend, compiled = run_values(item_then_math, [(torch.randn(3),) for _ in range(6)])
    # the frame's graph, the resume function's graph for the first value, and one for all later values
    assert backend.graph_count == 3
    resume = backend.graphs[-1]
    assert any(n.op == "placeholder" and n.meta.get("dynamic_float") for n in resume.graph.nodes)


def test_float_argument_recompiles_once(caplog):
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.DEBUG, logger="framejit"):
            backend, _ = run_values(temperature, [(torch.randn(4), 0.5 + i / 3) for i in range(6)])
    finally:
        framejit.set_logs("")
    assert backend.graph_count == 2
    assert any("the float L['t'] changed value" in r.getMessage() for r in caplog.records)


def test_comparison_specialises():
    run_values(compared, [(torch.randn(3), t) for t in (0.5, 2.0, 1.0, 3.0, 0.25, 1.5)])


def test_derived_float_returned():
    run_values(derived_returned, [(torch.randn(3), t) for t in (0.5, 2.0, 1.0, 3.0)])


def test_python_error_for_one_value():
    """1 / (t - 1.0) raises ZeroDivisionError for t == 1.0 only: that value specialises and runs eagerly."""
    backend, compiled = run_values(python_error, [(torch.randn(3), t) for t in (2.0, 3.0, 1.0, 4.0, 1.0, 5.0)])
    assert backend.graph_count == 2


def test_bools_and_ints_stay_specialised():
    def f(x, flag, n):
        return x * n if flag else x - n
    backend, _ = run_values(f, [(torch.randn(3), flag, n) for flag, n in ((True, 2), (False, 2), (True, 3))])
    assert backend.graph_count == 3


def test_turned_off(monkeypatch):
    monkeypatch.setattr(config, "dynamic_floats", False)
    backend, _ = run_values(temperature, [(torch.randn(4), 0.5 + i) for i in range(4)])
    assert backend.graph_count == 4


@pytest.mark.parametrize("backend", ["onnxrt", "eager"])
def test_backends_with_a_dynamic_float(backend):
    run_values(temperature, [(torch.randn(4), 0.5 + i / 3) for i in range(4)], backend=backend)


def shapes_from_float(x, t):
    r = torch.arange(0.0, t)
    y = torch.nn.functional.interpolate(x, scale_factor=t)
    return r, y, y.shape[-1], x * t


def test_ops_whose_shapes_depend_on_the_float_specialise_it():
    """arange(0, t) and interpolate(scale_factor=t) have shapes that depend on t: t is specialised for
    them (a fake-tensor probe with another value shows it), so shapes read later are right."""
    backend, _ = run_values(shapes_from_float, [(torch.randn(1, 1, 4), t) for t in (2.0, 3.0, 2.0, 4.0, 3.0)])
    assert backend.graph_count == 3  # one per distinct value: 2.0, 3.0, 4.0


def nucleus_mask(x, p):
    keep = x.softmax(-1).cumsum(-1) > p
    return x.masked_fill(keep, 0.0), torch.lt(x, p), p <= x.double(), x.ne(p)


@pytest.mark.parametrize("backend", ["onnxrt"])  # split between interpreters (tests/conftest.py)
def test_float_compared_with_a_tensor_stays_in_the_backend(backend, caplog):
    # NOTE [Float inputs as tensors]: a comparison with a float32/float64 tensor casts the value to its dtype;
    # before, the whole graph ran eagerly on onnxrt once p was a graph input (top-p sampling)
    from tests.helpers import RecordingBackend
    framejit.set_logs("eager_fallback")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            backend, _ = run_values(nucleus_mask, [(torch.randn(2, 5), p) for p in
                                                   (0.9, 0.5, float("nan"), float("inf"), 0.3)],
                                    backend=RecordingBackend(backend))
    finally:
        framejit.set_logs("")
    assert backend.graph_count == 3  # the NaN an entry of its own (NOTE [Float symbols are not NaN]); inf not
    assert not [r for r in caplog.records if "float input" in r.getMessage()]
