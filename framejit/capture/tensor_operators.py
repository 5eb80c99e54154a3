"""Python operators on tensors read the Tensor class's operator methods as CPython does.

NOTE [Patched tensor operators]: `x + 1` on a tensor was recorded as the graph op `operator.add` without
looking at `torch.Tensor.__add__`. A user who patched it (`torch.Tensor.__add__ = lambda s, o: ...`, before or
after the first call) got the patch only where the graph runs as Python (the eager backend calls
operator.add, which finds the patch) and the real op where a backend lowers the graph (onnxrt: x + 1 where
eager gives the patch's answer; red team h12red3), with nothing guarded. As for methods (NOTE [Patched tensor
methods] in attributes.py), the operator's method on the tensor operand's class (`__add__` for the left
operand, the reflected `__radd__` for the right, `__iadd__` then `__add__` in place, `__gt__` for a right
operand of `<`; `__neg__`, `__pos__`, `__invert__`, `__abs__` for `-x`, `+x`, `~x`, `abs(x)`) is looked up: one that is a Python function from outside torch is a graph break (the
operator runs in Python, calling the patch), and otherwise how the name resolves on the class is guarded,
so a later patch recompiles. The protocol methods the translator answers itself for a tensor go the same
way (check_tensor_dunder, red team h12patch): `x[i]` (`__getitem__`), `x[i] = v` (`__setitem__`), `len(x)`,
`iter(x)` and every loop or unpacking over x (`__iter__`), `reversed(x)`, the truth of a tensor made from
constants (`__bool__`), `float/int/complex/str(x)` of one, `seq[x]` (`__index__`), and a tensor as a set
element or dict key (`__hash__`: identity_keys.set_element; red team h12red: `{w: 1}[w]` after
`Tensor.__hash__ = lambda s: 7` raised KeyError in eager, not compiled; `__eq__` is only reached once
hashes are equal, which a patched `__hash__` alone can make so). A patch is any
resolution other than torch's own: a Python function from outside torch, or, for a name torch.Tensor had when
this module was imported, another object than that one (a functools.partial, a C function of another class).
"""
from __future__ import annotations

import operator
import types
from typing import Any, Callable

import torch

from . import lookup
from .breaks import BreakKind, Unsupported
from .values import TensorValue, Value

_REFLECTED_COMPARE = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_NOT_DUNDERS = {operator.is_, operator.is_not, operator.contains}


_PROTOCOL = ("__getitem__", "__setitem__", "__len__", "__iter__", "__reversed__", "__bool__", "__index__",
             "__float__", "__int__", "__complex__", "__str__", "__repr__", "__hash__")
_ORIGINAL = {name: lookup.mro_lookup(torch.Tensor, name)[1] for name in _PROTOCOL}


def _patched(attr: Any, name: str | None = None) -> bool:
    if isinstance(attr, types.FunctionType):
        return not (attr.__module__ or "").startswith("torch")
    return name in _ORIGINAL and attr is not _ORIGINAL[name]


def _names(fn: Callable, left: bool, plain: Callable | None) -> list[str]:
    name = fn.__name__.strip("_")
    if plain is not None:  # in place: __iadd__, then what `a = a + b` calls
        return [f"__{name}__", *_names(plain, left, None)]
    if name in _REFLECTED_COMPARE:
        return [f"__{name if left else _REFLECTED_COMPARE[name]}__"]
    return [f"__{name}__" if left else f"__r{name}__"]


def check_tensor_operator(tx, fn: Callable, a: Value, b: Value, inplace_to_plain: dict) -> None:
    """NOTE [Patched tensor operators]: break on a patched operator method of a tensor operand's class, else
    guard how it resolves."""
    if fn in _NOT_DUNDERS or not isinstance(getattr(fn, "__name__", None), str):
        return
    for operand, left in ((a, True), (b, False)):
        if not isinstance(operand, TensorValue) or (not left and isinstance(a, TensorValue)):
            continue
        cls = operand.python_type()
        for name in _names(fn, left, inplace_to_plain.get(fn) if left else None):
            attr = lookup.mro_lookup(cls, name)[1]
            if _patched(attr):
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.{name} is a Python function "
                                  "from outside torch (a patched operator): it runs as Python")
            lookup.guard_lookup(tx.output, cls, name)


_UNARY = {"neg", "pos", "invert", "abs"}


def check_tensor_unary(tx, fn: Callable, a: TensorValue) -> None:
    """NOTE [Patched tensor operators] for `-x`, `+x`, `~x`, `abs(x)`."""
    name = getattr(fn, "__name__", None)
    if name not in _UNARY:
        return
    cls = a.python_type()
    attr = lookup.mro_lookup(cls, f"__{name}__")[1]
    if _patched(attr):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.__{name}__ is a Python function from "
                          "outside torch (a patched operator): it runs as Python")
    lookup.guard_lookup(tx.output, cls, f"__{name}__")


def check_tensor_dunder(tx, v: TensorValue, *names: str) -> None:
    """NOTE [Patched tensor operators] for the protocol methods (`x[i]`, `len(x)`, `iter(x)`, ...): break on
    a patched one, else guard how each name resolves on the tensor's class (one line per name)."""
    cls = v.python_type()
    for name in names:
        attr = lookup.mro_lookup(cls, name)[1]
        if _patched(attr, name):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.{name} is not torch's own (a patched "
                              "tensor method): it runs as Python")
        lookup.guard_lookup(tx.output, cls, name)
