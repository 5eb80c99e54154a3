"""Errors eager's arithmetic kernels raise where fake tensors do not (NOTE [Arithmetic checks of eager
kernels], capture/kernel_checks.py): Python scalars from sizes (SymBool, SymInt) and constants next to
tensors. Each program runs eagerly and compiled (onnxrt lowers it: a silent value there was the bug) over
several shapes; the compiled call raises exactly when eager raises, with eager's type and message."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same


def _outcome(fn, x):
    try:
        return "value", fn(x)
    except Exception as e:  # noqa: BLE001 - the exception is compared
        return "raised", (type(e), str(e))


def _differential(fn, shapes, dynamic, backend="onnxrt"):
    framejit.reset()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    raised = 0
    for shape in shapes:
        x = torch.randn(*shape)
        expected, actual = _outcome(fn, x.clone()), _outcome(compiled, x.clone())
        assert actual[0] == expected[0], (shape, expected, actual)
        if expected[0] == "raised":
            raised += 1
            assert actual[1] == expected[1]
        else:
            assert_same(actual[1], expected[1])
    return raised


SHAPES = [(4, 5), (3, 6), (2, 2), (2, 7), (3, 2)]  # incl. size(1) = 2 and 6: zero divisors, False relations

PROGRAMS = {
    # a Python bool from a size relation subtracted: eager's sub kernel refuses a bool (revD D1)
    "sub_relation": (lambda x: x - (x.size(1) != 2), True),
    "rsub_relation": (lambda x: (x.size(1) > 2) - x, True),
    "sub_inplace_relation": (lambda x: x.clone().sub_(x.size(1) > 2), True),
    "sub_alpha_true": (lambda x: torch.sub(x, x, alpha=True), True),
    # in-place results of another dtype, float alphas of integral tensors
    "long_mul_float_scalar": (lambda x: x.long().mul_(x.size(1) / 3), True),
    "long_mul_float_tensor": (lambda x: x.long().mul_(x), True),
    "long_add_float_alpha": (lambda x: torch.add(x.long(), x.long(), alpha=x.size(1) / 2), True),
    # value-dependent: a negative power of an integer tensor, an integral division by zero
    "long_pow_negative": (lambda x: x.long() ** (x.size(1) - 6), True),
    "long_floor_div_zero": (lambda x: torch.div(x.long(), x.size(1) - 6, rounding_mode="floor"), True),
    "long_trunc_div_zero": (lambda x: torch.div(x.long(), x.size(1) - 2, rounding_mode="trunc"), True),
    # the same ops where eager is fine
    "add_relation": (lambda x: x + (x.size(1) > 2), False),
    "float_pow_negative": (lambda x: x.abs() ** (x.size(1) - 6) + 1, False),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_raises_where_eager_raises(name):
    fn, raising = PROGRAMS[name]
    dynamic = True if "relation" not in name else None  # None: symbolic from the 2nd call (revD D1)
    assert (_differential(fn, SHAPES, dynamic) > 0) == raising


def test_zero_divisor_guarded_not_specialised():
    # the divisor is guarded non-zero (a relation of the shape env): sizes where it is not zero share one
    # graph; the size that makes it zero raises as eager does, and the graph is still used after
    from tests.helpers import CountingBackend
    backend = CountingBackend()

    def fn(x):
        return torch.fmod(x.long() * 7, x.size(0) - 3)

    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    counts = []
    for n in (5, 6, 3, 8, 9):
        x = torch.randn(n, 2) * 10
        expected, actual = _outcome(fn, x), _outcome(compiled, x)
        assert actual[0] == expected[0] == ("raised" if n == 3 else "value")
        if expected[0] == "value":
            assert_same(actual[1], expected[1])
        else:
            assert actual[1] == expected[1]
        counts.append(backend.graph_count)
    assert counts[:2] == [1, 1] and counts[2] == counts[3] == counts[4]  # 8 and 9 reuse the first graph
