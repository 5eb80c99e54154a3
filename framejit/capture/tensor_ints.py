"""Python ints read from 0-d integer tensors computed from sizes and integer inputs.

NOTE [Ints of tensors computed from sizes]: audio models (transformers' EncodecConv1d, MimiConv1d, and the
models copied from them) keep conv geometry in 0-d int64 buffers (`stride`, `kernel_size`, `padding_total`)
and compute padding amounts by tensor arithmetic with the input length:
`n = torch.ceil((length - k + p) / s + 1).to(torch.int64) - 1; extra = n * s + k - p - length`, then read
them as Python values: `max(pl, pr)`, `if length <= max_pad`, `F.pad(h, (pl, pr))`, `x[..., :end]`. Each
read needs tensor data (a break), and the frames resumed after those breaks inside every conv reached the
recompile limit (EncodecModel: 94 breaks, 4 frames run eagerly). Here such a read is answered without data:
the value is re-derived from the graph nodes that computed the tensor, as a Python int or a SymInt/SymBool of
the trace's ShapeEnv (so the guards are relations on sizes, and the graph computes the int from sizes).

The derived value must be the one eager reads, exactly; where this module cannot be sure, the read stays a
break (`_Unknown`), never a guess (review revE of a first version, 58b2d3e, reverted in bd3c3c7):
- Leaves: sizes and other symbolic ints of the graph; int constants of the nodes (in int64's range); 0-d int64
  tensors whose data tracing knows (`torch.tensor(3)`) and that nothing has written since they were made;
  and 0-d int64 CPU tensors that are graph inputs not written in this graph, read as `int(<source>)` at frame
  entry: an int guarded by value (CONSTANT_MATCH), symbolic after it changed (NOTE [Dynamic ints]).
- Writes (revE E5): every node on the way, leaves included, must hold the value it had when the reading
  node was made: its version counter is still 0 (nothing wrote it, nor a view of it, since it was made), or,
  for an input, the graph has not written it. A constant written in place is not a leaf any more.
- Steps: `+ - *`, `//` and `%` (a divisor guarded != 0; floor semantics in both Python and torch), `-x`,
  comparisons, `.to(int64/float)`, `.long()`, `torch.maximum/minimum` (new tensors, like eager's), and the
  float steps below; each intermediate must be a 0-d tensor of int64, bool or float dtype.
- int64 (revE E2): every int is guarded to lie in int64's range (torch wraps around, Python does not).
- Booleans (revE E8): a bool tensor is never an operand (torch's `True + True` is `True`; a SymBool divisor
  or `==` of two SymBools is not modelled); a comparison's result is read only by `bool()`/`int()`/`item()`.
- Floats (revE E1): torch converts an int operand to the float type first, which rounds above `2^m` (`m`
  mantissa bits: 24 for float32, 8 for bfloat16, 11 for float16). So each int entering float arithmetic (an
  operand of `/`, an int added to or compared with a float, `.to(float)`) is guarded `|v| < 2^m`, and each
  float result holding an integer too; then they compute exactly as Python ints. Two float operands must have
  the same dtype. `a / b` of ints, then at most one `+ c`/`- c` of an int, then `torch.ceil`/`torch.floor`, is
  the exact `ceil(a / b) + c` when the float arithmetic cannot cross an integer: with IEEE rounding and
  `b > 0` that holds when `2|a| + (|c| + 1) b < 2^m` (each of the two roundings moves the value by less than
  its distance to the nearest integer; it also makes the conversions of a, b and c exact). The condition is
  guarded (for lengths, an upper bound such as `s0 < 8388608` under float32). Any other float step (`//`,
  `%` of floats, a fraction compared or truncated) is unknown.
- Identity (revE E3): `max(a, b)` returns one of its operands, so it is decided by a guarded comparison of
  the derived values and returns that very object (builtins._min_max); no merged tensor stands for it.
Reads answered here: `bool(t)` (`if`), `max()/min()` of such tensors, `int(t)`, `t.item()`, `t.__index__()`,
and op arguments a fake run refused as data-dependent (`F.pad(h, (t1, t2))`, retried with the ints).
A derivation visits at most `_MAX_NODES` nodes, and any error inside it leaves the read a break.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch

from .sources import CallSource, Ref
from .values import ConstantValue, ListValue, SliceValue, SymNodeValue, TensorValue, TupleValue

_MANTISSA = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}
_COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
                "ne": operator.ne}
_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
           "mod": operator.mod, "truediv": operator.truediv, **_COMPARISONS}
_ALIASES = {"floor_divide": "floordiv", "true_divide": "truediv", "div": "truediv", "subtract": "sub",
            "multiply": "mul", "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le",
            "not_equal": "ne", "remainder": "mod"}
_TORCH_FUNCTIONS = {getattr(torch, n): n for n in (*_BINARY, *_ALIASES) if hasattr(torch, n)}


_TORCH_OTHERS = {torch.ceil: "ceil", torch.floor: "floor", torch.neg: "neg", torch.maximum: "maximum",
                 torch.minimum: "minimum"}
_EXTREMA = {"maximum": torch.sym_max, "minimum": torch.sym_min}


class _Unknown(Exception):
    """The value cannot be derived: the read stays a break."""


@dataclasses.dataclass(frozen=True)
class _Float:
    """A 0-d float tensor's exact value `num / den + add` (den > 0); `integral` when den is 1 and add 0,
    `added` after the one `+ c` allowed between the division and the rounding (NOTE above)."""
    num: Any
    den: Any
    add: Any
    bits: int
    added: bool = False

    @property
    def integral(self) -> bool:
        return _is_const(self.den, 1) and _is_const(self.add, 0)


def int_of(out, value: Any) -> Any:
    """A ConstantValue or SymNodeValue equal to the data of `value`, a 0-d int64 or bool tensor computed from
    sizes and integer inputs, or None (NOTE [Ints of tensors computed from sizes])."""
    if not isinstance(value, TensorValue) or value.fake.dim() != 0 or \
            value.fake.dtype not in (torch.int64, torch.bool):
        return None
    try:
        result = _eval(out, value.node, {})
    except _Unknown:
        return None
    except Exception:  # noqa: BLE001 - anything this module did not foresee leaves the read a break
        return None
    return None if isinstance(result, _Float) else result


def python_int(out, value: Any, kind: str = "int") -> Any:
    """`int(t)` (kind "int", also `__index__`) or `t.item()` (kind "item") of such a tensor, or None."""
    result = int_of(out, value)
    if result is None or kind == "item" or result.python_type() is not bool:
        return result
    return ConstantValue(int(result.as_constant()))  # int(True): the relation is guarded


def ints_for_tensors(out, target: Any, args: tuple) -> tuple | None:
    """`args` with each 0-d int64 tensor inside a tuple, list or slice argument replaced by its int, or None
    when there is none (`F.pad(h, (t1, t2))`, `x[..., :t]`: eager reads them by `__index__`). A tensor in a
    subscript tuple is an advanced index, not an int: only slice bounds are replaced there."""
    changed = False
    subscript = target is operator.getitem

    def replace(v: Any, nested: bool) -> Any:
        nonlocal changed
        if type(v) in (tuple, list) or type(v) in (TupleValue, ListValue) and v.cls in (tuple, list):
            items = [replace(x, not subscript) for x in (v if type(v) in (tuple, list) else v.items)]
            return type(v)(items) if type(v) in (tuple, list) else type(v)(items, cls=v.cls)
        if isinstance(v, SliceValue):
            return SliceValue(*(replace(p, True) for p in v.parts))
        if nested and isinstance(v, TensorValue) and v.fake.dim() == 0 and v.fake.dtype is torch.int64:
            as_int = int_of(out, v)
            if as_int is not None:
                changed = True
                return as_int
        return v
    replaced = tuple(replace(a, False) for a in args)
    return replaced if changed else None


def retry_with_ints(out, kind: str, target: Any, args: tuple, kwargs: dict) -> tuple | None:
    """`(args, fake result)` of a call whose fake run needed data, run again with the 0-d integer tensors
    of its list arguments given as their ints; None when there are none or the retry fails too."""
    from .breaks import Unsupported, UserException
    from .graph import _fake_of, _is_value
    replaced = ints_for_tensors(out, target, args)
    if replaced is None:
        return None
    try:
        fake_args, fake_kwargs = torch.utils._pytree.tree_map(_fake_of, (replaced, kwargs), is_leaf=_is_value)
        return replaced, out._run_fake(kind, target, fake_args, fake_kwargs)
    except (Unsupported, UserException):
        return None


def _is_const(v: Any, n: int) -> bool:
    return isinstance(v, ConstantValue) and type(v.value) is int and v.value == n


def _raw(v: Any) -> Any:
    return v.sym if isinstance(v, SymNodeValue) else v.as_constant()


def _holds(condition: Any) -> bool:
    """A relation needed for the derivation; a symbolic one is guarded by the ShapeEnv."""
    return bool(condition)


_MAX_NODES = 64  # nodes one derivation may visit: padding arithmetic takes ~15; a long chain stays a break


def _eval(out, node: Any, memo: dict) -> Any:
    if not isinstance(node, torch.fx.Node):
        if type(node) is int:
            return _int64(ConstantValue(node))
        raise _Unknown  # floats, bools (NOTE above), anything else
    if node not in memo:
        if len(memo) >= _MAX_NODES:
            raise _Unknown
        memo[node] = None  # visited (a derivation never revisits a node it is computing: the graph is a DAG)
        memo[node] = _eval_node(out, node, memo)
    return memo[node]


def _eval_node(out, node: torch.fx.Node, memo: dict) -> Any:
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt):
        return _int64(SymNodeValue(node, val))
    if isinstance(val, torch.SymBool):
        return SymNodeValue(node, val)
    if type(val) is int:
        return _int64(ConstantValue(val))
    if type(val) is bool:
        return ConstantValue(val)
    if not isinstance(val, torch.Tensor) or val.dim() != 0 or val.is_inference():
        raise _Unknown
    if node.op == "placeholder":
        return _input_int(out, node)
    step = _step(node)
    returns_operand = step is not None and any(
        isinstance(a, torch.fx.Node) and a.meta.get("val") is val for a in node.args)
    if not returns_operand and val._version != 0:  # written since it was made (also a constant: revE E5;
        raise _Unknown  # `.to` of its own dtype returns its operand, checked as that)
    known = getattr(val, "constant", None)
    if known is not None and val.dtype in (torch.int64, torch.bool):
        return ConstantValue(known.item())
    if step is None:
        raise _Unknown
    name, args = step
    if any(_is_bool(a) for a in args) and name not in ("to", "long"):
        raise _Unknown  # NOTE above: booleans are never operands
    operands = [_eval(out, a, memo) for a in args]
    return _checked(_apply(out, name, operands, val), val)


def _is_bool(arg: Any) -> bool:
    if isinstance(arg, torch.fx.Node):
        v = arg.meta.get("val")
        return isinstance(v, (bool, torch.SymBool)) or isinstance(v, torch.Tensor) and v.dtype is torch.bool
    return isinstance(arg, bool)


_INT64_MIN, _INT64_END = -2 ** 63, 2 ** 63


def _int64(v: Any) -> Any:
    """`v` (an int) when it lies in int64's range (guarded when symbolic), else unknown (NOTE above)."""
    raw = _raw(v)
    if not _holds(raw >= _INT64_MIN) or not _holds(raw < _INT64_END):
        raise _Unknown
    return v


def _input_int(out, node: torch.fx.Node) -> Any:
    from .packed_sequences import _input_of, _integer_cpu
    entry = _input_of(out, node)
    if entry is None or not isinstance(entry.tensor, torch.Tensor) or entry.tensor.dim() != 0 or \
            entry.tensor.dtype is not torch.int64 or not _integer_cpu(entry.tensor) or entry.writes or \
            entry.version is None or entry.value.fake._version != entry.version:
        raise _Unknown
    source = CallSource(Ref(int, "int"), entry.source)
    cached = out.cached(source)
    if cached is not None:
        return cached
    value = int(entry.tensor)
    if source.describe() in out.dynamic_ints:
        return out.add_int_input(value, source)  # NOTE [Dynamic ints]: it changed before
    out.guard_constant(source, value)
    return out.remember(source, ConstantValue(value))


def _step(node: torch.fx.Node) -> tuple | None:
    """(step name, operand nodes/constants) of a node this module derives, or None."""
    args, kwargs = node.args, dict(node.kwargs)
    if node.op == "call_function":
        name = getattr(node.target, "__name__", None) if node.target in vars(operator).values() else None
        if name is None:
            try:
                name = _TORCH_FUNCTIONS.get(node.target) or _TORCH_OTHERS.get(node.target)
            except TypeError:
                return None
    elif node.op == "call_method":
        name = node.target
        if name.startswith("__r") and name.endswith("__") and len(args) == 2:
            name, args = name[3:-2], (args[1], args[0])
        elif name.startswith("__") and name.endswith("__"):
            name = name[2:-2]
    else:
        return None
    name = _ALIASES.get(name, name)
    if name == "truediv" and kwargs.get("rounding_mode") == "floor":
        name, kwargs = "floordiv", {}
    if name == "to":
        dtype = kwargs.pop("dtype", args[1] if len(args) == 2 else None)
        if kwargs or len(args) > 2 or not isinstance(dtype, torch.dtype):
            return None
        return name, args[:1]
    if kwargs or name is None:
        return None
    if (name in _BINARY or name in _EXTREMA) and len(args) == 2 or name in ("ceil", "floor", "neg", "long") and len(args) == 1:
        return name, args
    return None


def _checked(result: Any, val: torch.Tensor) -> Any:
    """`result` when its kind is the tensor's dtype (int64 / bool / float), else unknown."""
    if isinstance(result, _Float):
        if _MANTISSA.get(val.dtype) != result.bits:
            raise _Unknown
        return result
    if val.dtype is torch.bool and result.python_type() is bool:
        return result
    if val.dtype is torch.int64 and result.python_type() is int:
        return _int64(result)
    if val.dtype in _MANTISSA and result.python_type() is int:
        return _integral(result, _MANTISSA[val.dtype])
    raise _Unknown


def _integral(v: Any, bits: int) -> _Float:
    """An int held in a float of `bits` mantissa bits: exact while |v| < 2^bits (guarded)."""
    limit = 2 ** bits
    if not _holds(_raw(v) < limit) or not _holds(_raw(v) > -limit):
        raise _Unknown
    return _Float(v, ConstantValue(1), ConstantValue(0), bits)


def _apply(out, name: str, operands: list, val: torch.Tensor) -> Any:
    if name in ("to", "long"):
        (x,) = operands
        if not isinstance(x, _Float) and x.python_type() is bool and val.dtype is not torch.bool:
            raise _Unknown  # a bool converted to a number: not derived
        if isinstance(x, _Float):
            if not x.integral:
                raise _Unknown  # truncation of a fraction: not derived
            return x.num
        return x
    if name in ("ceil", "floor"):
        (x,) = operands
        if not isinstance(x, _Float) and val.dtype is not torch.int64:
            raise _Unknown
        return _rounded(out, x, name) if isinstance(x, _Float) else x
    if name == "neg":
        (x,) = operands
        if isinstance(x, _Float):
            raise _Unknown
        return _int64(out.sym_op(operator.neg, (x,)))
    a, b = operands
    if name in _EXTREMA:
        if isinstance(a, _Float) or isinstance(b, _Float):
            raise _Unknown
        return out.sym_op(_EXTREMA[name], (a, b))
    if val.dtype is torch.int64 and name in ("truediv",):
        raise _Unknown
    if isinstance(a, _Float) or isinstance(b, _Float):
        return _float_binary(out, name, a, b, val)
    return _int_binary(out, name, a, b, val)


def _int_binary(out, name: str, a: Any, b: Any, val: torch.Tensor) -> Any:
    """`a <op> b` of two ints: true division makes a _Float (both operands converted exactly and a positive
    divisor, guarded), floor division and modulo need a nonzero divisor (guarded); the others are the int
    operation itself (its result's range is checked by _checked)."""
    if name == "truediv":
        bits = _MANTISSA.get(val.dtype)
        if bits is None:
            raise _Unknown
        _integral(a, bits), _integral(b, bits)  # torch converts both to the float type first (revE E1)
        if not _holds(_raw(b) > 0):
            raise _Unknown
        return _Float(a, b, ConstantValue(0), bits)
    if name in ("floordiv", "mod") and not _holds(_raw(b) != 0):
        raise _Unknown
    return out.sym_op(_BINARY[name], (a, b))


_FLOAT_STEPS = frozenset({"add", "sub", "mul", "truediv", *_COMPARISONS})


def _float_binary(out, name: str, a: Any, b: Any, val: torch.Tensor) -> Any:
    """`a <op> b` with a float operand. Both are converted to the float's type (one dtype for two floats),
    so an int operand must be exact there (guarded); integral floats then compute as ints (a float result is
    guarded exact again by _checked); a fraction takes one `+ c`/`- c` of an int (NOTE above); anything else
    is unknown."""
    fa, fb = isinstance(a, _Float), isinstance(b, _Float)
    bits = a.bits if fa else b.bits
    if fa and fb and a.bits != b.bits or name not in _FLOAT_STEPS:
        raise _Unknown
    if name not in _COMPARISONS and _MANTISSA.get(val.dtype) != bits:
        raise _Unknown
    a, b = (a if fa else _integral(a, bits)), (b if fb else _integral(b, bits))
    if a.integral and b.integral:
        return _int_binary(out, name, a.num, b.num, val)  # _checked makes a float result integral again
    frac, other = (a, b) if not a.integral else (b, a)
    if not other.integral or frac.added or name not in ("add", "sub"):
        raise _Unknown
    if name == "sub" and frac is b:
        raise _Unknown  # k - num/den: not derived
    add = out.sym_op(operator.add if name == "add" else operator.sub, (frac.add, other.num))
    return _Float(frac.num, frac.den, add, frac.bits, added=True)


def _rounded(out, x: _Float, name: str) -> Any:
    """ceil/floor of `num / den + add` as an int, guarded exact (NOTE above)."""
    if x.integral:
        return x.num
    num, den, add = _raw(x.num), _raw(x.den), _raw(x.add)
    if not _holds(2 * abs(num) + (abs(add) + 1) * den < 2 ** x.bits):
        raise _Unknown
    if name == "floor":
        whole = out.sym_op(operator.floordiv, (x.num, x.den))
    else:
        negated = out.sym_op(operator.neg, (x.num,))
        whole = out.sym_op(operator.neg, (out.sym_op(operator.floordiv, (negated, x.den)),))
    return out.sym_op(operator.add, (whole, x.add))
