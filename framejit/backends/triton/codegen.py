"""Triton kernel generation: one `@triton.jit` function per FusedGroup.

A pointwise kernel is one block of `XBLOCK` elements per program. A reduction kernel handles `XBLOCK`
rows per program: *persistent* when the whole row fits in one `RBLOCK` (values stay in registers and
are computed once), *looped* otherwise (one loop over the row per reduction, then one loop that
stores the row-shaped results; pointwise members are recomputed in each loop, never stored and
reloaded). Values are emitted as `tmpN` variables with common-subexpression elimination per scope, so
the source is deterministic for a given group and readable in dumps.

Invariants: masked lanes never reach a reduction (they are replaced by the reduction's identity);
every load of an index that depends on xindex/rindex is masked; loads of a constant index are
scalar loads (always in bounds).
"""
from __future__ import annotations

import dataclasses
import math
import re
import struct

import torch

from . import ir
from .ir import Load, ReductionNode, Scalar
from .scheduler import FusedGroup, natural_coords, node_env, space_of

TL_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
POINTER_TYPES = {
    torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
    torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
    torch.bool: "*i1",
}

# NOTE [bfloat16 rounding in the interpreter]: Triton's interpreter (TRITON_INTERPRET=1, numpy) converts a
# float32 to bfloat16 by truncating the low 16 bits (its `fp_downcast_rounding="rtne"` rounds ties up and
# drops the carry), where eager torch and a GPU's conversion round to nearest even: every bf16 result of a
# kernel (an autocast model's activations and gradients) was up to an ulp below eager's, 30-80% of elements
# in bf16 autocast training. Under the interpreter a cast to bfloat16 is built from the float32 bits alone:
# add 0x7FFF plus the lowest kept bit, keep the high 16 bits and bitcast them to bfloat16 (NaN becomes
# 0x7FC0, as c10::BFloat16's round_to_nearest_even makes it). The interpreter's own .to(tl.bfloat16) is not
# used even on already rounded bits: it mishandles subnormals (x ~ 1e-38: 2263 of 3000 casts differed from
# eager, 9.2e-41 became 0). A float64 value goes through float32 first, as eager's conversion does
# (c10::BFloat16 takes a float).
def cast_text(text: str, dtype: torch.dtype) -> str:
    if _is_number(text):  # NOTE [Casts of literals]
        text = f"tl.full([], {text}, {'tl.float32' if dtype.is_floating_point else 'tl.int64'})"
    if dtype != torch.bfloat16 or not _interpreting():
        return f"{text}.to({TL_DTYPES[dtype]})"
    wide = f"({text}).to(tl.float32)"
    bits = f"{wide}.to(tl.uint32, bitcast=True)"
    high = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16)"
    return f"tl.where({wide} != {wide}, 0x7FC0, {high}).to(tl.uint16).to(tl.bfloat16, bitcast=True)"


# NOTE [bfloat16 widening in the interpreter]: the interpreter's bfloat16 -> float32 conversion flushed
# subnormals to zero (2.9e-39 * 3 gave 0.0, eager 8.8e-39; every bf16 op on values below 1.2e-38 differed), and
# its bfloat16 `!= 0` compared the bits (-0.0 converted to True). Under the interpreter a bfloat16 value is
# widened from its bits: the 16 bits shifted to the top of a float32, which is exact for every value.
# NOTE [bfloat16 literals in the interpreter]: Triton 3.8's interpreter (the 3.13 environment) has no bfloat16
# `tl.full` (`get_bf16`: every bfloat16 fill kernel, `torch.where(x > 0, x, 1.0)` included, raised), and both
# versions' `-tl.full([], 0.0, tl.bfloat16)` stored +0.0 (`torch.full((4,), -0.0, dtype=torch.bfloat16)`). A
# bfloat16 literal is made in float32 and cast, as every bfloat16 value is (NOTE [bfloat16 rounding in the
# interpreter]).
def _is_literal(text: str) -> bool:  # a number (a fill's, already its dtype's value) is widened as Triton widens it
    return _is_number(text) or text.startswith("float(")


def _widened_bfloat16(text: str) -> str:
    return f"(({text}).to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"


# NOTE [Casts of literals]: a constant operand of a cast (the `1` of `torch.ones(3)` computed in float32 for a float16
# result, under a float16 default) was emitted as `1.to(tl.float32)`, a Python syntax error: the kernel module did
# not import and the graph ran eagerly. A literal becomes a 0-d block of its value first.
def _is_number(text: str) -> bool:
    return re.fullmatch(r"-?[0-9][0-9.]*(e[+-]?[0-9]+)?", text) is not None


def _interpreting() -> bool:
    from . import interpreting
    return interpreting()


# NOTE [Eager's maximum on ties]
# torch.maximum(a, b) / minimum(a, b) on floats, as eager's scalar loop computes them: NaN if either is
# NaN, else b only where it is strictly larger (smaller), so a wins ties: maximum(-0.0, 0.0) is -0.0 and
# maximum(0.0, -0.0) is 0.0. (tl.maximum gave one zero for both orders.) Eager's AVX loop returns b on
# +-0.0 ties instead, so for tensors long enough to be vectorised eager itself has no single answer;
# the scalar loop's is taken, which is also what onnxrt computes (semantics.py, NOTE [Where keeps -0.0]).
# Float max/min reductions combine the same way, in index order (tl.reduce pairs its operands in order;
# a looped reduction combines its accumulator with the later block): amax, amin and max.dim keep the
# first of tied values as eager does, max()/min() of a whole tensor the last one as eager does
# (reduce types "max_last"/"min_last"; measured on rows shorter than eager's vector loop, 32 floats).
# (two wheres, not `(b > a) | (b != b)`: the interpreter raised TypeError on that `|` when b is a 0-d load and a
# block, as in `torch.maximum(x, torch.tensor(0.5))`, every dtype)
_EAGER_MAX = "tl.where({1} != {1}, {1}, tl.where({1} > {0}, {1}, {0}))"
_EAGER_MIN = "tl.where({1} != {1}, {1}, tl.where({1} < {0}, {1}, {0}))"
OPS = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "truediv": "{0} / {1}",
    "truncdiv": "{0} // {1}", "cmod": "{0} % {1}", "neg": "-{0}", "abs": "tl.abs({0})",
    "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "log": "tl.log({0})", "log2": "tl.log2({0})",
    "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "sigmoid": "tl.sigmoid({0})", "erf": "tl.erf({0})", "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}",
    "ge": "{0} >= {1}", "and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}", "not": "{0} == 0",
    "bitnot": "~{0}", "where": "tl.where({0}, {1}, {2})",
}

# Combine functions used by tl.reduce; emitted into every kernel file that needs them.
COMBINE_HELPERS = {
    "_max_combine": "@triton.jit\ndef _max_combine(a, b):\n    return " + _EAGER_MAX.format("a", "b") + "\n",
    "_min_combine": "@triton.jit\ndef _min_combine(a, b):\n    return " + _EAGER_MIN.format("a", "b") + "\n",
    "_max_last_combine": "@triton.jit\ndef _max_last_combine(a, b):\n    return " + _EAGER_MAX.format("b", "a") + "\n",
    "_min_last_combine": "@triton.jit\ndef _min_last_combine(a, b):\n    return " + _EAGER_MIN.format("b", "a") + "\n",
    "_prod_combine": "@triton.jit\ndef _prod_combine(a, b):\n    return a * b\n",
}


@dataclasses.dataclass
class LaunchConfig:
    xblock: int
    rblock: int = 1
    persistent: bool = True


@dataclasses.dataclass
class KernelSource:
    name: str
    source: str
    params: list  # (param name, buffer name) for pointers, in order
    signature: dict  # param -> Triton type ("*fp32", "i32", "constexpr")
    helpers: set
    config: LaunchConfig
    xnumel: int
    rnumel: int


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def choose_config(group: FusedGroup, interpret: bool, persistent_limit: int) -> LaunchConfig:
    """Simple launch heuristics. The interpreter pays per program, so it gets large blocks."""
    if group.anchor is None:
        cap = 16384 if interpret else 1024
        return LaunchConfig(min(next_pow2(group.numel), cap))
    rnumel = group.rnumel
    if next_pow2(rnumel) <= persistent_limit:
        rblock = next_pow2(rnumel)
        budget = 65536 if interpret else 4096
        return LaunchConfig(max(1, min(next_pow2(group.xnumel), budget // rblock)), rblock, True)
    rblock = max(1, min(persistent_limit, 4096 if interpret else 1024))
    xblock = max(1, min(next_pow2(group.xnumel), (16384 if interpret else 64) // rblock))
    return LaunchConfig(xblock, rblock, False)


def _is_minus_zero(value) -> bool:
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


# NOTE [Float64 literals]: Triton 3.8 (the Python 3.13 environment) types a float literal compared with a float64
# block as float32: `d < 16777217.0` compared with 16777216.0 (False for d = 16777216, eager True; `clamp(min=s)`
# of a float64 default kept 16777216), while its arithmetic kept the literal whole. A float64 literal that
# float32 cannot hold is emitted as a float64 scalar, `tl.full([], 16777217.0, tl.float64)`.
def _inexact_in_float32(value) -> bool:
    if not isinstance(value, float) or not math.isfinite(value):
        return False
    try:
        return struct.unpack("f", struct.pack("f", value))[0] != value
    except OverflowError:  # beyond float32's range
        return True


def literal(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return f"({value!r})" if value < 0 else repr(value)
    return f"({value})" if value < 0 else str(value)


class Scope:
    """A block of generated lines with its own CSE table; inner scopes see outer variables."""

    def __init__(self, parent: "Scope | None" = None, indent: int = 1):
        self.parent, self.indent = parent, indent
        self.lines: list[str] = []
        self.cache: dict = {}

    def lookup(self, key):
        scope = self
        while scope is not None:
            if key in scope.cache:
                return scope.cache[key]
            scope = scope.parent
        return None

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)


class KernelWriter:
    def __init__(self, group: FusedGroup, buffers: dict, config: LaunchConfig, need_int64: bool):
        self.group, self.buffers, self.config = group, buffers, config
        self.members = group.members
        self.need_int64 = need_int64
        self.params: dict = {}  # buffer name -> param name (loads: in_ptrN)
        self.store_params: dict = {}  # stored node -> param name (out_ptrN)
        self.reduction_vars: dict = {}
        self.helpers: set = set()
        self._counter = 0
        self.outer = Scope()

    # -- values ---------------------------------------------------------------------------------

    def new_var(self, scope: Scope, key, text: str) -> str:
        """A variable holding `text`; reuses an equal one visible from `scope` (key None: never)."""
        found = scope.lookup(key) if key is not None else None
        if found is not None:
            return found
        name = f"tmp{self._counter}"
        self._counter += 1
        scope.line(f"{name} = {text}")
        if key is not None:
            scope.cache[key] = name
        return name

    def emit(self, value, env: dict, scope: Scope) -> str:
        if isinstance(value, Scalar):
            if _is_minus_zero(value.value) and value.dtype is not None and value.dtype.is_floating_point:
                # a -0.0 made at run time: Triton 3.8's interpreter turned the literal -0.0 into +0.0
                if value.dtype == torch.bfloat16 and _interpreting():  # NOTE [bfloat16 literals in the interpreter]
                    text = cast_text("(-tl.full([], 0.0, tl.float32))", value.dtype)
                else:
                    text = f"(-tl.full([], 0.0, {TL_DTYPES[value.dtype]}))"
                return self.new_var(scope, ("op", text), text)
            if value.dtype == torch.float64 and _inexact_in_float32(value.value):  # NOTE [Float64 literals]
                return f"tl.full([], {literal(value.value)}, tl.float64)"
            return literal(value.value)
        if isinstance(value, Load):
            return self.emit_load(value, env, scope)
        args = [self.emit(a, env, scope) for a in value.args]
        if value.name == "to":
            source = args[0]
            if value.args[0].dtype == torch.bfloat16 and _interpreting() and not _is_literal(source):
                # NOTE [bfloat16 widening in the interpreter]
                source = self.new_var(scope, ("op", f"widen {source}"), _widened_bfloat16(source))
                if value.dtype == torch.float32:
                    return source
            if value.dtype == torch.bool:
                text = f"{source} != 0"
            else:
                text = cast_text(source, value.dtype)
        elif value.name in ("maximum", "minimum"):
            floating = value.dtype.is_floating_point
            text = (_EAGER_MAX if value.name == "maximum" else _EAGER_MIN) if floating else f"tl.{value.name}({{0}}, {{1}})"
            text = text.format(*args)
        else:
            text = OPS[value.name].format(*args)
        return self.new_var(scope, ("op", text), text)

    def emit_load(self, load: Load, env: dict, scope: Scope) -> str:
        index = [ir.substitute(e, env) for e in load.index]
        member = self.members.get(load.buffer)
        if isinstance(member, ReductionNode):
            return self.reduction_vars[member.name]
        if member is not None:  # inline the producer at this index
            member_env = {f"i{k}": c for k, c in enumerate(index)}
            target = self.outer if space_of(member, self.group.anchor) == "x" and self.group.anchor else scope
            return self.emit(member.body, member_env, target)
        buf = self.buffers[load.buffer]
        offset = ir.add(*(ir.mul(i, s) for i, s in zip(index, buf.strides)))
        ptr = self.params.setdefault(load.buffer, f"in_ptr{len(self.params)}")
        text = f"tl.load({ptr} + ({ir.render(offset)}){self.mask_arg(offset)})"
        return self.new_var(scope, ("load", text), text)

    def mask_arg(self, offset) -> str:
        names = ir.variables(offset)
        if "rindex" in names:
            return ", xmask & rmask, other=0"
        if "xindex" in names:
            return ", xmask, other=0"
        return ""

    # -- structure ------------------------------------------------------------------------------

    def generate(self, name: str) -> KernelSource:
        body = self.reduction_body() if self.group.anchor else self.pointwise_body()
        return self.assemble(name, body)

    def pointwise_body(self) -> list:
        scope = self.outer
        for node_name in self.group.stores:
            self.store(self.members[node_name], scope, "[XBLOCK]")
        return scope.lines

    def reduction_body(self) -> list:
        persistent = self.config.persistent
        if persistent:
            self.outer.line("rindex = rbase")
            self.outer.line("rmask = rindex < rnumel")
        for node in self.group.nodes:
            if isinstance(node, ReductionNode):
                self.reduction(node, persistent)
        xr = [n for n in self.group.stores if space_of(self.members[n], self.group.anchor) == "xr"]
        if xr:
            scope = self.outer if persistent else self.open_loop()
            for node_name in xr:
                self.store(self.members[node_name], scope, "[XBLOCK, RBLOCK]")
            if not persistent:
                self.close_loop(scope)
        for node_name in self.group.stores:
            if space_of(self.members[node_name], self.group.anchor) != "xr":
                self.store(self.members[node_name], self.outer, "[XBLOCK, 1]")
        return self.outer.lines

    def open_loop(self) -> Scope:
        """A loop over the row; its lines join the outer scope in close_loop, after anything that
        was hoisted to the outer scope while the loop body was generated."""
        loop = Scope(self.outer, 2)
        loop.line("rindex = roffset + rbase")
        loop.line("rmask = rindex < rnumel")
        return loop

    def close_loop(self, loop: Scope) -> None:
        self.outer.line("for roffset in range(0, rnumel, RBLOCK):")
        self.outer.lines += loop.lines

    def store(self, node, scope: Scope, block: str) -> None:
        env = node_env(node, self.group)
        if isinstance(node, ReductionNode):
            value, coords = self.reduction_vars[node.name], natural_coords(node, self.group)
        else:
            value, coords = self.emit(node.body, env, scope), [env[f"i{k}"] for k in range(len(node.shape))]
        if not value.startswith("tmp") and node.dtype == torch.bfloat16 and _interpreting():
            value = cast_text(f"tl.full({block}, {value}, tl.float32)", node.dtype)  # NOTE [bfloat16 literals in
        elif not value.startswith("tmp"):  # the interpreter]
            value = f"tl.full({block}, {value}, {TL_DTYPES[node.dtype]})"
        offset = ir.linearize(coords, node.shape)
        rendered = ir.render(offset)
        if not ir.variables(offset):  # one element: still store through a block of pointers
            rendered = f"{rendered} + tl.zeros({block}, tl.int32)"
            mask = ", xmask"
        else:
            mask = self.mask_arg(offset).replace(", other=0", "")
        target = self.group.inplace.get(node.name)
        ptr = self.params.setdefault(target, f"in_ptr{len(self.params)}") if target else \
            self.store_params.setdefault(node.name, f"out_ptr{len(self.store_params)}")
        scope.line(f"tl.store({ptr} + ({rendered}), {value}{mask})")

    def reduction(self, node: ReductionNode, persistent: bool) -> None:
        acc_dtype = node.body.dtype
        init = _identity(node.reduce_type, acc_dtype)
        tl_dtype = TL_DTYPES[acc_dtype]
        env = node_env(node, self.group)
        if persistent:
            value = self.emit(node.body, env, self.outer)
            masked = self.new_var(self.outer, None, f"tl.where(xmask & rmask, {value}, {init})")
            result = self.finish(node, masked, "rindex", init)
        else:
            acc = f"acc{len(self.reduction_vars)}"
            self.outer.line(f"{acc} = tl.full([XBLOCK, RBLOCK], {init}, {tl_dtype})")
            arg = node.reduce_type.startswith("arg")
            if arg:
                self.outer.line(f"{acc}_index = tl.full([XBLOCK, RBLOCK], {_BIG_INDEX}, tl.int64)")
            loop = self.open_loop()
            value = self.emit(node.body, env, loop)
            masked = self.new_var(loop, None, f"tl.where(xmask & rmask, {value}, {init})")
            if arg:
                better = ">" if node.reduce_type == "argmax" else "<"
                # NOTE [NaN in arg reductions]: the first NaN wins, as in eager
                first_nan = f" | (({masked} != {masked}) & ({acc} == {acc}))" if acc_dtype.is_floating_point else ""
                loop.line(f"take = xmask & rmask & (({masked} {better} {acc}) | ({acc}_index == {_BIG_INDEX}){first_nan})")
                loop.line(f"{acc} = tl.where(take, {masked}, {acc})")
                loop.line(f"{acc}_index = tl.where(take, rindex.to(tl.int64), {acc}_index)")
            else:
                loop.line(f"{acc} = {self.combine(node.reduce_type, acc_dtype, acc, masked)}")
            self.close_loop(loop)
            result = self.finish(node, acc, f"{acc}_index" if arg else "rindex", init)
        if node.dtype != acc_dtype:
            cast = f"{result} != 0" if node.dtype == torch.bool else cast_text(result, node.dtype)
            result = self.new_var(self.outer, None, cast)
        self.reduction_vars[node.name] = result

    def combine(self, kind: str, dtype: torch.dtype, a: str, b: str) -> str:
        if kind == "sum":
            return f"{a} + {b}"
        if kind == "prod":
            return f"{a} * {b}"
        base = kind.split("_")[0]
        if dtype.is_floating_point:
            text = _EAGER_MAX if base == "max" else _EAGER_MIN
            return text.format(b, a) if kind.endswith("_last") else text.format(a, b)
        return f"tl.{'maximum' if base == 'max' else 'minimum'}({a}, {b})"

    def finish(self, node: ReductionNode, values: str, index: str, init: str) -> str:
        """The per-row result of reducing `values` ([XBLOCK, RBLOCK]) along axis 1."""
        kind, floating = node.reduce_type, node.body.dtype.is_floating_point
        if kind == "sum":
            text = f"tl.sum({values}, 1)[:, None]"
        elif kind == "prod" or (kind in _MAX_MIN and floating):
            helper = f"_{kind}_combine"
            self.helpers.add(helper)
            text = f"tl.reduce({values}, 1, {helper})[:, None]"
        elif kind in _MAX_MIN:
            text = f"tl.{kind.split('_')[0]}({values}, 1)[:, None]"
        else:
            best, matches = self._arg_best(kind, values, floating)
            candidates = f"tl.where(xmask & rmask & ({matches}), {index}, {_BIG_INDEX})" if index == "rindex" \
                else f"tl.where({matches}, {index}, {_BIG_INDEX})"
            text = f"tl.min({candidates}, 1)[:, None]"
        return self.new_var(self.outer, None, text)

    def _arg_best(self, kind: str, values: str, floating: bool) -> tuple[str, str]:
        """The row's best value and the lanes that hold it. NOTE [NaN in arg reductions]: eager's
        argmax/argmin return the first NaN's index, so for floats the best is NaN-propagating and a NaN
        lane matches a NaN best (tl.max ignores NaN, and NaN == NaN is false)."""
        if not floating:
            best = self.new_var(self.outer, None, f"tl.{'max' if kind == 'argmax' else 'min'}({values}, 1)[:, None]")
            return best, f"{values} == {best}"
        helper = "_max_combine" if kind == "argmax" else "_min_combine"
        self.helpers.add(helper)
        best = self.new_var(self.outer, None, f"tl.reduce({values}, 1, {helper})[:, None]")
        return best, f"({values} == {best}) | (({values} != {values}) & ({best} != {best}))"

    def assemble(self, name: str, body: list) -> KernelSource:
        pointers = [(p, b) for b, p in self.params.items()] + [(p, b) for b, p in self.store_params.items()]
        reduction = self.group.anchor is not None
        scalars = ["xnumel", "rnumel"] if reduction else ["xnumel"]
        blocks = ["XBLOCK", "RBLOCK"] if reduction else ["XBLOCK"]
        params = [p for p, _ in pointers] + scalars + [f"{b}: tl.constexpr" for b in blocks]
        pid = "tl.program_id(0).to(tl.int64)" if self.need_int64 else "tl.program_id(0)"
        head = ["@triton.jit", f"def {name}({', '.join(params)}):",
                f"    xoffset = {pid} * XBLOCK"]
        if reduction:
            head += ["    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "    xmask = xindex < xnumel",
                     "    rbase = tl.arange(0, RBLOCK)[None, :]"]
        else:
            head += ["    xindex = xoffset + tl.arange(0, XBLOCK)", "    xmask = xindex < xnumel"]
        index_type = "i64" if self.need_int64 else "i32"
        signature = {p: POINTER_TYPES[self.buffers[b].dtype] for p, b in pointers}
        signature.update({s: index_type for s in scalars})
        signature.update({b: "constexpr" for b in blocks})
        source = "\n".join(head + body) + "\n"
        return KernelSource(name, source, pointers, signature, set(self.helpers), self.config,
                            self.group.xnumel, self.group.rnumel)


_BIG_INDEX = 2 ** 31 - 1  # 'no index yet' marker; rows never have 2**31 elements
_MAX_MIN = ("max", "min", "max_last", "min_last")


def _identity(kind: str, dtype: torch.dtype) -> str:
    if kind == "sum":
        return "0"
    if kind == "prod":
        return "1"
    is_max = kind in ("max", "argmax", "max_last")
    if dtype.is_floating_point:
        return 'float("-inf")' if is_max else 'float("inf")'
    info = torch.iinfo(dtype)
    return literal(info.min if is_max else info.max)


def needs_int64(group: FusedGroup, buffers: dict) -> bool:
    """Whether offsets in this kernel can exceed int32."""
    limit = 2 ** 31 - 1
    sizes = [group.xnumel * group.rnumel]
    for node in group.nodes:
        for name in ir.reads(node) + [node.name]:
            buf = buffers[name]
            extent = 1 + sum((s - 1) * st for s, st in zip(buf.shape, buf.strides) if s > 0)
            sizes.append(extent)
    return max(sizes) >= limit


def generate_kernel(group: FusedGroup, buffers: dict, config: LaunchConfig) -> KernelSource:
    writer = KernelWriter(group, buffers, config, needs_int64(group, buffers))
    return writer.generate(group.name)
