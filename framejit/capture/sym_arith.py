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

from .float_powers import real_fractional_power
from .shapes import DIVISIONS, guarded_nonzero
from .values import ConstantValue, ListValue, SequenceValue, SymFloatValue, SymNodeValue, TensorValue, TupleValue, Value

_INT_BINARY = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.truediv,
               operator.pow, operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift}
_NATURAL_RIGHT = {operator.pow, operator.lshift, operator.rshift}  # a negative right operand: a float or an error
_FLOAT_BINARY = {operator.add, operator.sub, operator.mul, operator.truediv}
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.ifloordiv: operator.floordiv, operator.imod: operator.mod, operator.itruediv: operator.truediv,
            operator.ipow: operator.pow, operator.iand: operator.and_, operator.ior: operator.or_,
            operator.ixor: operator.xor, operator.ilshift: operator.lshift, operator.irshift: operator.rshift}
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
    from .graph_calls import _node_of
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
    a, b = _bool_as_int(tx, a, fn), _bool_as_int(tx, b, fn)
    ta, tb = _number_type(a), _number_type(b)
    if ta is None or tb is None:
        return None
    if ta is int and tb is int:
        if fn not in _INT_BINARY:
            return None
        if fn is operator.pow and real_fractional_power(tx, a, b, int):  # NOTE [Negative powers of sizes], [Int
            return _keep(tx, fn, (a, b))  # bases to fractional and negative powers] in float_powers.py
        if fn in _NATURAL_RIGHT and not _known_natural(tx, b):
            return None  # a negative exponent or shift: a float or a ValueError, depending on the value
        if fn is operator.pow and is_sym(b) and not _known_natural(tx, a):
            return None  # NOTE [Negative bases to symbolic powers]
    elif fn not in _FLOAT_BINARY and not (fn is operator.pow and ta is int and _known_positive(tx, a)) and \
            not (fn is operator.pow and ta is float and tb is int and (_nonzero(a) or _known_natural(tx, b))) and \
            not (fn is operator.pow and _whole_power(b)) and \
            not (fn is operator.pow and real_fractional_power(tx, a, b, ta)):  # NOTE [Float bases to fractional
        return None  # powers], [Int bases to fractional and negative powers] in float_powers.py
    if fn in DIVISIONS and is_sym(b) and not guarded_nonzero(b.sym):
        return None  # NOTE [Symbolic divisors are guarded nonzero] in shapes.py: folding raises eager's error
    return _keep(tx, fn, (a, b))


# NOTE [Negative bases to symbolic powers] (review revD D2): `(-1) ** x.size(0)` was -1 at every even size once
# the size was symbolic (torch's symbolic Pow(-1, s) evaluates it so; stock torch.compile gives the same wrong
# value): an int power with a symbolic exponent is kept only for a base known >= 0; otherwise the exponent
# specialises (guarded, one graph per value), as eager's parity decides the sign.
# NOTE [Float bases to int powers]: `0.5 ** (step // 2)` (a decay by a step counter) specialised the int, one
# compilation per value. A float to an int power is a real float for every exponent (CPython's float_pow), and
# raises only for a zero base with a negative exponent: kept symbolic when the base is a nonzero constant or
# the exponent is >= 0 on every call the entry serves. A negative constant base is refused by torch (the int
# specialises, as before); an overflow raises OverflowError in the graph's own Python pow, as eager does.
# A float or int to a constant whole float power >= 0 (PolynomialLR's `(...) ** 1.0`, `** 2.0`): real for any base.
def _whole_power(v: Value) -> bool:
    return isinstance(v, ConstantValue) and type(v.value) is float and v.value >= 0 and v.value.is_integer()


def _nonzero(v: Value) -> bool:
    return isinstance(v, ConstantValue) and v.value != 0


# NOTE [Bools in size arithmetic]: `x.size(0) * 0.1 * (x.size(1) > 3)`: Python computes an int or float with a bool
# as with the int 0 or 1 (the result an int or float, never a bool), so a bool operand of arithmetic with a
# symbolic number is that int; a relation of sizes (a SymBool) is its truth, guarded as a relation (`s1 > 3`,
# as torch.compile guards it), never the other operand's value (which specialised the size: a graph per size).
_BOOL_ARITH = (_INT_BINARY | _FLOAT_BINARY) - {operator.and_, operator.or_, operator.xor}


def _bool_as_int(tx, v: Value, fn: Callable) -> Value:
    from .protocol import truth
    if fn not in _BOOL_ARITH:
        return v
    if isinstance(v, ConstantValue) and type(v.value) is bool:
        return ConstantValue(int(v.value))
    if isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymBool):
        return ConstantValue(int(truth(tx, v)))
    return v


# NOTE [Negative powers of sizes]: `n ** -1` for an int n is `float(n) ** -1.0` in CPython (int.__pow__ hands a
# negative exponent to float's): kept as the same node, a SymFloat, when n is a size the env bounds below by 1
# (`x.size(1) ** -1 * x` compiled a graph per width). A dynamic int that may be 0 specialises as before (0 ** -1
# raises ZeroDivisionError).
# NOTE [Float powers of sizes]: `d ** -0.5` (attention's scale from `x.shape[-1]`) with a float exponent
# specialised d, one compilation per size where torch.compile makes one. It is a SymFloat node like `n / 2`
# when the base is an int the env bounds below by 1 (a size): the result is then a real float for every
# size the entry serves (a negative base gives a complex number, a zero one a ZeroDivisionError).
def _known_positive(tx, v: Value) -> bool:
    """`v` is a symbolic int >= 1 on every call the entry serves (NOTE [Float powers of sizes])."""
    if not is_sym(v):
        return False
    try:
        return bool(tx.output.fake_mode.shape_env.bound_sympy(v.sym.node.expr).lower >= 1)
    except Exception:  # noqa: BLE001 - an expression the env cannot bound: specialise
        return False


def _known_natural(tx, v: Value) -> bool:
    """`v` is an int that is >= 0 on every call the entry serves: a constant, or a symbol whose range (a
    size's, as the env knows it) excludes negatives, so `2 ** n`, `1 << n` stay ints with no guard."""
    if isinstance(v, ConstantValue):
        return v.value >= 0
    env = tx.output.fake_mode.shape_env
    try:
        return bool(env.bound_sympy(v.sym.node.expr).lower >= 0)
    except Exception:  # noqa: BLE001 - an expression the env cannot bound: specialise
        return False


def unary(tx, fn: Callable, a: Value) -> Value | None:
    if is_sym(a) and fn in (operator.neg, operator.pos, operator.abs):
        return _keep(tx, fn, (a,))
    return None


def compare(tx, fn: Callable, a: Value, b: Value) -> Value | None:
    """A comparison of a symbolic float with a number (ints are comparisons.compare's own)."""
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
    from .comparisons import compare as compare_values
    from .protocol import truth
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
    """`size + tuple`, `tuple + size` (torch.Size.__radd__) with symbolic items: a torch.Size, kept symbolic."""
    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and torch.Size in (a.cls, b.cls) and \
            {a.cls, b.cls} <= {tuple, torch.Size} and _int_items(a) and _int_items(b) and \
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
    """`len(t)` of a tensor whose dim 0 is symbolic (its size) or of a symbolic range, kept symbolic; of a tensor
    whose class has its own __torch_function__, routed through it (NOTE [Inlined __torch_function__])."""
    from .torch_function_inline import operator_call
    routed = operator_call(tx, len, [v]) if isinstance(v, TensorValue) else None
    if routed is not None:
        return routed
    if isinstance(v, TensorValue) and v.fake.dim() > 0 and isinstance(v.fake.shape[0], torch.SymInt):
        return tx.output.call("call_method", "size", (v, ConstantValue(0)), {})
    if isinstance(v, SymRangeValue):
        return range_length(tx, v)
    return None


def min_max(tx, fn: Callable, items: list[Value]) -> Value | None:
    """`max(a, b, ...)`/`min` of ints, some symbolic: torch.sym_max/sym_min (an int for int inputs)."""
    if len(items) >= 2 and any(isinstance(i, SymFloatValue) for i in items):
        return _float_min_max(tx, fn, items)
    if len(items) < 2 or not any(is_sym(i) for i in items) or any(_number_type(i) is not int for i in items):
        return None
    pick = torch.sym_max if fn is max else torch.sym_min
    result = items[0]
    for item in items[1:]:
        result = _keep(tx, pick, (result, item))
        if result is None:
            return None
    return result


# NOTE [Sorting by symbolic keys]: `sorted(xs, key=lambda t: t.shape[0])`, `max(xs, key=...)`, `sorted([n, m])`,
# `ks.index(max(ks))` with a symbolic size among the keys folded the keys as constants, which specialised the
# size: a compilation per size, then the frame ran eagerly (stock torch.compile 2-3). Symbolic keys (sizes,
# dynamic ints and floats, also inside tuples) now take the traced path (NOTE [Sorting by traced comparisons]
# in builtins.py): CPython's own sort or scan asks the same comparisons in the same order as eager, and each
# answer is a relation the env guards (`s0 < 3`), so a later call whose sizes order the items differently
# fails a guard and retraces; ties (`<` false both ways) and stability are the algorithm's own. A float key
# compared as a relation is a float input the env guards not NaN; a computed float specialises by value (a
# NaN compares as in Python). `list.index(v)` of ints, some symbolic, asks `item == v` in order the same way.
# `max()/min()` of floats, some dynamic (`max(x.tolist())`), is Python's max/min as a float node of the graph
# (`max(max(a, b), c)` is the scan CPython does: the same item for every value, NaN included): no guard.
def symbolic(v: Value) -> bool:
    """`v` is a symbolic number, or a tuple or list holding one (NOTE [Sorting by symbolic keys])."""
    if is_sym(v) or isinstance(v, SymFloatValue):
        return True
    return type(v) in (TupleValue, ListValue) and any(symbolic(i) for i in v.items)


def index(tx, seq: SequenceValue, args: list[Value], kwargs: dict) -> Value | None:
    """`seq.index(v)` of ints, some symbolic: the first item equal to `v`, each answer a guarded relation."""
    from .breaks import UserException
    from .comparisons import compare as compare_values
    from .protocol import truth
    if len(args) != 1 or kwargs or not _int_items(seq) or _number_type(args[0]) is not int or \
            not any(is_sym(i) for i in (*seq.items, args[0])):
        return None
    for i, item in enumerate(seq.items):
        if truth(tx, compare_values(tx, operator.eq, item, args[0])):
            return ConstantValue(i)
    raise UserException(ValueError(f"{args[0].as_constant()!r} is not in {seq.cls.__name__}"))


def _float_min_max(tx, fn: Callable, items: list[Value]) -> Value | None:
    """`max(a, b, ...)`/`min` of floats, some dynamic: Python's max/min as float nodes (NOTE [Sorting by
    symbolic keys]); None when an item is no float (an int would make the result's type value-dependent)."""
    if not any(isinstance(i, SymFloatValue) for i in items) or \
            not all(isinstance(i, SymFloatValue) or _number_type(i) is float for i in items):
        return None
    result = items[0]
    for item in items[1:]:
        result = tx.output.float_op(fn, (result, item))
    return result


def convert(tx, kind: type, args: list[Value], kwargs: dict) -> Value | None:
    """`int(n)` and `float(n)` of a symbolic number: itself, or torch.sym_int/sym_float (truncation and
    conversion, as the builtins do)."""
    if kind is int and len(args) == 1 and not kwargs and isinstance(args[0], SymFloatValue):
        return float_to_int(tx, torch.sym_int, args[0])
    if len(args) != 1 or kwargs or not is_sym(args[0]) or kind not in (int, float):
        return None
    v = args[0]
    if _number_type(v) is kind:
        return v
    return _keep(tx, torch.sym_int if kind is int else torch.sym_float, (v,))


_MATH = {math.ceil: math.ceil, math.floor: math.floor, math.trunc: math.trunc, math.sqrt: torch._sym_sqrt}
# NOTE [Math functions of sizes]: `math.cos(math.pi * epoch / T)` (CosineAnnealingLR's closed form, a warm-up
# factor from a step argument), `math.log2(n)`, `math.tanh(n / 10)` of a symbolic number specialised it: one
# compilation per value, then the frame ran eagerly (a compiled train step calling `sch.step()` recompiled
# every step; stock torch.compile 2 graphs). They are torch's symbolic forms (torch._sym_cos, ...: what
# torch.compile maps them to), a SymFloat node that computes `math.<fn>(float(v))` at run time, as CPython
# does for an int or float. Where CPython raises for some values (sqrt/log2 of a number <= 0, acos/asin
# outside [-1, 1], cosh/sinh overflowing), the domain is a guarded relation (none when the env knows it, as
# for log2 of a size); outside it the number specialises and the fold raises eager's error. math.log/exp
# specialise, as in stock torch.compile. `math.prod` of ints, some symbolic, is the product kept symbolic.
_SYM_MATH = ("cos", "sin", "tan", "cosh", "sinh", "tanh", "acos", "asin", "atan", "log2")
_MATH.update({getattr(math, n): getattr(torch, f"_sym_{n}") for n in _SYM_MATH if hasattr(torch, f"_sym_{n}")})
_DOMAINS = {math.sqrt: ((operator.ge, 0),), math.log2: ((operator.gt, 0),),
            math.acos: ((operator.ge, -1), (operator.le, 1)), math.asin: ((operator.ge, -1), (operator.le, 1)),
            math.cosh: ((operator.gt, -710), (operator.lt, 710)), math.sinh: ((operator.gt, -710), (operator.lt, 710))}
SYM_MATH = (round, divmod, math.prod, *_MATH)  # builtins.py registers these


def _in_domain(fn: Callable, v: SymNodeValue) -> bool:
    """`v` is inside the domain of math function `fn` (NOTE [Math functions of sizes]), guarded by the env."""
    try:
        return all(bool(op(v.sym, bound)) for op, bound in _DOMAINS.get(fn, ()))
    except Exception:  # noqa: BLE001 - a relation the env cannot decide: specialise
        return False


# NOTE [Ints of dynamic floats]: `math.floor(t)`, `math.ceil(t)`, `math.trunc(t)`, `round(t)` and `int(t)` of a
# dynamic float (NOTE [Dynamic floats] in values/scalars.py) no longer specialise the float by value: they are
# SymInts of the env (`FloorToInt(t)`, ...), kept symbolic like a dynamic int: a graph node (`math.floor(t)`,
# `torch.sym_int(t)` for int()) whose uses in tensor ops and size arithmetic stay symbolic, and whose
# specialisations (`range(n)`, a slice end the env must place) guard the int, never the float
# (`math.floor(t) == 2`, `math.floor(t) <= 8`): a new float with the same int hits the entry.
# - A float input uses its own symbol (NOTE [Float relations]).
# - A float computed in the graph (`math.floor(t * 2 + 0.5)`) gets a fresh symbol of its own, not the env's
#   arithmetic on the input's (`2.0*t + 0.5`, which sympy may reassociate and so round differently from the
#   code at a boundary). Its guard text recomputes it exactly as the code did, the graph's own operations on
#   the call's floats (`math.floor(operator.add(operator.mul(t, 2), 0.5)) == 3`; `exact_expr`), registered in
#   `out.computed_floats` so that shape_guards prints it for the symbol. A computation that cannot be written
#   so (another op, a non-float operand) specialises the floats by value, as before.
# A value for which the call raises (NaN, inf) specialises as before, and the fold raises the user's error; on
# a later call such a value fails the guards or raises in the graph as eager does.
_TO_INT = (math.ceil, math.floor, math.trunc, round)


def float_to_int(tx, fn: Callable, v: SymFloatValue) -> Value | None:
    """`fn(v)` (an int) of a dynamic float (NOTE [Ints of dynamic floats]), or None (the caller specialises)."""
    try:
        (int if fn is torch.sym_int else fn)(v.example)
    except (ValueError, OverflowError):
        return None  # NaN or inf: folding raises the user's error
    sym = v.sym if v.roots == (v,) else None
    if sym is None:
        text = exact_expr(tx.output, v.node, {root.node: root.source for root in v.roots})
        if text is None:
            return None
        from .shapes import symbolic_float
        sym = symbolic_float(tx.output, v.example, text)
        root = next(i for i in tx.output.inputs if i.value is v.roots[0])
        tx.output.computed_floats.append((root, text, sym))
    return _keep(tx, fn, (SymNodeValue(v.node, sym, v.source),))


_EXACT_OPS = (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
              operator.pow, operator.neg, operator.pos, operator.abs)


def exact_expr(out, node, roots: dict) -> str | None:
    """A guard expression computing `node`'s float from the call's inputs exactly as the graph does (the same
    Python operations on the same operands, in order), or None when a node or operand cannot be written so."""
    from torch.fx import Node
    if node in roots:
        return roots[node].expr(out.names)
    if node.op != "call_function" or node.kwargs or node.target not in _EXACT_OPS:
        return None
    parts = []
    for arg in node.args:
        if isinstance(arg, Node):
            part = exact_expr(out, arg, roots)
        elif type(arg) in (int, float) and math.isfinite(arg):
            part = repr(arg)
        else:
            part = None
        if part is None:
            return None
        parts.append(part)
    return f"{out.name_of(node.target, node.target.__name__)}({', '.join(parts)})"


def math_call(tx, fn: Callable, args: list[Value], kwargs: dict) -> Value | None:
    """`math.ceil/floor/trunc/sqrt/cos/...(n)`, one-argument `round(n)` of a symbolic number; `divmod` and
    `math.prod` of ints."""
    if fn is divmod:
        return _divmod(tx, args, kwargs)
    if fn is math.prod:
        return _prod(tx, args, kwargs)
    if len(args) != 1 or kwargs:
        return None
    if fn in _TO_INT and isinstance(args[0], SymFloatValue):
        return float_to_int(tx, fn, args[0])
    target = round if fn is round else _MATH.get(fn)
    if target is None or not is_sym(args[0]) or not _in_domain(fn, args[0]):
        return None
    return _keep(tx, target, (args[0],))


def _prod(tx, args: list[Value], kwargs: dict) -> Value | None:
    """`math.prod(ints)` of a tuple, list or torch.Size of ints, some symbolic: `start * a * b ...` (NOTE
    [Math functions of sizes])."""
    from .protocol import binary as binary_op
    if len(args) != 1 or set(kwargs) - {"start"} or type(args[0]) not in (TupleValue, ListValue):
        return None
    total, items = kwargs.get("start", ConstantValue(1)), args[0].items
    if not any(is_sym(i) for i in items) or any(_number_type(i) is not int for i in (total, *items)):
        return None
    for item in items:
        total = binary_op(tx, operator.mul, total, item)
    return total


def _divmod(tx, args: list[Value], kwargs: dict) -> Value | None:
    """`divmod(a, b)` of ints, one symbolic: the tuple `(a // b, a % b)`, each kept symbolic."""
    from .protocol import binary as binary_op
    if len(args) != 2 or kwargs or not any(is_sym(a) for a in args) or \
            any(_number_type(a) is not int for a in args):
        return None
    if isinstance(args[1], ConstantValue) and args[1].value == 0:
        return None  # folding raises the user's ZeroDivisionError
    return TupleValue([binary_op(tx, operator.floordiv, *args), binary_op(tx, operator.mod, *args)])


# ---- symbolic int indices of tensors ----------------------------------------------------------------
# NOTE [Symbolic int indices]: `x[n - 1]` with a symbolic int `n` is `torch.select(x, 0, n - 1)`: Python
# indexing of a fake tensor with a SymInt specialises it (torch's C++ indexing reads the int), select keeps it
# symbolic (as torch.compile translates it). An index out of range raises IndexError at run time, as eager
# does. `x[:, :, i]` (full slices, then the int) is a select of that dimension; other tuples specialise.
def select(tx, obj: TensorValue, key: Value) -> Value | None:
    """`obj[key]` for a key holding a symbolic int as a select, or None (the caller indexes as before)."""
    from .values import SliceValue
    items = key.items if type(key) is TupleValue else [key]
    if not items or not is_sym(items[-1]) or _number_type(items[-1]) is not int:
        return None
    def full_slice(i: Value) -> bool:
        if isinstance(i, SliceValue):
            return all(isinstance(p, ConstantValue) and p.value is None for p in i.parts)
        return isinstance(i, ConstantValue) and i.value == slice(None)
    if not all(full_slice(i) for i in items[:-1]) or len(items) > obj.fake.dim():
        return None
    return tx.output.call("call_function", torch.select, (obj, ConstantValue(len(items) - 1), items[-1]), {})


# NOTE [Tensors of symbolic ints]: `torch.tensor(n)`, `torch.tensor([b, s])`, `torch.tensor(x.shape)` with a
# symbolic int read the ints in C++ (a specialisation per value); as torch.compile does, they are built from
# `torch.scalar_tensor` of each int (stacked for a flat list or tuple), which keeps them symbolic. int64 as
# torch.tensor of ints makes, unless `dtype=` says otherwise; anything else (floats, nesting, other keywords)
# is left to the call as before. `torch.tensor(range(...))` of a symbolic range is an arange (`_tensor_of_range`).
# `t.new_tensor(data)` is `torch.tensor(data, dtype=t.dtype, device=t.device)` (its defaults), built the same
# way (`x.new_tensor([x.size(0), x.size(1)])` compiled once per size, stock torch.compile once).
# NOTE [Tensors of mixed numbers]: the same holds for data mixing symbolic ints and floats with constant ints,
# floats and bools, flat or nested (`[x.size(0), 2.5]`, `[[n, 1], [2, m]]`, `[n / 3, m ** 0.5]`): each number is
# a scalar_tensor of the result dtype, rows are stacked, then the rows. The dtype is torch.tensor's inference:
# the default float dtype when any item is a float, else int64 when any is an int, else bool (a relation of
# sizes among them is guarded by its truth and counts as a bool, as torch.compile guards it). scalar_tensor
# converts a Python number to a dtype as torch.tensor does (truncation to ints, overflow errors). Ragged or
# empty rows and other item types are left to the call (which specialises, and raises where eager raises).
# NOTE [Tensors of dynamic floats]: the same for floats that are graph inputs or computed from them (NOTE [Dynamic
# floats]): `torch.tensor([s, max(vals)])` of `vals = x.tolist()` guarded each float by value, a compilation
# per call (stock torch.compile 2); each is a scalar_tensor node of the float, as for a symbolic float.
def tensor_of_ints(tx, args: list[Value], kwargs: dict) -> Value | None:
    """`torch.tensor(data)` / `torch.as_tensor(data)` for a number or a (nested) sequence of numbers, some
    symbolic (NOTE [Tensors of mixed numbers])."""
    if len(args) != 1 or set(kwargs) - {"dtype", "device"} or \
            not all(isinstance(v, ConstantValue) for v in kwargs.values()):
        return None
    data = args[0]
    if isinstance(data, SymRangeValue):
        return _tensor_of_range(tx, data, kwargs)
    flat = _flat_numbers(data)
    if not flat or not any(is_sym(i) or isinstance(i, SymFloatValue) for i in flat):
        return None
    dtype = kwargs["dtype"].value if "dtype" in kwargs else None
    if dtype is None:
        kinds = {_number_type(i) or (float if isinstance(i, SymFloatValue) else bool) for i in flat}
        # the default in force at the call, which a set_default_dtype earlier in the trace may have changed
        # (NOTE [Default dtype changes] in state_blocks.py): the trace does not set torch's own
        from .state_blocks import current_default_dtype
        dtype = current_default_dtype(tx.output) if float in kinds else torch.int64 if int in kinds else torch.bool
    options = {"dtype": ConstantValue(dtype)}
    if "device" in kwargs:
        options["device"] = kwargs["device"]
    return _stacked(tx, data, options)


def _flat_numbers(data: Value) -> list[Value] | None:
    """The numbers of `data` (a number, or rectangular nested tuples/lists of numbers), or None."""
    if type(data) not in (TupleValue, ListValue):
        if isinstance(data, SymNodeValue) and isinstance(data.sym, torch.SymBool):
            return [data]  # a relation of sizes: _stacked guards its truth (the item is then a bool)
        number = _number_type(data) or (isinstance(data, ConstantValue) and type(data.value) is bool) or \
            isinstance(data, SymFloatValue)  # a dynamic float (NOTE [Tensors of dynamic floats])
        return [data] if number else None
    rows = [_flat_numbers(i) for i in data.items]
    if not rows or any(r is None for r in rows):
        return None
    nested = {type(i) in (TupleValue, ListValue) for i in data.items}
    lengths = {len(i.items) for i in data.items if type(i) in (TupleValue, ListValue)}
    if len(nested) > 1 or len(lengths) > 1 or (True in nested and not all(len(r) == len(rows[0]) for r in rows)):
        return None  # ragged: torch.tensor's own error (or a shape this does not model)
    return [n for r in rows for n in r]


def _stacked(tx, data: Value, options: dict) -> Value:
    from .protocol import truth
    if type(data) not in (TupleValue, ListValue):
        if isinstance(data, SymNodeValue) and isinstance(data.sym, torch.SymBool):
            data = ConstantValue(truth(tx, data))  # the relation's truth, guarded
        return tx.output.call("call_function", torch.scalar_tensor, (data,), options)
    return tx.output.call("call_function", torch.stack, (ListValue([_stacked(tx, i, options) for i in data.items]),), {})


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
    if is_sym(step):
        return OneStepRangeValue.of(start, stop, step)
    if not isinstance(step, ConstantValue) or step.value == 0:
        return None
    return SymRangeValue(start, stop, step.value)


# NOTE [Ranges of one step]: `range(0, n, n)` with n a symbolic size (transformers' EncodecModel._encode
# when chunk_length is None: `for offset in range(0, input_length, stride)` with stride = input_length) has a
# symbolic step, so folding it specialised n: the top frame compiled once per input length until the
# recompile limit ran it eagerly. When the relations `step > 0`, `start < stop` and `start + step >= stop`
# hold (guarded as relations; for range(0, n, n) the env knows them), the range yields exactly `start`: a
# loop over it unrolls to that one step without reading n's value. Any other use (len, an index, `in`, its
# attributes, the range object outliving the graph) reads `value`, which specialises the bounds, as before.
class OneStepRangeValue(ConstantValue):
    """`range(start, stop, step)` with a symbolic step, known to yield `start` only."""

    lazy_range = True  # values/containers.iterator_over: no constant range to read

    def __init__(self, start: Value, stop: Value, step: Value) -> None:  # noqa: D107 (no ConstantValue init)
        self.parts = (start, stop, step)
        self.source = None

    @classmethod
    def of(cls, start: Value, stop: Value, step: Value) -> "OneStepRangeValue | None":
        a, b, c = (v.sym if is_sym(v) else v.as_constant() for v in (start, stop, step))
        if not (c > 0 and a < b and a + c >= b):  # relations, guarded by the env
            return None
        return cls(start, stop, step)

    @property
    def value(self) -> range:  # type: ignore[override]
        return range(*(v.as_constant() for v in self.parts))

    def items(self) -> list[Value]:
        return [self.parts[0]]

    def python_type(self) -> type:
        return range

    def describe(self) -> str:
        return f"range({', '.join(v.describe() for v in self.parts)})"


def _tensor_of_range(tx, r: SymRangeValue, kwargs: dict) -> Value | None:
    """`torch.tensor(range(...))` of a symbolic range: `arange(len) * step + start`, int64 as torch.tensor
    makes it (exact; `arange(start, stop, step)` would raise for bounds against the step's sign); an empty
    range is a tensor of the default dtype, as torch.tensor makes it. Another dtype is left to the call."""
    from .comparisons import compare as compare_values
    from .protocol import binary as binary_op, truth
    dtype = kwargs.get("dtype")
    if dtype is not None and dtype.value not in (None, torch.int64):
        return None
    length = range_length(tx, r)
    options = {"dtype": ConstantValue(torch.int64)}
    if "device" in kwargs:
        options["device"] = kwargs["device"]
    if not truth(tx, compare_values(tx, operator.gt, length, ConstantValue(0))):  # a guarded relation
        # empty: torch.tensor(range(0)) has the default dtype, as torch.tensor([]) (guarded per entry)
        from .state_blocks import current_default_dtype  # NOTE [Default dtype changes]
        options["dtype"] = ConstantValue(current_default_dtype(tx.output) if dtype is None or dtype.value is None
                                         else dtype.value)
        return tx.output.call("call_function", torch.zeros, (ConstantValue(0),), options)
    values = tx.output.call("call_function", torch.arange, (length,), options)
    if r.step != 1:
        values = binary_op(tx, operator.mul, values, ConstantValue(r.step))
    start = r.bounds[0]
    if not (isinstance(start, ConstantValue) and start.value == 0):
        values = binary_op(tx, operator.add, values, start)
    return values


def symbolic_length(tx, r: SymRangeValue) -> bool:
    """The range's length is not one number for every call the entry serves (the env cannot fold
    `stop - start` to a constant), so unrolling it would specialise a size or an int."""
    import sympy
    start, stop = (b.sym.node.expr if is_sym(b) else sympy.Integer(b.value) for b in r.bounds)
    try:
        return not tx.output.fake_mode.shape_env.simplify(stop - start).is_number
    except Exception:  # noqa: BLE001 - an expression the env cannot simplify: treat it as symbolic
        return True


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
    from .comparisons import compare as compare_values
    from .protocol import binary as binary_op, truth
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
    from .comparisons import compare as compare_values
    from .protocol import binary as binary_op, truth
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


# NOTE [Symbolic ints beside dynamic floats]: `a + n`, `loss.item() / n`, `lr * step` with `a` a dynamic float
# (a graph input: NOTE [Dynamic floats]) and `n` a symbolic int argument had no symbolic path (float_op takes
# floats and constants, sym_arith ints and ShapeEnv floats), so both were specialised: one entry per value of
# either, under dynamic=True too (6 traces over 6 calls of `return a + n`; a resume function adding a
# `.item()` to a step counter recompiled every call). Python's float arithmetic converts an int operand with
# float() (float.__add__/__radd__, __mul__, __truediv__, __pow__ ..., rounding beyond 2**53 and raising
# OverflowError the same way), so the int is used as `float(n)`: a float graph input read from the int's own
# source (CallSource(float, source)), made once per trace, and the result is a computed float like any other
# (rebuilt in Python from its inputs when it escapes: NOTE [Computed floats rebuilt in Python]; specialised,
# it guards `float(n) == value`, which pins n). Only an int with a source (an argument, an attribute) is so
# used; an int computed in the trace still specialises. A size is read from its tensor the same way: NOTE
# [Sizes beside dynamic floats].
def float_of_int(tx, v: Value) -> Value:
    """`v` itself, or, for a symbolic int read from a source, the float input `float(v)` (NOTE [Symbolic ints
    beside dynamic floats])."""
    from .. import config
    from .sources import CallSource, Ref
    if not (is_sym(v) and _number_type(v) is int and config.dynamic_floats):
        return v
    size_of = None if v.source is not None else _size_origin(tx, v)
    base = v.source if size_of is None else size_of[0]
    if base is None:
        return v
    source = CallSource(Ref(float, "___float"), base)
    known = tx.output.cached(source)
    if known is not None:
        return known
    hint = v.sym.node.hint
    if type(hint) is not int or abs(hint).bit_length() > 1023:  # float(10**400) overflows: the op's own (LOW-6)
        return v
    result = tx.output.add_float_input(float(hint), source)
    if size_of is not None:
        result.size_of = size_of[1:]  # read again after the graph: float_inputs_unchanged
    return result


# NOTE [Sizes beside dynamic floats]: `x.size(0) + a`, `x * (x.shape[0] * scale)` with `a` a dynamic float: a
# size symbol has no source of its own (it is read from a tensor's fake), so it specialised, and the frame
# compiled once per size under dynamic=True too (5 traces over 5 sizes; stock torch.compile 1). A size that
# is a plain symbol made for a dimension of a tensor graph input is read from that tensor's source,
# `float(torch.Tensor.size(t)[d])`, as NOTE [Symbolic ints beside dynamic floats] reads an int argument. The
# dimension is the one the ShapeEnv made the symbol for (its TensorPropertySource), not where the symbol
# sits in the fake now (an in-place `x.unsqueeze_(0)` or `x.t_()` earlier in the trace moved it). The graph
# gets the float read before it runs; a float rebuilt in Python after the graph (NOTE [Computed floats
# rebuilt in Python]) reads the size again, from the tensor as the graph left it, so it is rebuilt only
# when the input's fake still has the symbol at that dimension at the end of the trace (the graph changed
# no metadata there: float_inputs_unchanged); otherwise it is specialised. The shape guards pin
# what the trace assumed of the symbol; the float input only carries its value, guarded by type. A computed
# size (`2 * x.size(0)`, a sum of sizes) or a symbol of another origin still specialises.
def _size_origin(tx, v: SymNodeValue) -> tuple | None:
    """(the source, the input's fake, the dimension, the symbol) of the input tensor dimension the plain
    symbol `v` was made for (None: not one)."""
    import sympy
    from .sources import CallSource, ItemSource, Ref
    expr = v.sym.node.expr
    env = v.sym.node.shape_env
    if not isinstance(expr, sympy.Symbol) or env is None:
        return None
    for origin in env.var_to_sources.get(expr, ()):
        # torch's TensorPropertySource, read by its fields (framejit does not import torch._dynamo)
        prop, dim = getattr(getattr(origin, "prop", None), "name", None), getattr(origin, "idx", None)
        if prop != "SIZE" or type(dim) is not int:
            continue
        text = getattr(getattr(origin, "base", None), "text", None)
        for graph_input in tx.output.inputs:
            if isinstance(graph_input.value, TensorValue) and graph_input.source.expr(tx.output.names) == text:
                source = ItemSource(CallSource(Ref(torch.Tensor.size, "size"), graph_input.source), dim)
                return source, graph_input.value.fake, dim, expr
    return None


def float_inputs_unchanged(roots: tuple) -> bool:
    """Whether every float input read from a tensor's size reads the same size after the graph (NOTE [Sizes
    beside dynamic floats]): the input's fake has the same symbol at that dimension."""
    for root in roots:
        size_of = getattr(root, "size_of", None)
        if size_of is None:
            continue
        fake, dim, symbol = size_of
        size = fake.shape[dim] if dim < fake.dim() else None
        if not isinstance(size, torch.SymInt) or size.node.expr != symbol:
            return False
    return True
