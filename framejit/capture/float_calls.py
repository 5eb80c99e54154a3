"""Builtins and math functions of a dynamic float kept in the graph (NOTE [Builtins of dynamic floats]).

NOTE [Builtins of dynamic floats] (hhuntD MED-3): `abs(a)`, `float(a)`, `bool(a)`, `round(a, 2)`,
`math.cos(a)` (and the other one-float math functions), `a // 0.3` and `a % 0.3` of a float argument that had
become a graph input (NOTE [Dynamic floats]) were folded on its value now, which specialised it again: one
entry per value, then the recompile limit ran the frame eagerly (stock torch.compile: 2 graphs). Each is now
a float node of the graph (OutputGraph.float_op) that calls the same Python function on the call's float at
run time, so the value is eager's bit for bit (round-half-even of round(a, 2), floor semantics of // and % for
negative numbers, -0.0 from abs and round are CPython's own). A call that raises for the value seen while
tracing (math.sqrt(-1.0), math.log(0.0)) specialises it and raises eager's error, as before; a later value
that raises raises in the graph as eager raises it (the frame reruns eagerly: NOTE [Graph failures rerun
eagerly]), or, in a frame with no graph before it, in the float rebuilt in Python (the call reruns eagerly as
well: NOTE [Rebuilt floats that raise] in raising_floats.py). `float(a)` of a float is `a` itself. `bool(a)` is the relation `a != 0` of the float's symbol
(NOTE [Float relations]), guarded: every value on the same side hits the entry; a computed float has no
symbol and specialises, as before.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

import torch

from .values import ConstantValue, SymFloatValue, Value

# math functions of one float returning a float (CPython converts an int argument with float() first)
_ONE_FLOAT = frozenset(getattr(math, name) for name in (
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cbrt", "cos", "cosh", "degrees", "erf", "erfc", "exp",
    "exp2", "expm1", "fabs", "gamma", "lgamma", "log", "log10", "log1p", "log2", "radians", "sin", "sinh",
    "sqrt", "tan", "tanh") if hasattr(math, name))


def float_call(out, fn: Callable, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`fn(*args)` of a dynamic float as a float node (NOTE [Builtins of dynamic floats]), or None (the
    caller folds it, specialising the float)."""
    if kwargs or not args:
        return None
    kept = _number_call(out, fn, args)
    if kept is not None or not isinstance(args[0], SymFloatValue):
        return kept
    if fn is float and len(args) == 1:
        return args[0]
    if fn in _ONE_FLOAT and len(args) == 1 or fn is math.log and len(args) == 2 and _number(args[1]):
        return out.float_op(fn, tuple(args))
    if fn is round and len(args) == 2 and isinstance(args[1], ConstantValue) and type(args[1].value) is int:
        return out.float_op(round, tuple(args))
    return None


# NOTE [More builtins of dynamic numbers] (issue 13): `divmod(a, 0.3)` and `math.copysign(1.0, a)` of a dynamic
# float, and `round(n, -1)` of a symbolic int, were folded on the value: one compilation per value, then eager at
# the recompile limit. divmod of floats is the pair of float nodes `a // b`, `a % b` (CPython computes all three
# with the same _float_div_mod, so the values are bit for bit divmod's); a divmod that raises for the value seen
# (a zero divisor) is folded, raising eager's own error. copysign is a float node like math.cos. round(n, d) of
# an int is n itself for d >= 0 (CPython returns the int unchanged); a negative d rounds half to even, which has
# no symbolic form: a graph break (the int stays symbolic), or folded with fullgraph=True.
def _number_call(out, fn: Callable, args: list[Value]) -> Value | None:
    import operator

    from .breaks import BreakKind, Unsupported
    from .float_parts import float_operand
    from .values import SymNodeValue, TupleValue
    if fn is round and len(args) == 2 and isinstance(args[0], SymNodeValue) and isinstance(args[0].sym, torch.SymInt) \
            and isinstance(args[1], ConstantValue) and type(args[1].value) is int:
        if args[1].value >= 0:
            return args[0]
        if not getattr(out, "fullgraph", False):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "round() of a symbolic int to a negative number of "
                                                          "digits: called as Python, so the int stays symbolic")
        return None
    if fn not in (divmod, math.copysign) or len(args) != 2 or not any(isinstance(a, SymFloatValue) for a in args):
        return None
    if not all(float_operand(out, a) for a in args):
        if any(isinstance(a, SymNodeValue) for a in args) and not getattr(out, "fullgraph", False):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__}() of a dynamic float and a size: called "
                                                          "as Python, so both stay dynamic")  # NOTE [divmod of sizes]
        return None
    if fn is math.copysign:
        return out.float_op(math.copysign, tuple(args))
    from .float_parts import example_of
    try:
        divmod(*(example_of(a) for a in args))
    except Exception:  # noqa: BLE001 - eager's error for this value: folded, it raises it
        return None
    return TupleValue([out.float_op(operator.floordiv, tuple(args)), out.float_op(operator.mod, tuple(args))])


# NOTE [divmod of sizes]: `divmod(x.size(0), a)` with `a` a dynamic float: a size is no float_op operand (NOTE
# [Symbolic ints inside dynamic floats]), and folding pinned `a`: one compilation per value, then the recompile
# limit (review revP LOW-2). It is a graph break now: the call runs as Python, the size and the float stay dynamic
# (math.copysign alike). fullgraph=True folds as before.
def _number(v: Value) -> bool:
    return isinstance(v, ConstantValue) and type(v.value) in (int, float)


def float_truth(out, v: SymFloatValue) -> Any:
    """`bool(a)` of a float input: the guarded relation `a != 0` (a bool), or None (specialise)."""
    import operator
    relation = out.float_compare(operator.ne, v, ConstantValue(0.0))
    if relation is None:
        return None
    return bool(relation.as_constant())


# NOTE [sum() of floats on 3.12+]: from CPython 3.12, builtin sum() adds a run of floats (and ints) that follows
# an exact-float running total with compensated (Neumaier) summation, not one `+` at a time: sum([1e16, 1.0,
# -1e16]) is 1.0 there (0.0 on 3.11 and in a chain of `+`), so an `if sum(xs) > 0.5:` took the other branch
# (review revZ, pre-existing). Such a run is added by CPython's own sum() when its operands are constants (the
# run's start float and items: exactly eager's algorithm, whatever the version); a run of two or more with a
# dynamic float is one float node calling CPython's sum() at run time (sum_run, as NOTE [Builtins of dynamic
# floats]); any other dynamic operand breaks. A run of one addition is one `+` (its compensation
# rounds back to the same float). Ints and tensors outside such runs add one `+` at a time as before.
COMPENSATED_SUM = sys.version_info >= (3, 12)


def sum_values(tx, total: Value, items, drawn: Callable[[], None], add: Callable[[Value, Value], Value]) -> Value:
    """`sum(items, total)` over traced values; `add(a, b)` is the traced `a + b`, `drawn()` runs after each draw."""
    run: list[Value] = []
    for item in items:
        if COMPENSATED_SUM and total.python_type() is float and item.python_type() in (float, int, bool):
            run.append(item)
        else:
            total = add(_flush(tx.output, total, run, add), item)
            run = []
        drawn()
    return _flush(tx.output, total, run, add)


def sum_run(start: float, *items: Any) -> float:
    """CPython's own sum() of a run of numbers after a float (the graph's node for a run with dynamic floats)."""
    return sum(items, start)


def _flush(out, total: Value, run: list[Value], add: Callable[[Value, Value], Value]) -> Value:
    if len(run) <= 1:
        return add(total, run[0]) if run else total
    from .float_parts import float_operand
    from .values import SymNodeValue
    if not any(isinstance(v, (SymFloatValue, SymNodeValue)) for v in (total, *run)):  # is_constant would pin them
        if total.is_constant() and all(v.is_constant() for v in run):
            return ConstantValue(sum((v.as_constant() for v in run), total.as_constant()))
    elif all(float_operand(out, v) for v in (total, *run)):
        return out.float_op(sum_run, (total, *run))  # NOTE [Builtins of dynamic floats]
    from .breaks import BreakKind, Unsupported
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "sum() of two or more floats with a dynamic one: CPython 3.12+ "
                      "adds them with compensated summation (NOTE [sum() of floats on 3.12+])")
