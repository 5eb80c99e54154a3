"""Dynamic floats computed with symbolic ints inside: `cos(pi * step / T) * lr`.

NOTE [Symbolic ints inside dynamic floats]: `CosineAnnealingLR.get_lr` computes
`(1 + cos(pi * last_epoch / T_max)) / (1 + cos(pi * (last_epoch - 1) / T_max)) * (group["lr"] - eta_min)`,
with `last_epoch` a symbolic int (NOTE [Dynamic ints]) and `group["lr"]` a dynamic float (NOTE [Dynamic floats]).
The left factor is a ShapeEnv float (sym_arith), the right one a computed float (OutputGraph.float_op), and their
product had no symbolic path: both were specialised, and a train step calling `sched.step()` recompiled at every
step until the recompile limit sent it to eager (stock torch.compile compiles it a fixed number of times).
Such an operand is now taken by `float_op` as it is, when its graph node is an expression of plain Python
operations (operator, math, torch's `_sym_*` twins of math, which compute math's result on Python numbers) over
number constants and symbolic int graph inputs read from a source: its value is its hint, and those int inputs
are the computed float's `int_roots`. They are specialised with its float roots (SymFloatValue.specialise), and a
computed float stored back (`group["lr"] = ...`) is rebuilt in Python from both (NOTE [Computed floats rebuilt
in Python] in codegen.py): the same operations on the same numbers as eager, bit for bit. Anything else (a size
read from a tensor, an unbacked symbol, another op) specialises as before.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch

from .values import SymFloatValue, SymNodeValue

_SYM_MATH = {getattr(torch, f"_sym_{name}") for name in ("sqrt", "cos", "sin", "tan", "cosh", "sinh", "tanh", "asin",
                                                          "acos", "atan", "log2") if hasattr(torch, f"_sym_{name}")}


def plain_target(target: Any) -> bool:
    """A function that computes Python's own arithmetic on Python numbers (NOTE [Computed floats rebuilt in
    Python])."""
    name = getattr(target, "__name__", "")
    return (getattr(operator, name, None) is target or getattr(math, name, None) is target
            or target in (max, min, round) or target in _SYM_MATH)  # max/min of floats: NOTE [Sorting by symbolic
            # keys]; round(a, 2): NOTE [Builtins of dynamic floats]


def int_roots(out, value: SymNodeValue) -> tuple | None:
    """The sourced symbolic int inputs whose plain expression `value` is (NOTE [Symbolic ints inside dynamic
    floats]); None when it is anything else."""
    import torch.fx
    if type(value.sym) not in (torch.SymInt, torch.SymFloat) or type(value.sym.node.hint) not in (int, float):
        return None
    inputs = {e.value.node: e.value for e in out.inputs if type(e.value) is SymNodeValue
              and e.value.source is not None and isinstance(e.value.sym, torch.SymInt)}
    found: dict[Any, SymNodeValue] = {}
    pending = [value.node]
    while pending:
        node = pending.pop()
        if node in inputs:
            found[node] = inputs[node]
            continue
        if node.op != "call_function" or node.kwargs or not plain_target(node.target):
            return None
        for arg in node.args:
            if isinstance(arg, torch.fx.Node):
                pending.append(arg)
            elif type(arg) not in (int, float, bool):
                return None
    return tuple(found.values()) if found else None


def float_operand(out, v: Any) -> bool:
    """`v` may be an operand of float_op: a dynamic float, a number constant, or a plain int expression."""
    from .values import ConstantValue
    if isinstance(v, SymFloatValue) or isinstance(v, ConstantValue) and type(v.value) in (int, float):
        return True
    return isinstance(v, SymNodeValue) and int_roots(out, v) is not None


def example_of(v: Any) -> Any:
    """The value now of a float_op operand."""
    if isinstance(v, SymFloatValue):
        return v.example
    if isinstance(v, SymNodeValue):
        return v.sym.node.hint
    return v.as_constant()


def operand_int_roots(out, args: tuple) -> tuple:
    """The int roots of float_op operands, each once."""
    roots: dict[int, SymNodeValue] = {}
    for a in args:
        found = a.int_roots if isinstance(a, SymFloatValue) else \
            int_roots(out, a) if isinstance(a, SymNodeValue) else ()
        roots.update((id(r), r) for r in found or ())
    return tuple(roots.values())
