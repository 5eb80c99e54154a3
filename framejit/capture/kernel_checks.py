"""Checks eager's arithmetic kernels make that fake tensors skip (NOTE [Arithmetic checks of eager kernels]).

Role: before OutputGraph (graph.py) records an elementwise arithmetic op, `check_arithmetic` runs the op's
real kernel on one-element tensors of the same dtypes, devices and dimensions, with the call's Python
scalars (a symbolic size at its value in this call); an error there is the user's error (eager raises it).
For a symbolic scalar the values where such kernels raise (0, -1; the other truth value of a relation) are
tried as well and guarded away (or the scalar specialised). Pure functions over abstract values; the only
state touched is the shape environment's guards.

NOTE [Arithmetic checks of eager kernels]: eager's CPU/CUDA kernels of elementwise arithmetic check their
operands where meta and fake kernels do not: subtraction of a bool (`x - (x.size(1) != 2)`, a Python bool
from a size relation; `torch.sub(x, y, alpha=True)`), an in-place result of another dtype (`x.long().mul_(2.5)`,
`x.long().mul_(y_float)`), a float alpha for integral tensors, integers to negative integer powers
(`x.long() ** (n - 6)`), integral division by zero (`torch.div(x.long(), n - 6, rounding_mode="floor")`,
`torch.fmod`, `%`), bitwise ops of floats. The trace succeeded, and onnxrt and triton lowered a graph that
returned values where eager raised on every call (revD D1; the eager backend raised, running the real op).
A fake run cannot see these (meta kernels do not check, and a SymBool or SymInt stands for every value), so
the call is also made for real on one-element tensors (ones: no division by a zero element) of the
operands' dtypes, devices and dimensions (0-dim stays 0-dim: promotion treats it as a scalar), with each
symbolic scalar at its value now. When that raises, eager raises for this call: the symbolic scalars are
specialised (guarded equal, so other values retrace) and the probe's exception is the user's (UserException,
as a fake run's error). When it does not, each symbolic int or float is also tried at 0 and -1, and a
relation at its other truth value: a failure there means some later value would raise where the lowered
graph would not, so the value is guarded away from it (`s != 0`; `s >= 0` when now non-negative; a relation
or anything else is specialised). Only after a successful fake run (its shape and dtype errors come first,
as in eager's TensorIterator) and only for the operator family below; data-dependent errors (a tensor of
zeros as divisor) are out of reach. An exception type or message equal to eager's is the probe's own: the
same kernel raises it. Probes that passed are remembered by what decides them (target, dtypes, dims,
devices, which operands are one tensor, the scalars' types and values, the default dtype), so a model's
repeated `x * 0.5` runs one kernel; measured on a 600-op trace with a symbolic int in 200 of them: the checks
took ~5% of the trace time before this memo.
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .breaks import UserException
from .values import SymFloatValue, SymNodeValue, TensorValue, Value

_BINARY = ("add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
           "remainder", "fmod", "pow", "float_power", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_left_shift", "bitwise_right_shift")
_DUNDERS = ("add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift")
_NAMES = frozenset(
    [*_BINARY, *(n + "_" for n in _BINARY), *(f"__{p}{n}__" for n in _DUNDERS for p in ("", "r", "i"))])
_OPERATORS = frozenset(getattr(operator, n) for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lshift", "rshift", "iadd",
    "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor", "ilshift", "irshift"))


def _in_family(kind: str, target: Any) -> bool:
    if kind == "call_method":
        return isinstance(target, str) and target in _NAMES
    try:
        if target in _OPERATORS:
            return True
    except TypeError:  # an unhashable target
        return False
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None)
    return module.startswith("torch") and name in _NAMES


def _symbolic(v: Value) -> bool:
    return isinstance(v, SymFloatValue) or isinstance(v, SymNodeValue)


def _hint(v: Value) -> Any:
    """The Python value a symbolic scalar has in this call, or None when unknown."""
    if isinstance(v, SymFloatValue):
        return v.example
    hint = v.sym.node.hint
    return None if hint is None else v.python_type()(hint)


def _probe_tensor(fake: torch.Tensor, made: dict) -> torch.Tensor:
    key = id(fake)
    if key not in made:  # the same operand twice (`x.mul_(x)`) stays one tensor
        if fake.layout is not torch.strided or fake.is_nested or fake.is_quantized or fake.device.type == "meta":
            raise _NoProbe
        made[key] = torch.ones((1,) * fake.dim(), dtype=fake.dtype, device=fake.device)
    return made[key]


class _NoProbe(Exception):
    """The call's operands cannot be made for real (sparse, quantized, meta, unknown values)."""


def _probe(kind: str, target: Any, args: tuple, kwargs: dict, values: dict) -> BaseException | None:
    """The exception the real kernel raises on one-element operands (symbolic scalars from `values`, by
    id), or None; _NoProbe when the operands cannot be made."""
    made: dict = {}

    def real(v):
        if isinstance(v, TensorValue):
            return _probe_tensor(v.fake, made)
        if _symbolic(v):
            value = values[id(v)]
            if value is None:
                raise _NoProbe
            return value
        if isinstance(v, Value):
            from .graph_calls import _fake_of
            value = _fake_of(v)
            if any(isinstance(t, torch.Tensor) for t in tree_leaves(value)):
                raise _NoProbe  # a tensor inside a container: not this family's operands
            return value
        return v
    try:
        real_args = [real(v) for v in args]
        real_kwargs = {k: real(v) for k, v in kwargs.items()}
    except _NoProbe:
        raise
    except Exception:
        raise _NoProbe from None
    key = _key(kind, target, real_args, real_kwargs)
    if key is not None and key in _PASSED:
        return None
    error = _run(kind, target, real_args, real_kwargs)
    if error is None and key is not None:
        if len(_PASSED) > 4096:
            _PASSED.clear()
        _PASSED.add(key)
    return error


# Calls whose probe passed, by what decides it (dtypes, dims, devices, which operands are one tensor, the
# scalars' types and values): a model repeats the same few (`x * 0.5` per layer). Failures are not kept
# (each raise gets its own exception object).
_PASSED: set = set()


def _key(kind: str, target: Any, args: list, kwargs: dict) -> tuple | None:
    def part(v, seen):
        if isinstance(v, torch.Tensor):
            return ("T", v.dtype, v.dim(), v.device, seen.setdefault(id(v), len(seen)))
        if type(v) in (bool, int, float, complex, str, type(None)) or isinstance(v, torch.dtype):
            return (type(v), v)
        raise TypeError
    try:
        seen: dict = {}
        return (kind, target, torch._C.get_default_dtype(), tuple(part(v, seen) for v in args),
                tuple((k, part(v, seen)) for k, v in sorted(kwargs.items())))
    except TypeError:
        return None


def _run(kind: str, target: Any, real_args: list, real_kwargs: dict) -> BaseException | None:
    grad = torch._C.is_grad_enabled()
    try:
        torch._C._set_grad_enabled(False)
        with torch._C.DisableTorchFunction(), _no_dispatch_modes():
            if kind == "call_method":
                getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
            else:
                target(*real_args, **real_kwargs)
    except Exception as e:  # noqa: BLE001 - the kernel's own error is the point
        return e
    finally:
        torch._C._set_grad_enabled(grad)
    return None


def _no_dispatch_modes():
    """Outside any TorchDispatchMode (the user's, while tracing): the probe runs torch's kernels."""
    if not torch._C._len_torch_dispatch_stack():
        return contextlib.nullcontext()
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def check_arithmetic(kind: str, target: Any, args: tuple, kwargs: dict) -> None:
    """Raises the user's exception where eager's kernel raises for this call, and guards symbolic scalars
    away from values where it would (NOTE [Arithmetic checks of eager kernels])."""
    if not _in_family(kind, target) or "out" in kwargs:
        return
    leaves = [v for v in (*args, *kwargs.values()) if isinstance(v, Value)]  # the family's operands: top level
    if not any(isinstance(v, TensorValue) for v in leaves):
        return
    symbolic = list({id(v): v for v in leaves if _symbolic(v)}.values())
    now = {id(v): _hint(v) for v in symbolic}
    try:
        error = _probe(kind, target, args, kwargs, now)
    except _NoProbe:
        return
    if error is not None:
        for v in symbolic:
            v.as_constant()  # specialised: guarded equal, so another value traces anew
        raise UserException(error)
    for v in symbolic:
        for other in _critical_values(now[id(v)]):
            try:
                failed = _probe(kind, target, args, kwargs, {**now, id(v): other}) is not None
            except _NoProbe:
                failed = False
            if failed:
                _guard_away(v, now[id(v)], other)


def _critical_values(value: Any) -> tuple:
    """Values of a scalar where eager's arithmetic kernels raise (zero divisors, negative powers, bools)."""
    if type(value) is bool:
        return (not value,)
    if type(value) is int:
        return tuple(c for c in (0, -1) if c != value)
    if type(value) is float:
        return tuple(c for c in (0.0, -1.0) if c != value)
    return ()


def _guard_away(v: Value, now: Any, failing: Any) -> None:
    """Guards the symbolic scalar `v` (now `now`) to exclude `failing`'s kind of value: a relation of the
    shape environment where one says it (`s != 0`, `s >= 0`), else its value (specialised)."""
    sym = getattr(v, "sym", None)
    if isinstance(v, SymNodeValue) and isinstance(sym, (torch.SymInt, torch.SymFloat)) and type(now) is not bool:
        if failing == 0:
            if bool(sym != 0):  # guarded by the env; now != 0, so it holds
                return
        elif failing == -1 and now >= 0:
            if bool(sym >= 0):
                return
    v.as_constant()
