"""The onnxrt per-call path reads the weights' metadata only when they changed (NOTE [Weights in the
signature] in onnxrt/compiler.py, issue 17).

The backend is called directly on an FX graph whose weights are inputs (as framejit and torch.compile
pass them), so that nothing in front of it (framejit's guards) sees a change first: each test changes a
weight between calls in a way the remembered identity, version and epoch must notice, and compares with
eager on fresh inputs, twice; no signature may end up running eagerly (a reused program for the old
metadata fails in ORT and falls back), and the program count says whether a new signature was read.
Costs are counted (C calls seen by `sys.setprofile`), never timed.
"""
from __future__ import annotations

import sys

import pytest
import torch

from framejit.backends.onnxrt import onnxrt

F32 = dict(rtol=1e-4, atol=1e-5)


class _Net(torch.nn.Module):
    def forward(self, w, b, x):
        return torch.nn.functional.linear(x, w, b).relu() + w.reshape(-1)[:3].sum()


def _weights(dtype=torch.float32, rows=4):
    """Parameters that do not require grad (inference weights; `resize_` refuses the others)."""
    torch.manual_seed(0)
    return (torch.nn.Parameter(torch.randn(rows, 4, dtype=dtype), requires_grad=False),
            torch.nn.Parameter(torch.randn(rows, dtype=dtype), requires_grad=False))


def _compiled(w, b, x):
    gm = torch.fx.symbolic_trace(_Net())
    return gm, onnxrt(gm, [w, b, x], {"allow_spinning": False})


def _x(seed, dtype=torch.float32):
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check(gm, compiled, w, b, seeds, dtype=torch.float32):
    for seed in seeds:
        x = _x(seed, dtype)
        expected, actual = gm(w, b, x), compiled(w, b, x)
        torch.testing.assert_close(actual, expected, **F32)
        assert actual.requires_grad == expected.requires_grad
    assert all(p is not None for p in compiled.programs.values()), "a signature fell back to eager"


def _calls(fn, event: str, name: str) -> int:
    """How many profiler `event`s ("call": Python functions, "c_call": C functions) named `name` `fn` makes."""
    calls = []

    def profile(frame, seen, arg):
        callee = arg if seen == "c_call" else frame.f_code
        if seen == event and getattr(callee, "co_name" if seen == "call" else "__name__", "") == name:
            calls.append(1)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return len(calls)


def _stride_calls(fn) -> int:
    return _calls(fn, "c_call", "stride")


def test_unchanged_weights_are_not_read_again():
    """A call whose weights are the remembered objects, unchanged, reads the strides of its activation only."""
    w, b = _weights()
    with torch.no_grad():
        gm, compiled = _compiled(w, b, _x(0))
        _check(gm, compiled, w, b, (1, 2))
        x = _x(3)
        assert _stride_calls(lambda: compiled(w, b, x)) == 1
        w.mul_(2)  # a new version: the next call reads every input again, then remembers
        assert _stride_calls(lambda: compiled(w, b, x)) == 3
        assert _stride_calls(lambda: compiled(w, b, x)) == 1
        _check(gm, compiled, w, b, (4, 5))
    assert len(compiled.programs) == 1


def _replace_by_float64(w, b):
    return (torch.nn.Parameter(w.detach().double(), requires_grad=False),
            torch.nn.Parameter(b.detach().double(), requires_grad=False))


def _replace_by_other_shape(w, b):
    return _weights(rows=6)


def _transpose_in_place(w, b):  # a square weight: the same shape, other strides, a new version
    with torch.no_grad():
        w.t_()
    return w, b


def _resize_in_place(w, b):
    with torch.no_grad():
        w.resize_(2, 4)
        b.resize_(2)
    return w, b


def _data_to_float64(w, b):  # no version bump: the epoch (NOTE [Writes through .data])
    w.data, b.data = w.data.double(), b.data.double()
    return w, b


def _data_of_other_shape(w, b):
    w.data = torch.randn(5, 4)
    b.data = torch.randn(5)
    return w, b


def _swapped(w, b):  # the object gets another TensorImpl; versions may read the same
    other_w, other_b = _weights(rows=6)
    torch._C._swap_tensor_impl(w, other_w)
    torch._C._swap_tensor_impl(b, other_b)
    return w, b


def _preserved_version(w, b):  # an in-place change whose version is put back
    with torch.no_grad(), torch.autograd.grad_mode._unsafe_preserve_version_counter(w):
        w.t_()
    return w, b


CHANGES = {f.__name__.lstrip("_"): f for f in (
    _replace_by_float64, _replace_by_other_shape, _transpose_in_place, _resize_in_place, _data_to_float64,
    _data_of_other_shape, _swapped, _preserved_version)}


@pytest.mark.parametrize("name", CHANGES)
def test_a_changed_weight_is_seen(name):
    w, b = _weights(rows=4)  # square, so that a transposed weight keeps its shape
    with torch.no_grad():
        gm, compiled = _compiled(w, b, _x(0))
        _check(gm, compiled, w, b, (1, 2))
        w, b = CHANGES[name](w, b)
        _check(gm, compiled, w, b, (3, 4), dtype=w.dtype)
    assert len(compiled.programs) == 2  # the new metadata was read: a program of its own


def test_requires_grad_flipped_between_calls():
    """requires_grad is not part of the signature: a weight that starts requiring grad takes the training
    path (outputs that require grad, gradients as eager's)."""
    w, b = _weights()
    gm, compiled = _compiled(w, b, _x(0))
    _check(gm, compiled, w, b, (1, 2))
    w.requires_grad_(True)
    _check(gm, compiled, w, b, (3,))
    compiled(w, b, _x(4)).sum().backward()
    expected = w.grad.clone()
    w.grad = None
    gm(w, b, _x(4)).sum().backward()
    torch.testing.assert_close(w.grad, expected, **F32)


def test_inference_tensor_weights_are_read_in_full():
    """Inference tensors have no version counter: they are never remembered, and a change in place (under
    inference mode, where nothing bumps) is still seen."""
    with torch.inference_mode():
        w, b = torch.randn(4, 4), torch.randn(4)
        gm, compiled = _compiled(w, b, _x(0))
        _check(gm, compiled, w, b, (1, 2))
        assert compiled._weight_memo.ids == []  # no weight remembered: all inputs are read every call
        w.t_()
        _check(gm, compiled, w, b, (3, 4))
    assert len(compiled.programs) == 2


def test_weights_updated_at_every_call_keep_one_program():
    """A loop that updates the weights in place before each call (versions move) keeps eager's results
    with the one program."""
    w, b = _weights()
    with torch.no_grad():
        gm, compiled = _compiled(w, b, _x(0))
        for step in range(4):
            w.add_(0.25)
            b.mul_(0.5)
            _check(gm, compiled, w, b, (step,))
    assert len(compiled.programs) == 1


def test_a_weight_transposed_in_place_is_frozen_from_memory_that_lives():
    """NOTE [Initializers outlive their session] in onnxrt/runtime.py: a module whose weight was transposed in
    place compiles again with that (non-contiguous) weight frozen through a contiguous copy, which the
    session must keep (before: outputs of 1e25 computed from freed memory)."""
    import framejit

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).eval()
    compiled = framejit.compile(model, backend="onnxrt", options={"allow_spinning": False})
    with torch.no_grad():
        for step in range(6):
            if step == 2:
                model.weight.t_()
            x = _x(step)
            torch.testing.assert_close(compiled(x), model(x), **F32)
            torch.randn(64, 64) @ torch.randn(64, 64)  # allocations that may reuse freed memory


class _Add(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


def test_a_graph_without_weights_is_not_searched_for_weights_on_every_call():
    """A graph with no weights (`x * 2 + y`) remembers that it has none: later calls look its program up by
    the full signature, without searching the inputs for weights again (Parameter's `__instancecheck__`);
    inputs whose layout, dtype or kind change between calls still get their own program and eager's values."""
    gm = torch.fx.symbolic_trace(_Add())
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        compiled = onnxrt(gm, [x, y], {"allow_spinning": False})
        torch.testing.assert_close(compiled(x, y), gm(x, y), **F32)
        assert _calls(lambda: compiled(x, y), "call", "__instancecheck__") == 0
        assert _calls(lambda: compiled(x, y), "call", "_memo_positions") == 0
        cases = [(x.t(), y.t()), (x.double(), y.double()), (torch.nn.Parameter(x, requires_grad=False), y),
                 (x[:, :2], y[:, 1:3]), (x, y)]
        for a, b in cases * 2:
            torch.testing.assert_close(compiled(a, b), gm(a, b), **F32)
    assert len(compiled.programs) == 4 and all(p is not None for p in compiled.programs.values())
