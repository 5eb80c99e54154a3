"""Adversarial differential programs, eighth round (issue 12, red team): version counters of tensors the graph
makes and writes, and state changed between calls. Each runs eagerly and compiled on separate but equal state
over several calls, changing the state between calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt", "triton"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


# ---- NOTE [Version counts of graph outputs] -----------------------------------------------------------------

def _written_once(x):
    y = x * 2
    y.add_(1)
    return y


def _written_through_views(x):
    y = x * 2
    y.add_(1)
    y.mul_(3)
    return y, y[0:1], x + 1


def _setitem_and_a_view(x):
    y = x.clone()
    y[0] = 5
    y += 1
    v = y.view(2, 2)
    v.mul_(2)
    return v, y, x.add_(1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_written_once, _written_through_views, _setitem_and_a_view])
def test_outputs_written_in_place_keep_eager_versions(fn, backend):
    # before: onnxrt and triton returned fresh tensors at version 0 (eager: 1, 2 and 3)
    compiled = framejit.compile(fn, backend=_backend(backend))
    for n in (4, 4, 4):
        x = torch.randn(n)
        x_c = x.clone()
        expected, actual = fn(x), compiled(x_c)
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, tuple) else (actual,)
        assert_same(actual, expected)
        assert [t._version for t in actual] == [t._version for t in expected]
        assert x_c._version == x._version


def _saved_by_a_later_op(x, w):
    y = x * 2
    y.add_(1)
    return y, y * w


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_that_require_grad_still_run_backward(backend):
    # the backend's backward may save such an output at version 0: setting eager's count made backward raise
    compiled = framejit.compile(_saved_by_a_later_op, backend=_backend(backend))
    for _ in range(2):
        x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        x_c, w_c = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        expected, actual = _saved_by_a_later_op(x, w), compiled(x_c, w_c)
        assert_same(actual, expected)
        sum(t.sum() for t in expected).backward()
        sum(t.sum() for t in actual).backward()
        assert_same(x_c.grad, x.grad)
        assert_same(w_c.grad, w.grad)


# ---- NOTE [Zero-argument state getters] ----------------------------------------------------------------------

_GETTERS = {
    "initial_seed": (lambda x: x + torch.initial_seed(), torch.manual_seed, (1, 2, 2, 3)),
    "deterministic_debug_mode": (lambda x: x + torch.get_deterministic_debug_mode(),
                                 torch.set_deterministic_debug_mode, (0, 1, 1, 0)),
    "autocast_cache": (lambda x: x + torch.is_autocast_cache_enabled(), torch.set_autocast_cache_enabled,
                       (True, False, False, True)),
    "mkldnn_enabled": (lambda x: x + torch._C._get_mkldnn_enabled(), torch._C._set_mkldnn_enabled,
                       (True, False, False, True)),
    "fwd_grad_enabled": (lambda x: x * 2 if torch._C._is_fwd_grad_enabled() else x, torch._C._set_fwd_grad_enabled,
                         (True, False, False, True)),
}


@pytest.mark.parametrize("name", sorted(_GETTERS))
def test_state_read_by_a_zero_argument_getter_is_guarded(name):
    # before: the getter's answer was folded into the trace unguarded, so the entry kept the first state's answer
    fn, setter, states = _GETTERS[name]
    compiled = framejit.compile(fn, backend=CountingBackend())
    try:
        for state in states:
            setter(state)
            x = torch.randn(3)
            assert_same(compiled(x), fn(x))
    finally:
        setter(states[0])


def _reads_autocast_inside(x):
    before = torch.is_autocast_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = torch.is_autocast_enabled()
        y = x @ x.T
    return y, before, inside


def test_getter_inside_a_traced_block_answers_the_traced_state():
    compiled = framejit.compile(_reads_autocast_inside, backend=CountingBackend())
    for outer in (False, True, False):
        x = torch.randn(2, 2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=outer):
            assert_same(compiled(x), _reads_autocast_inside(x))


# ---- NOTE [Scalars of half-precision arithmetic] (onnxrt/semantics.py) with int scalars -------------------------

@pytest.mark.parametrize("op", ["half_div_70000", "half_mul_70000", "bf16_mul_257"])
def test_reduced_precision_arithmetic_by_an_int_scalar_the_dtype_cannot_hold(op):
    # before: onnxrt rounded the int to the tensor's dtype first (70000 -> inf in float16): x.half() / 70000 gave 0
    fn = {"half_div_70000": lambda x: x.half() / 70000, "half_mul_70000": lambda x: x.half() * 70000 * 0.25,
          "bf16_mul_257": lambda x: x.bfloat16() * 257}[op]
    compiled = framejit.compile(fn, backend="onnxrt")
    for x in (torch.tensor([1.0, 100.0, 3000.0, 0.5]), torch.tensor([0.25, -7.0, 2.5, 0.125])):
        torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)


def _pointwise_on_a_transposed_input(x):
    return x.T * 2, x.clone(), x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_not_written_keep_version_zero(backend):
    # triton gives outputs eager's layout through a copy_, which bumped their counters to 1 (eager: 0)
    compiled = framejit.compile(_pointwise_on_a_transposed_input, backend=_backend(backend))
    for _ in range(2):
        x = torch.randn(4, 3).T
        expected, actual = _pointwise_on_a_transposed_input(x), compiled(x)
        assert_same(actual, expected)
        assert [t._version for t in actual] == [t._version for t in expected]
        assert [t.stride() for t in actual] == [t.stride() for t in expected]
