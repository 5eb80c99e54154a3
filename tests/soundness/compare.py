"""Comparison of one eager call with one compiled call, as a difference message or None.

Values: same types and structure; tensors with the same dtype, shape, requires_grad and values (NaN equal
to NaN, a tolerance for lowered backends, a looser one for bfloat16/float16); floats bitwise equal
in sign and NaN-ness (`-0.0` is not `0.0` here, in tensors too; the sign bit of NaN is not compared); a returned tensor that shares storage
with an argument in eager must share it with the same argument in compiled (views stay views).
"""
from __future__ import annotations

import math
from typing import Any

import torch


def global_state() -> tuple:
    """Torch's process-wide state a call may change (and the next call reads)."""
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"), torch.get_default_dtype())


def diff(actual: Any, expected: Any, *, rtol: float, atol: float, path: str = "") -> str | None:
    if type(actual) is not type(expected):
        return f"{path}: type {type(actual).__name__} != {type(expected).__name__} ({actual!r} vs {expected!r})"
    if isinstance(expected, torch.Tensor):
        return _diff_tensor(actual, expected, rtol=rtol, atol=atol, path=path)
    if isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            return f"{path}: length {len(actual)} != {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            found = diff(a, e, rtol=rtol, atol=atol, path=f"{path}[{k}]")
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if list(actual) != list(expected):
            return f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            found = diff(actual[k], expected[k], rtol=rtol, atol=atol, path=f"{path}[{k!r}]")
            if found:
                return found
        return None
    if isinstance(expected, float):
        same = (math.isnan(actual) and math.isnan(expected)) or (
            actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected))
        return None if same else f"{path}: {actual!r} != {expected!r}"
    return None if actual == expected else f"{path}: {actual!r} != {expected!r}"


# torch.testing's rtol for these dtypes, and an atol for results near 0 of chained low-precision ops (a
# lowered backend may round an intermediate once more or less: seed 89 of triton --warm, two bf16 mms;
# seed 22 of onnxrt, two float16 mms under autocast: ORT's result is as close to an exact reference as eager's)
_LOW_PRECISION = {torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (1e-3, 4e-3)}


def _diff_tensor(actual: torch.Tensor, expected: torch.Tensor, *, rtol, atol, path) -> str | None:
    for what in ("dtype", "shape", "requires_grad"):
        a, e = getattr(actual, what), getattr(expected, what)
        if a != e:
            return f"{path}: {what} {a} != {e}"
    if expected.is_floating_point() and not torch.equal(torch.signbit(actual.detach()), torch.signbit(expected.detach())):
        zeros = expected.detach() == 0
        if not torch.equal(torch.signbit(actual.detach())[zeros], torch.signbit(expected.detach())[zeros]):
            return f"{path}: sign of zero differs: compiled={actual.detach().flatten()[:6].tolist()} " \
                   f"eager={expected.detach().flatten()[:6].tolist()}"
    if expected.dtype in _LOW_PRECISION:  # one rounding step of these dtypes is far above rtol
        rtol, atol = max(rtol, _LOW_PRECISION[expected.dtype][0]), max(atol, _LOW_PRECISION[expected.dtype][1])
    try:
        torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        first = str(e).strip().splitlines()
        return f"{path}: values differ ({' '.join(first[:3])}) compiled={actual.detach().flatten()[:6].tolist()} " \
               f"eager={expected.detach().flatten()[:6].tolist()}"
    return None


def storage_links(result: Any, args: tuple) -> list:
    """For each tensor in `result` (depth first), which argument tensors it shares storage with."""
    arg_ptrs = []
    for k, a in enumerate(_tensors(args)):
        if a.numel():
            arg_ptrs.append((k, a.untyped_storage().data_ptr()))
    links = []
    for t in _tensors(result):
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        links.append(sorted(k for k, p in arg_ptrs if p == ptr))
    return links


def _tensors(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []
