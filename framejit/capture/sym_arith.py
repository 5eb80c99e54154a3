"""Python code over symbolic sizes and ints that stays symbolic (NOTE [Size arithmetic stays symbolic]).

Each function here answers one Python operation whose operands include a `SymNodeValue` (a size or a
dynamic int: NOTE [Symbolic shapes] in shapes.py) with a graph node and its SymInt/SymFloat/SymBool, or
returns None when the operation is not one it models (the caller then does what it did before: folds
the operands as constants, which specialises them, guarded by value). Main entry points: `binary`,
`unary`, `compare_sequences`, `size_concat`, `size_numel`, `length`, `min_max`, `convert`, `math_call`.

NOTE [Size arithmetic stays symbolic]: what torch's SymInt/SymFloat compute symbolically is kept so:
`-n`, `abs(n)`, `n / 2` (a SymFloat), `n ** 2`, `math.ceil/floor/trunc(...)`, `round`, `int(n / 2)`,
`float(n)`, `math.sqrt(n)`, `max/min` of ints, `len(x)` of a tensor whose dim 0 is symbolic, `torch.Size`
concatenation and `numel()`. Each becomes a graph node (the same Python function, or torch's `sym_*`
function where the builtin would specialise a fake value: both compute the builtin's result on plain
Python numbers at run time) whose `meta["val"]` is the symbolic result. Whole-shape comparisons
(`x.shape == y.shape`, `x.shape[1:] == (4, 5)`) compare item by item as CPython does, and each item's
truth is a relation the env guards (`s0 == s1`), never the values. Before an operation is kept symbolic
it is tried on the symbolic values; if torch cannot express it, the operands are specialised instead
(never a user error that eager would not raise). Only ints and floats take part (bools and NumPy scalars
specialise as before).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch

from .values import ConstantValue, ListValue, SequenceValue, SymNodeValue, TensorValue, TupleValue, Value

_INT_BINARY = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.truediv,
               operator.pow}
_FLOAT_BINARY = {operator.add, operator.sub, operator.mul, operator.truediv}
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.ifloordiv: operator.floordiv, operator.imod: operator.mod, operator.itruediv: operator.truediv,
            operator.ipow: operator.pow}
_COMPARE = {operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge}


def is_sym(v: Value) -> bool:
    return isinstance(v, SymNodeValue) and type(v.sym) in (torch.SymInt, torch.SymFloat)


def _number_type(v: Value) -> type | None:
    """int or float for a symbolic or constant number (bools and other types: None)."""
    if is_sym(v):
        return int if isinstance(v.sym, torch.SymInt) else float
    if isinstance(v, ConstantValue) and (type(v.value) is int or type(v.value) is float and math.isfinite(v.value)):
        return type(v.value)  # an infinite or NaN float specialises (sympy's oo is no Python float)
    return None


def _example(v: Value) -> Any:
    return v.sym if isinstance(v, SymNodeValue) else v.value


def _keep(tx, fn: Callable, args: tuple, fake_fn: Callable | None = None) -> Value | None:
    """`fn(*args)` as a graph node with its symbolic result, or None when torch cannot compute it
    symbolically (the caller specialises). A ZeroDivisionError is the user's, as in eager."""
    from .graph import _node_of
    from .shapes import sym_or_int
    try:
        result = sym_or_int((fake_fn or fn)(*(_example(a) for a in args)))
    except ZeroDivisionError:
        return None  # folding the concrete values raises it (eager raises it for these values too)
    except Exception:  # noqa: BLE001 - not expressible symbolically: specialise
        return None
    if isinstance(result, (bool, int, float)):
        return ConstantValue(result)
    if not isinstance(result, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return None
    for a in args:  # `n - 0`, `n * 1`, `max(n, 0)` where the env knows n >= 0: the operand itself
        if isinstance(a, SymNodeValue) and type(a.sym) is type(result) and a.sym.node.expr == result.node.expr:
            return a
    node = tx.output.graph.call_function(fn, tuple(_node_of(a) for a in args))
    node.meta["val"] = result
    node.meta["stack_trace"] = tx.output.stack_trace()
    return SymNodeValue(node, result)


def binary(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """`a <op> b` with a symbolic operand: +, -, *, /, //, %, ** of ints; +, -, *, / with floats."""
    if not (is_sym(a) or is_sym(b)):
        return None
    fn = _INPLACE.get(fn, fn)
    ta, tb = _number_type(a), _number_type(b)
    if ta is None or tb is None:
        return None
    if ta is int and tb is int:
        if fn not in _INT_BINARY:
            return None
        if fn is operator.pow and not (isinstance(b, ConstantValue) and b.value >= 0):
            return None  # a negative or symbolic exponent: the result type depends on the value
    elif fn not in _FLOAT_BINARY:
        return None
    return _keep(tx, fn, (a, b))


def unary(tx, fn: Callable, a: Value) -> Value | None:
    if is_sym(a) and fn in (operator.neg, operator.pos, operator.abs):
        return _keep(tx, fn, (a,))
    return None


def compare(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """A comparison of a symbolic float with a number (ints are protocol.compare's own)."""
    if fn in _COMPARE and (is_sym(a) or is_sym(b)) and _number_type(a) and _number_type(b):
        return _keep(tx, fn, (a, b))
    return None


def _int_items(v: Value) -> bool:
    """A tuple or list made or read while tracing whose items are all ints (a list from outside is not
    read here: its items are read lazily, with guards, NOTE [Lists from outside])."""
    return type(v) in (TupleValue, ListValue) and all(_number_type(i) is int for i in v.items)


def _tuple_like(v: SequenceValue) -> bool:
    return v.cls in (tuple, torch.Size)


def compare_sequences(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """`a <op> b` for two tuples (or torch.Sizes) or two lists of ints, some symbolic: CPython's
    lexicographic comparison, item by item; each item's equality is a guarded relation."""
    from .protocol import compare as compare_values, truth
    if fn not in _COMPARE or not (_int_items(a) and _int_items(b)):
        return None
    if not (_tuple_like(a) and _tuple_like(b)) and not (a.cls is list and b.cls is list):
        return None
    if not any(is_sym(i) for i in (*a.items, *b.items)):
        return None
    if fn in (operator.eq, operator.ne) and len(a.items) != len(b.items):
        return ConstantValue(fn is operator.ne)
    for x, y in zip(a.items, b.items):
        if not truth(tx, compare_values(tx, operator.eq, x, y)):
            if fn in (operator.eq, operator.ne):
                return ConstantValue(fn is operator.ne)
            return ConstantValue(truth(tx, compare_values(tx, fn, x, y)))
    return ConstantValue(fn(len(a.items), len(b.items)))


def size_concat(a: Value, b: Value) -> Value | None:
    """`size + tuple` (a torch.Size with symbolic items): a torch.Size of the items, kept symbolic."""
    if isinstance(a, SequenceValue) and a.cls is torch.Size and isinstance(b, SequenceValue) and \
            b.cls in (tuple, torch.Size) and _int_items(a) and _int_items(b) and \
            any(is_sym(i) for i in (*a.items, *b.items)):
        return TupleValue(a.items + b.items, cls=torch.Size)
    return None


def size_numel(tx, args: list[Value], kwargs: dict) -> Value:
    """`size.numel()` of a torch.Size (bound by attributes.py): the product of its items, kept symbolic."""
    from .protocol import binary as binary_op, constant_fold
    size = args[0]
    if len(args) != 1 or kwargs or not isinstance(size, SequenceValue) or not _int_items(size):
        return constant_fold(torch.Size.numel, *(a.as_constant() for a in args),
                             **{k: v.as_constant() for k, v in kwargs.items()})
    total: Value = ConstantValue(1)
    for item in size.items:
        total = binary_op(tx, operator.mul, total, item)
    return total


def length(tx, v: Value) -> Value | None:
    """`len(t)` of a tensor whose dim 0 is symbolic (its size) or of a symbolic range, kept symbolic."""
    if isinstance(v, TensorValue) and v.fake.dim() > 0 and isinstance(v.fake.shape[0], torch.SymInt):
        return tx.output.call("call_method", "size", (v, ConstantValue(0)), {})
    if isinstance(v, SymRangeValue):
        return range_length(tx, v)
    return None


def min_max(tx, fn: Callable, items: list[Value]) -> Value | None:
    """`max(a, b, ...)`/`min` of ints, some symbolic: torch.sym_max/sym_min (an int for int inputs)."""
    if len(items) < 2 or not any(is_sym(i) for i in items) or any(_number_type(i) is not int for i in items):
        return None
    pick = torch.sym_max if fn is max else torch.sym_min
    result = items[0]
    for item in items[1:]:
        result = _keep(tx, pick, (result, item))
        if result is None:
            return None
    return result


def convert(tx, kind: type, args: list[Value], kwargs: dict) -> Value | None:
    """`int(n)` and `float(n)` of a symbolic number: itself, or torch.sym_int/sym_float (truncation and
    conversion, as the builtins do)."""
    if len(args) != 1 or kwargs or not is_sym(args[0]) or kind not in (int, float):
        return None
    v = args[0]
    if _number_type(v) is kind:
        return v
    return _keep(tx, torch.sym_int if kind is int else torch.sym_float, (v,))


_MATH = {math.ceil: math.ceil, math.floor: math.floor, math.trunc: math.trunc, math.sqrt: torch._sym_sqrt}


def math_call(tx, fn: Callable, args: list[Value], kwargs: dict) -> Value | None:
    """`math.ceil/floor/trunc/sqrt(n)` and one-argument `round(n)` of a symbolic number."""
    if len(args) != 1 or kwargs or not is_sym(args[0]):
        return None
    target = round if fn is round else _MATH.get(fn)
    return _keep(tx, target, (args[0],)) if target is not None else None



# ---- range over symbolic ints -------------------------------------------------------------------------
class SymRangeValue(ConstantValue):
    """`range(start, stop, step)` with a symbolic bound and a constant nonzero step. `len()`, an int
    index and `in` stay symbolic (relations guarded); any other use (iterating it, which unrolls a loop)
    reads `value`, which specialises the bounds (guarded by value) as folding `range()` did before."""

    def __init__(self, start: Value, stop: Value, step: int) -> None:  # noqa: D107 (no ConstantValue init)
        self.bounds = (start, stop)
        self.step = step
        self.source = None
        self._range: range | None = None

    @property
    def value(self) -> range:  # type: ignore[override]
        if self._range is None:
            start, stop = self.bounds
            self._range = range(start.as_constant(), stop.as_constant(), self.step)
        return self._range

    def python_type(self) -> type:
        return range

    def describe(self) -> str:
        start, stop = self.bounds
        return f"range({start.describe()}, {stop.describe()}, {self.step})"


def make_range(args: list[Value], kwargs: dict) -> Value | None:
    """`range(...)` with a symbolic int bound and a constant step."""
    if kwargs or not 1 <= len(args) <= 3 or not any(is_sym(a) for a in args) or \
            any(_number_type(a) is not int for a in args):
        return None
    start, stop = (ConstantValue(0), args[0]) if len(args) == 1 else (args[0], args[1])
    step = args[2] if len(args) == 3 else ConstantValue(1)
    if not isinstance(step, ConstantValue) or step.value == 0:
        return None
    return SymRangeValue(start, stop, step.value)


def range_length(tx, r: SymRangeValue) -> Value:
    """len(range): max(0, ceil((stop - start) / step)) as CPython computes it, kept symbolic."""
    from .protocol import binary as binary_op
    start, stop = r.bounds
    span = binary_op(tx, operator.sub, stop, start) if r.step > 0 else binary_op(tx, operator.sub, start, stop)
    step = abs(r.step)
    if step != 1:
        span = binary_op(tx, operator.floordiv, binary_op(tx, operator.add, span, ConstantValue(step - 1)),
                         ConstantValue(step))
    return min_max(tx, max, [span, ConstantValue(0)]) or ConstantValue(max(span.as_constant(), 0))


def range_getitem(tx, r: SymRangeValue, key: Value) -> Value | None:
    """`range[i]` for an int i: start + i * step, its bound check a guarded relation."""
    from .breaks import UserException
    from .protocol import binary as binary_op, compare as compare_values, truth
    if _number_type(key) is not int:
        return None
    size = range_length(tx, r)
    index = key
    if not truth(tx, compare_values(tx, operator.ge, index, ConstantValue(0))):
        index = binary_op(tx, operator.add, size, index)
    inside = truth(tx, compare_values(tx, operator.ge, index, ConstantValue(0))) and \
        truth(tx, compare_values(tx, operator.lt, index, size))
    if not inside:
        raise UserException(IndexError("range object index out of range"))
    return binary_op(tx, operator.add, r.bounds[0], binary_op(tx, operator.mul, index, ConstantValue(r.step)))


def range_contains(tx, item: Value, r: SymRangeValue) -> bool | None:
    """`i in range(...)` for an int i: start <= i < stop (or the reverse) and on the step, as guarded
    relations."""
    from .protocol import binary as binary_op, compare as compare_values, truth
    if _number_type(item) is not int:
        return None
    start, stop = r.bounds
    low, high = (start, stop) if r.step > 0 else (stop, start)
    if r.step > 0:
        inside = truth(tx, compare_values(tx, operator.le, low, item)) and \
            truth(tx, compare_values(tx, operator.lt, item, high))
    else:
        inside = truth(tx, compare_values(tx, operator.lt, low, item)) and \
            truth(tx, compare_values(tx, operator.le, item, high))
    if not inside or abs(r.step) == 1:
        return inside
    offset = binary_op(tx, operator.mod, binary_op(tx, operator.sub, item, start), ConstantValue(abs(r.step)))
    return truth(tx, compare_values(tx, operator.eq, offset, ConstantValue(0)))
