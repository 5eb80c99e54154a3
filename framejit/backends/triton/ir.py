"""The loop-level IR of the triton backend: index arithmetic, value expressions and graph nodes.

Three layers, all immutable values except the node containers:

- **Index expressions** (`Var`, `Const`, `Sum`, `Scaled`, `FloorDiv`, `Mod`) describe integer positions.
  Every integer in them is non-negative, so each expression has a known range `[0, max_value]`; the
  smart constructors (`add`, `mul`, `floordiv`, `mod`) use it to simplify, which is what turns a
  reshape round trip or a broadcast read back into the plain loop variable. Equal positions print
  equal (`Sum` keeps its terms sorted), so comparing `render(a) == render(b)` is how the scheduler
  decides "same element".
- **Value expressions** (`Load`, `Scalar`, `Op`) compute one element of a tensor: `Load(buffer, index)`
  reads the buffer at per-dimension coordinates; `Op(name, args, dtype)` applies one operation from
  codegen's op table. Casts are explicit (`Op("to", ...)`): the body of every node ends in a cast to
  its dtype, so fused kernels round exactly where eager PyTorch rounds between ops.
- **Nodes**: `InputNode` (a graph input or constant), `PointwiseNode`, `ReductionNode`, `ExternNode`.
  A computed node's body is written in terms of its loop variables `i0, i1, ...` (coordinates of its
  own shape; for a reduction, coordinates of the shape it reduces). Views never become nodes: they
  are folded into the index of the loads that read through them (see lowering.py).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, Sequence, Union

import torch

# ---------------------------------------------------------------------------------------------------
# Index expressions
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Var:
    name: str
    bound: int  # the variable takes the values 0 .. bound-1


@dataclasses.dataclass(frozen=True)
class Const:
    value: int


@dataclasses.dataclass(frozen=True)
class Scaled:
    factor: int
    term: "Index"


@dataclasses.dataclass(frozen=True)
class Sum:
    terms: tuple  # sorted by NOTE [Term order independent of sizes]; never nested, never a Const term except the last position


@dataclasses.dataclass(frozen=True)
class FloorDiv:
    term: "Index"
    divisor: int


@dataclasses.dataclass(frozen=True)
class Mod:
    term: "Index"
    modulus: int


Index = Union[Var, Const, Scaled, Sum, FloorDiv, Mod]


def max_value(e: Index) -> int:
    """The largest value `e` can take (every index expression is >= 0)."""
    if isinstance(e, Var):
        return max(e.bound - 1, 0)
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Scaled):
        return e.factor * max_value(e.term)
    if isinstance(e, Sum):
        return sum(max_value(t) for t in e.terms)
    if isinstance(e, FloorDiv):
        return max_value(e.term) // e.divisor
    return min(max_value(e.term), e.modulus - 1)


def _split_factor(e: Index) -> tuple[int, Index]:
    return (e.factor, e.term) if isinstance(e, Scaled) else (1, e)


def add(*terms: Index) -> Index:
    flat: list[Index] = []
    constant = 0
    for t in terms:
        for u in (t.terms if isinstance(t, Sum) else (t,)):
            if isinstance(u, Const):
                constant += u.value
            else:
                flat.append(u)
    combined: dict[str, tuple[int, Index]] = {}
    for u in flat:  # x + 2*x -> 3*x
        factor, base = _split_factor(u)
        key = render(base)
        old = combined.get(key, (0, base))
        combined[key] = (old[0] + factor, base)
    _recombine_div_mod(combined)
    parts = [mul(base, factor) for _, (factor, base) in sorted(combined.items(), key=_term_order) if factor]
    parts = [p for p in parts if not (isinstance(p, Const) and p.value == 0)]
    if constant:
        parts.append(Const(constant))
    if not parts:
        return Const(0)
    return parts[0] if len(parts) == 1 else Sum(tuple(parts))


_DIGITS = re.compile(r"\d+")


# NOTE [Term order independent of sizes]: a sum's terms are ordered by their text with the integers left out,
# then by those integers as numbers. Ordered by text alone, `(xindex // 16) % 3` came before
# `(xindex // 48) % 2` at one size but `(xindex // 16) % 80` after `(xindex // 1280) % 2` at another (digits
# compared as text: "16" > "12"), so the kernels generated at the probe sizes of a
# size-generic module (triton/dynamic.py) differed in structure, not only in literals, and the zoo gpt's graph
# compiled per shape. Divisors of one delinearized index grow with the dimension's depth at every size, so the
# numeric order of the integers is the same at every probe.
def _term_order(item) -> tuple:
    key = item[0]
    return _DIGITS.sub("#", key), tuple(int(d) for d in _DIGITS.findall(key))


# NOTE [Recombination off at probes]: `_recombine_div_mod` fires when sizes line up (`2*(x % 24) + 48*(x // 24)`
# is `2*x` for an even row of 48, not for 49), so a size-generic module's probes (triton/dynamic.py) could
# get kernels of different structure (`x[:, 1::2]`); dynamic.py generates them again with it off.
RECOMBINE = [True]


def _recombine_div_mod(combined: dict) -> None:
    """Rewrite `k*m*(e // m) + k*(e % m)` as `k*e` in place (undoing a delinearize/linearize pair)."""
    if not RECOMBINE[0]:
        return
    changed = True
    while changed:
        changed = False
        for key, (factor, base) in list(combined.items()):
            if not isinstance(base, Mod):
                continue
            div_key = render(FloorDiv(base.term, base.modulus))
            div = combined.get(div_key)
            if div is None or div[0] != factor * base.modulus:
                continue
            del combined[key], combined[div_key]
            inner_key = render(base.term)
            old = combined.get(inner_key, (0, base.term))
            combined[inner_key] = (old[0] + factor, base.term)
            changed = True
            break


def mul(e: Index, factor: int) -> Index:
    if factor == 0:
        return Const(0)
    if factor == 1:
        return e
    if isinstance(e, Const):
        return Const(e.value * factor)
    if isinstance(e, Scaled):
        return Scaled(e.factor * factor, e.term)
    if isinstance(e, Sum):
        return add(*(mul(t, factor) for t in e.terms))
    return Scaled(factor, e)


def floordiv(e: Index, divisor: int) -> Index:
    if divisor == 1:
        return e
    if max_value(e) < divisor:
        return Const(0)
    if isinstance(e, Const):
        return Const(e.value // divisor)
    if isinstance(e, FloorDiv):
        return floordiv(e.term, e.divisor * divisor)
    terms = e.terms if isinstance(e, Sum) else (e,)
    divisible = [t for t in terms if _split_factor(t)[0] % divisor == 0 and not isinstance(t, Const)]
    if isinstance(terms[-1], Const) and terms[-1].value % divisor == 0:
        divisible.append(terms[-1])
    rest = [t for t in terms if t not in divisible]
    if divisible:  # (6*a + b) // 6 == a + b // 6 for b >= 0
        return add(*(_divide_exact(t, divisor) for t in divisible), floordiv(add(*rest), divisor))
    return FloorDiv(e, divisor)


def _divide_exact(t: Index, divisor: int) -> Index:
    if isinstance(t, Const):
        return Const(t.value // divisor)
    factor, base = _split_factor(t)
    return mul(base, factor // divisor)


def mod(e: Index, modulus: int) -> Index:
    if modulus == 1:
        return Const(0)
    if max_value(e) < modulus:
        return e
    if isinstance(e, Const):
        return Const(e.value % modulus)
    if isinstance(e, Sum):  # (6*a + b) % 6 == b % 6
        kept = [t for t in e.terms if not (_split_factor(t)[0] % modulus == 0 and not isinstance(t, Const))]
        kept = [t for t in kept if not (isinstance(t, Const) and t.value % modulus == 0)]
        if len(kept) < len(e.terms):
            return mod(add(*kept), modulus)
    if isinstance(e, Scaled) and e.factor % modulus == 0:
        return Const(0)
    return Mod(e, modulus)


def substitute(e: Index, mapping: dict[str, Index]) -> Index:
    """Replace variables by expressions, simplifying on the way."""
    if isinstance(e, Var):
        return mapping.get(e.name, e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Scaled):
        return mul(substitute(e.term, mapping), e.factor)
    if isinstance(e, Sum):
        return add(*(substitute(t, mapping) for t in e.terms))
    if isinstance(e, FloorDiv):
        return floordiv(substitute(e.term, mapping), e.divisor)
    return mod(substitute(e.term, mapping), e.modulus)


def render(e: Index) -> str:
    """Python/Triton source for `e` (the same text for equal positions)."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Scaled):
        inner = render(e.term)
        return f"{e.factor} * {inner}" if isinstance(e.term, Var) else f"{e.factor} * ({inner})"
    if isinstance(e, Sum):
        return " + ".join(render(t) for t in e.terms)
    op, right = ("//", e.divisor) if isinstance(e, FloorDiv) else ("%", e.modulus)
    inner = render(e.term)
    return f"{inner} {op} {right}" if isinstance(e.term, Var) else f"({inner}) {op} {right}"


def variables(e: Index) -> set[str]:
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, Const):
        return set()
    if isinstance(e, Sum):
        return set().union(*(variables(t) for t in e.terms))
    return variables(e.term)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def linearize(coords: Sequence[Index], shape: Sequence[int]) -> Index:
    return add(*(mul(c, s) for c, s in zip(coords, contiguous_strides(shape))))


def delinearize(flat: Index, shape: Sequence[int]) -> list[Index]:
    """Row-major coordinates of the element number `flat` of a tensor of `shape`."""
    strides = contiguous_strides(shape)
    return [Const(0) if size <= 1 else mod(floordiv(flat, stride), size) for size, stride in zip(shape, strides)]


def loop_vars(shape: Sequence[int], prefix: str = "i") -> list[Var]:
    return [Var(f"{prefix}{k}", size) for k, size in enumerate(shape)]


# ---------------------------------------------------------------------------------------------------
# Value expressions
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Load:
    buffer: str
    index: tuple  # one Index per dimension of the buffer
    dtype: torch.dtype


@dataclasses.dataclass(frozen=True)
class Scalar:
    value: Union[bool, int, float]
    dtype: torch.dtype


@dataclasses.dataclass(frozen=True)
class Op:
    name: str  # a key of codegen.OPS
    args: tuple
    dtype: torch.dtype


Value = Union[Load, Scalar, Op]


def cast(v: Value, dtype: torch.dtype) -> Value:
    if v.dtype == dtype:
        return v
    if isinstance(v, Scalar):
        return Scalar(_python_value(v.value, dtype), dtype)
    return Op("to", (v,), dtype)


def _python_value(value, dtype: torch.dtype):
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        value = float(value)
        return _as_stored(value, dtype) if dtype in (torch.float16, torch.bfloat16) else value
    value = int(value)
    if dtype in _NARROW_INTS and not _NARROW_INTS[dtype][0] <= value <= _NARROW_INTS[dtype][1]:
        return _as_stored(value, dtype)
    return value


_NARROW_INTS = {d: (torch.iinfo(d).min, torch.iinfo(d).max) for d in (torch.int8, torch.uint8, torch.int16, torch.int32)}


# NOTE [Literals hold their dtype's value]: a Scalar of a float16/bfloat16 or narrow integer dtype holds the
# number that dtype stores, converted as torch converts it (round to nearest even; integers wrap). A fill's
# value was kept whole: `torch.full((4,), 9000.0, dtype=torch.bfloat16) - 9000` used 9000.0 inside the fused
# kernel where eager's tensor holds 9024.0 (triton -24, eager 0), `full_like(x, 0.1) * 3` multiplied 0.1
# (float16 eager 0.2998, triton 0.3000), and `int8 + 300` emitted 300, which Triton refuses for an int8 block
# (eager wraps it to 44). Every fill, literal and number operand goes through here (Lowerer.pointwise).
def _as_stored(value, dtype: torch.dtype):
    wide = torch.float64 if isinstance(value, float) else torch.int64
    return torch.tensor(value, dtype=wide).to(dtype).item()


def loads_of(v: Value) -> list[Load]:
    if isinstance(v, Load):
        return [v]
    if isinstance(v, Op):
        return [load for a in v.args for load in loads_of(a)]
    return []


def map_loads(v: Value, fn: Callable[[Load], Value]) -> Value:
    if isinstance(v, Load):
        return fn(v)
    if isinstance(v, Op):
        return Op(v.name, tuple(map_loads(a, fn) for a in v.args), v.dtype)
    return v


# ---------------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class InputNode:
    name: str
    shape: tuple
    dtype: torch.dtype
    strides: tuple
    kind: str = "input"  # "input" (a graph argument) or "constant" (a tensor held by the graph)


@dataclasses.dataclass
class PointwiseNode:
    name: str
    shape: tuple
    dtype: torch.dtype
    body: Value  # in terms of loop_vars(shape)
    origin: str = ""  # the aten op it came from, for logs

    @property
    def strides(self) -> tuple:
        return contiguous_strides(self.shape)


REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin", "max_last", "min_last")  # NOTE [Eager's maximum on ties]


@dataclasses.dataclass
class ReductionNode:
    name: str
    shape: tuple  # output shape (reduced dims removed, or kept as 1)
    dtype: torch.dtype
    input_shape: tuple  # the shape whose reduced_dims are reduced; body uses loop_vars(input_shape)
    reduced_dims: tuple
    reduce_type: str  # one of REDUCTIONS
    body: Value
    origin: str = ""

    @property
    def strides(self) -> tuple:
        return contiguous_strides(self.shape)

    @property
    def xnumel(self) -> int:
        return math.prod(s for d, s in enumerate(self.input_shape) if d not in self.reduced_dims)

    @property
    def rnumel(self) -> int:
        return math.prod(self.input_shape[d] for d in self.reduced_dims)


@dataclasses.dataclass
class ExternOutput:
    name: str
    path: tuple  # indices into the op's (possibly nested) result
    shape: tuple
    dtype: torch.dtype
    strides: tuple


@dataclasses.dataclass
class ExternNode:
    name: str
    op: object  # an OpOverload (or any callable): called eagerly by the wrapper
    args: tuple  # pytree of TensorRefs (see lowering) and constants
    kwargs: dict
    outputs: list  # ExternOutput per tensor result
    reason: str  # "library" (mm, conv, ...) or "fallback: <why>"
    inputs: tuple = ()  # names of the buffers it reads
    mutates: tuple = ()  # names of the buffers it writes in place (copy_ back into a graph input)
    layouts: tuple = ()  # (argument index, strides): NOTE [Random draws in eager's layout] (lowering.py)


Node = Union[InputNode, PointwiseNode, ReductionNode, ExternNode]


def reads(node: Node) -> list[str]:
    """Names of the buffers a node reads, in first-use order."""
    if isinstance(node, (PointwiseNode, ReductionNode)):
        return list(dict.fromkeys(load.buffer for load in loads_of(node.body)))
    if isinstance(node, ExternNode):
        return list(node.inputs)
    return []


@dataclasses.dataclass
class Graph:
    """Nodes in a valid execution order, plus how to rebuild the graph's return value."""

    inputs: list  # InputNode per graph placeholder
    constants: dict  # name -> torch.Tensor held by the graph
    nodes: list  # InputNode (constants), PointwiseNode, ReductionNode, ExternNode
    output_refs: list  # TensorRef per flat output leaf (or a python constant)
    output_spec: object  # torch.utils._pytree spec of the graph's return value

    def buffers(self) -> dict:
        """Every buffer by name: inputs, computed nodes and extern outputs."""
        table = {n.name: n for n in self.inputs}
        for node in self.nodes:
            table[node.name] = node
            if isinstance(node, ExternNode):
                table.update({o.name: o for o in node.outputs})
        return table
