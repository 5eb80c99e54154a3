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

- Leaves: sizes and other symbolic ints of the graph; ints in the nodes; tensors whose data tracing knows
  (`torch.tensor(3)`); and 0-d int64 CPU tensors that are graph inputs not written in this graph, read as
  `int(<source>)` at frame entry: an int guarded by value (CONSTANT_MATCH), symbolic after it changed, as
  any int attribute (NOTE [Dynamic ints]).
- Steps: `+ - *`, `//` and `%` (a divisor guarded != 0; both as Python's, as torch's for integers), `-x`, comparisons, `.to(int64/float)`, `.long()`, and the
  float steps below; each intermediate must be a 0-d tensor nothing has written since it was made (its
  version counter unchanged), of int64, bool or float dtype; anything else leaves the read a break, as before.
- Floats: `a / b` of ints, then at most one `+ c`/`- c` of an int, then `torch.ceil`/`torch.floor`, is the
  exact `ceil(a / b) + c` when the float arithmetic cannot cross an integer: with IEEE rounding to `m`
  mantissa bits and `b > 0` that holds when `2|a| + (|c| + 1) b < 2^m` (each of the two roundings moves the
  value by less than its distance to the nearest integer). The condition is guarded (for lengths, an upper
  bound such as `s0 < 8388608` under float32); integral floats stay exact while `|v| < 2^m` (guarded too).
- int64 overflow is not modelled (Python ints do not wrap): the values are sizes and conv geometry.
Reads answered here: `bool(t)` (`if`), `max()/min()` of such tensors, `int(t)`, `t.item()`, `t.__index__()`,
and op arguments a fake run refused as data-dependent (`F.pad(h, (t1, t2))`, retried with the ints).
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
        if type(node) in (int, bool):
            return ConstantValue(node)
        raise _Unknown
    if node not in memo:
        if len(memo) >= _MAX_NODES:
            raise _Unknown
        memo[node] = None  # visited (a derivation never revisits a node it is computing: the graph is a DAG)
        memo[node] = _eval_node(out, node, memo)
    return memo[node]


def _eval_node(out, node: torch.fx.Node, memo: dict) -> Any:
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymBool)):
        return SymNodeValue(node, val)
    if type(val) in (int, bool):
        return ConstantValue(val)
    if not isinstance(val, torch.Tensor) or val.dim() != 0 or val.is_inference():
        raise _Unknown
    known = getattr(val, "constant", None)
    if known is not None and val.dtype in (torch.int64, torch.bool):
        return ConstantValue(known.item())
    if node.op == "placeholder":
        return _input_int(out, node)
    step = _step(node)
    if step is None:
        raise _Unknown
    returns_operand = any(isinstance(a, torch.fx.Node) and a.meta.get("val") is val for a in node.args)
    if not returns_operand and val._version != 0:  # written after it was made (`.to` of its own dtype returns
        raise _Unknown  # its operand, checked as that)
    name, args = step
    operands = [_eval(out, a, memo) for a in args]
    return _checked(_apply(out, name, operands, val), val)


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
        return result
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
        if isinstance(x, _Float):
            if not x.integral:
                raise _Unknown  # truncation of a fraction: not derived
            return x.num
        return x
    if name in ("ceil", "floor"):
        (x,) = operands
        return _rounded(out, x, name) if isinstance(x, _Float) else x
    if name == "neg":
        (x,) = operands
        if isinstance(x, _Float):
            raise _Unknown
        return out.sym_op(operator.neg, (x,))
    a, b = operands
    if name in _EXTREMA:
        if isinstance(a, _Float) or isinstance(b, _Float):
            raise _Unknown
        return out.sym_op(_EXTREMA[name], (a, b))
    if isinstance(a, _Float) or isinstance(b, _Float):
        return _float_binary(out, name, a, b, val)
    return _int_binary(out, name, a, b, val)


def _int_binary(out, name: str, a: Any, b: Any, val: torch.Tensor) -> Any:
    """`a <op> b` of two ints: true division makes a _Float (a positive divisor, guarded), floor division and
    modulo need a nonzero divisor (guarded); the others are the int operation itself."""
    if name == "truediv":
        bits = _MANTISSA.get(val.dtype)
        if bits is None or not _holds(_raw(b) > 0):
            raise _Unknown
        return _Float(a, b, ConstantValue(0), bits)
    if name in ("floordiv", "mod") and not _holds(_raw(b) != 0):
        raise _Unknown
    return out.sym_op(_BINARY[name], (a, b))


def _float_binary(out, name: str, a: Any, b: Any, val: torch.Tensor) -> Any:
    """`a <op> b` with a float operand: integral floats compute as ints (exact while they fit, guarded);
    a fraction takes one `+ c`/`- c` of an int (NOTE above); anything else is unknown."""
    fa, fb = isinstance(a, _Float), isinstance(b, _Float)
    if (not fa or a.integral) and (not fb or b.integral):
        ia, ib = (a.num if fa else a), (b.num if fb else b)
        return _int_binary(out, name, ia, ib, val)  # _checked makes a float result integral again
    frac, other = (a, b) if fa and not a.integral else (b, a)
    if isinstance(other, _Float) and not other.integral or frac.added or name not in ("add", "sub"):
        raise _Unknown
    k = other.num if isinstance(other, _Float) else other
    if name == "sub" and frac is b:
        raise _Unknown  # k - num/den: not derived
    add = out.sym_op(operator.add if name == "add" else operator.sub, (frac.add, k))
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


# NOTE [Extrema of derived ints kept in the graph]: `max(pl, pr)` of two such tensors returns one of the two
# objects, and which one depends on the sizes (Encodec's `max(pl, pr + extra)`: on the length modulo the
# conv strides). Deciding it in the trace guards that relation, so every residue of the length compiled
# again (EncodecModel: 8 entries of the top frame over 14 lengths, then the recompile limit). When the env
# cannot decide it without a guard, the result is `torch.maximum(pl, pr)` (its int: `sym_max`), a new
# tensor with the value of the object eager returns. That differs from eager only by identity, so it is
# kept only while identity cannot be observed: the result never leaves the graph (not returned, stored or
# live at a break: then the object would be seen outside), and neither it nor an operand is written in the
# graph or used as a set element or dict key (checked when the graph is finished, and by set_element).
# Otherwise the frame breaks at the max() call instead (NOTE [Breaks moved earlier] in convert.py), where
# it runs as Python, as before this note.
def merged_extremum(tx, fn: Any, items: list) -> Any:
    """`max(a, b, ...)`/`min` of 0-d int64 tensors with derived values, as above, or None."""
    out = tx.output
    if len(items) < 2 or not all(isinstance(i, TensorValue) and i.fake.dim() == 0 and i.cls is torch.Tensor
                                 and i.fake.dtype is torch.int64 for i in items):
        return None
    ints = [int_of(out, i) for i in items]
    if any(v is None for v in ints) or len({i.fake.device for i in items}) != 1:
        return None
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    better, not_better = (operator.gt, operator.le) if fn is max else (operator.lt, operator.ge)
    best, undecided = 0, False
    for i in range(1, len(items)):
        if statically_known_true(better(_raw(ints[i]), _raw(ints[best]))):
            best = i
        elif not statically_known_true(not_better(_raw(ints[i]), _raw(ints[best]))):
            undecided = True
    if not undecided:
        return items[best]
    result = items[0]
    for item in items[1:]:
        result = out.call("call_function", torch.maximum if fn is max else torch.minimum, (result, item), {})
    from .lazy_combinators import _root_index
    stack = tuple(tx.user_stack()) if hasattr(tx, "user_stack") else ()
    record = (result.fake, [i.fake for i in items], _root_index(tx), stack)
    out.__dict__.setdefault("merged_extrema", []).append(
        (record, [t._version for t in (record[0], *record[1])]))
    return result


def _moved_break(record: tuple, why: str):
    from .breaks import BreakKind, Unsupported
    e = Unsupported(BreakKind.DATA_DEPENDENT, f"max()/min() of tensors compares tensor data ({why})")
    e.root_index = record[2]
    return e.with_stack(record[3])


def check_merged_extrema(out, values: list) -> None:
    """At the end of the graph: each merged extremum's result stays inside it, unwritten (NOTE above)."""
    merged = out.__dict__.get("merged_extrema")
    if not merged:
        return
    outputs = {_storage(v.fake) for v in values if isinstance(v, TensorValue)}
    for record, versions in merged:
        tensors = (record[0], *record[1])
        if any(t._version != v for t, v in zip(tensors, versions)):
            raise _moved_break(record, "an operand or the result is written")
        if _storage(record[0]) in outputs:
            raise _moved_break(record, "the result leaves the graph")


def check_identity_use(out, value: Any) -> None:
    """A set element or dict key: not a merged extremum or one of its operands (NOTE above)."""
    for record, _ in out.__dict__.get("merged_extrema", ()):
        if any(value.fake is t for t in (record[0], *record[1])):
            raise _moved_break(record, "its identity is used")


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata
