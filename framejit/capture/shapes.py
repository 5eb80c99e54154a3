"""Symbolic shapes: which tensor dimensions are symbolic, their fake tensors, and their guards.

NOTE [Symbolic shapes]: every trace has one `ShapeEnv` (torch.fx.experimental.symbolic_shapes) in its
FakeTensorMode. A tensor input whose dimensions are dynamic (`dynamic_dims`) gets a fake tensor whose
sizes are symbols of that env (`s0`, ...; sizes 0 and 1 stay specialised, as torch does: broadcasting
and contiguity differ for them); every other input is static, exactly as before. Ops on fake tensors then
compute symbolic sizes, and whatever the trace decides from a symbol (a broadcast, `if n > 1`, `int(n)`,
`range(n)`) is recorded by the env as a guard on a relation, or as a replacement (`s1 -> s0`, `s0 -> 5`).

Sizes read by the Python code (`x.shape`, `x.size(1)`, `x.numel()`) are `SymNodeValue`s: the graph node
that computes them (a `size` call on the input, arithmetic on those) plus the SymInt. Arithmetic and
comparisons on them stay symbolic (comparisons.py); any other use specialises them (`as_constant`), which
goes through the env and is guarded. So graphs see sizes as values computed from their inputs (torch's
`sym_size` pattern): their placeholders are the same tensors as before (example inputs stay real tensors),
with `meta["val"]` fake tensors carrying the symbols.

Guards (`shape_guards`) are produced after the trace from the env's state, as lines of the same guard
function: for each symbolic input, each size, stride and storage offset either defines its symbol (its
first occurrence: `x.size(0)` *is* s0) or is checked against the simplified expression the trace relied
on (`y.size(0) == x.size(0)` after a broadcast unified them, `x.size(1) == 4` after a specialisation,
`x.stride(0) == x.size(1)`); then every relation the env recorded (`(x.size(0) % 2) == 0`), then the
range of every symbol (`x.size(0) >= 2`: the entry never serves size 0 or 1). If a guard would need a
symbol that no input defines, the trace's inputs are instead pinned to their concrete sizes (always
sound: the graph is valid for them).

Which dimensions are dynamic: `compile(dynamic=True)` all of them; `dynamic=False` none except those
marked; `dynamic=None` (NOTE [Automatic dynamic] in hook.py) those whose size changed between calls of the
frame, plus those marked on the tensor itself: `framejit.mark_dynamic` / `maybe_mark_dynamic` /
`mark_static` set the same attributes as torch's `torch._dynamo.mark_dynamic` (`_dynamo_dynamic_indices`,
`_dynamo_weak_dynamic_indices`, `_dynamo_static_indices`, `_dynamo_dynamic_range`), so markers set by
library code for torch.compile are honoured too. Each entry guards which dimensions a tensor marks strictly
(torch's DYNAMIC_INDICES guard) and a trace that breaks a marker raises (NOTE [Broken mark_dynamic contracts]).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
import weakref
from typing import Any

import torch

from ..guards import COST_TENSOR, Guard
from .breaks import FramejitError


def _shape_source_class():
    from torch._guards import Source  # torch's base class of sources (not TorchDynamo's machinery)

    @dataclasses.dataclass(frozen=True)
    class ShapeSource(Source):
        """What torch's ShapeEnv needs of a source: a name for its logs and symbol table. `text` is the
        guard expression of the input (a parameter name, `x.weight`, ...). framejit prints its own guards
        from these names (shape_guards); the env's own guard production is never used."""
        text: str

        @property
        def _name_template(self) -> str:  # torch's Source.name (a cached property) is this text
            return self.text

        def is_ephemeral(self) -> bool:
            return False

        def guard_source(self):
            from torch._guards import GuardSource
            return GuardSource.LOCAL

    return ShapeSource


_SOURCE_CLASS: list = []


def ShapeSource(text: str):
    if not _SOURCE_CLASS:
        _SOURCE_CLASS.append(_shape_source_class())
    return _SOURCE_CLASS[0](text)


@dataclasses.dataclass(frozen=True)
class DimRange:
    """A range set by `framejit.mark_dynamic(t, dim, min=, max=)`, read like torch's own markers."""
    dim: int
    min: int | None
    max: int | None


# NOTE [Where a size was specialised]: torch's ShapeEnv records with each guard, replacement and narrowed
# range the place that caused it (an `SLoc`); its user half comes from TorchDynamo's tracing context, which
# framejit does not have. The env framejit makes asks the trace instead (`out.location()`: the user's
# `file:line: source` of the instruction being traced), so a guard on a relation or a size specialised to
# a constant names the user line in the guard function, the `recompiles` log and a broken mark_dynamic.
_ENV_CLASS: list = []


def _shape_env_class():
    from torch._guards import SLoc
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    class TracingShapeEnv(ShapeEnv):
        location = staticmethod(lambda: "")  # set to the trace's OutputGraph.location

        def _get_sloc(self, framework_loc: str | None = None) -> SLoc:
            return SLoc(framework_loc, self.location() or None)

    return TracingShapeEnv


def new_shape_env(out):
    """The ShapeEnv of the trace `out` (NOTE [Where a size was specialised]: it asks `out.location()`,
    through a weak reference: an env copied with the graph's metadata must not copy the trace)."""
    if not _ENV_CLASS:
        _ENV_CLASS.append(_shape_env_class())
    # no duck shaping: equal sizes get distinct symbols, unified only where an op needs them equal (fewer
    # recompiles); no unbacked symbols (`.item()`, `nonzero` stay data-dependent breaks, as before)
    env = _ENV_CLASS[0](duck_shape=False, allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)
    trace = weakref.ref(out)
    env.location = lambda: trace().location() if trace() is not None else ""
    return env


def user_location(sloc) -> str:
    """The user's `file:line: source` an env's SLoc names (NOTE [Where a size was specialised]), or ""."""
    return (sloc.maybe_user_loc or "") if sloc is not None else ""


def dynamic_dims(out, tensor: torch.Tensor, description: str) -> dict[int, tuple[int | None, int | None]]:
    """The dimensions of `tensor` (reached as `description`) that are symbolic in this trace, with the
    (min, max) a marker gave them."""
    policy = out.dynamic
    static = set(getattr(tensor, "_dynamo_static_indices", ()) or ())
    dims: dict[int, tuple[int | None, int | None]] = {}
    if policy is True and not isinstance(tensor, torch.nn.Parameter):  # parameters stay static, as in torch
        dims.update((d, (None, None)) for d in range(tensor.dim()))
    elif policy is None:
        marked = out.dynamic_dims.get(description, ())
        if LAYOUT in marked:  # NOTE [Dynamic layouts]: every dim, so that strides and offset get symbols
            marked = range(tensor.dim())
        dims.update((d, (None, None)) for d in marked if 0 <= d < tensor.dim())  # not LAYOUT/OFFSET
    for attr in ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices"):
        dims.update((d, (None, None)) for d in (getattr(tensor, attr, ()) or ()) if d < tensor.dim())
    for d, bounds in marked_ranges(tensor).items():
        if d in dims:
            dims[d] = bounds
    return {d: r for d, r in dims.items() if d not in static}


def marked_ranges(tensor: torch.Tensor) -> dict[int, tuple[int | None, int | None]]:
    """The bounds of each dimension marked with a range. A dimension marked twice (framejit's marker without
    bounds, then torch's with them: NOTE [Markers torch.compile reads] in api.py) gets the intersection."""
    ranges: dict[int, tuple[int | None, int | None]] = {}
    for r in getattr(tensor, "_dynamo_dynamic_range", ()) or ():
        d, low, high = getattr(r, "dim", None), getattr(r, "min", None), getattr(r, "max", None)
        old_low, old_high = ranges.get(d, (None, None))
        low = old_low if low is None else low if old_low is None else max(low, old_low)
        high = old_high if high is None else high if old_high is None else min(high, old_high)
        ranges[d] = (low, high)
    return ranges


def symbolic_fake(out, tensor: torch.Tensor, expr: str, dims: dict) -> torch.Tensor:
    """A fake tensor for `tensor` whose dimensions `dims` are symbols of the trace's ShapeEnv."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
    dims = {d: (low, high) for d, (low, high) in dims.items()  # a size outside a marked range is static
            if (low is None or tensor.size(d) >= low) and (high is None or tensor.size(d) <= high)}
    context = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(tensor.dim())])
    fake = out.fake_mode.from_tensor(tensor, symbolic_context=context, source=ShapeSource(expr))
    env = out.fake_mode.shape_env
    for d, (low, high) in dims.items():
        size = fake.size(d)
        if isinstance(size, torch.SymInt) and (low is not None or high is not None):
            from torch.utils._sympy.value_ranges import ValueRanges
            current = env.var_to_range[size.node.expr]
            lower = max(current.lower, low) if low is not None else current.lower
            upper = min(current.upper, high) if high is not None else current.upper
            env._update_var_to_range(size.node.expr, ValueRanges(lower, upper))
    return fake


def has_symbols(env) -> bool:
    """The trace's env has made a symbol (a symbolic input): its fake ops then run under torch's Python
    dispatcher, so composite ops decompose with SymInts (in C++ some read `int(size)`, a specialisation)."""
    if env is None:
        return False
    values = env.__dict__.get("backed_var_to_val")  # torch >= 2.13 (var_to_val is its deprecated alias)
    return bool(values if values is not None else env.__dict__.get("var_to_val"))


def is_symbolic(fake: torch.Tensor) -> bool:
    """Any size, stride or the storage offset is a symbol (a size-1 row of a buffer: only its layout)."""
    return any(isinstance(s, torch.SymInt) for s in (*fake.shape, *fake.stride(), fake.storage_offset()))


# NOTE [Dynamic layouts]: a tensor carried into a resume function may keep its sizes and change its strides
# or storage offset on every call: a row `e` of `nonzero()`'s (k, 1) result, stride (k,) and offset i, in a
# loop that breaks on every iteration. When a resume function recompiles on such a guard, the hook marks
# the tensor LAYOUT in the frame's dynamic dims; later traces give it symbolic sizes (a size 1 stays 1),
# strides and offset, which the shape env's guards check instead of the exact values. A user's frame marks
# the changed strides alone (NOTE [Changing strides of arguments]).
LAYOUT = -1


# NOTE [Changing offsets of scalar views]: a 0-dim tensor that is an element of a larger one (`for t in
# scheduler.timesteps: unet(latents, t)`, every diffusers sampling loop; `steps[i]`) has the same sizes and
# strides on every call and another storage offset, which its tensor guard checks: a compiled UNet traced
# once per timestep, and ran eagerly from the 9th (stock torch.compile, which does not guard offsets: 1
# graph). torch makes a tensor's offset symbolic only when one of its sizes is, which a 0-dim tensor has
# none of. Once its offset changed (NOTE [Automatic dynamic] marks it LAYOUT, in any frame), the tensor's
# fake is a 0-dim view of its static fake at a symbolic offset: a symbol of the env like a size (the guard
# checks the relations the trace relied on, `x.storage_offset()` read in the code specialises it through the
# env), its sizes and strides stay static. Offsets 0 and 1 are not specialised (as torch's unspecialised
# ints, NOTE [Dynamic ints]): the miss that made it symbolic is mostly the step from timesteps[0] to
# timesteps[1], and a symbol specialised to 1 recompiled again at timesteps[2] (diffusers' Euler step
# compiled 9 graphs over 4 timesteps, stock 5).
#
# NOTE [Changing offsets of rows]: the same for a tensor of any rank whose storage offset alone changed
# (`inner(feats[i], sizes[i])` for each image of a VLM batch, a helper that breaks on `sz.tolist()`: its
# rows have the sizes and strides of row 0 at offsets 0, 16, 32, ...). The hook marks it OFFSET, not LAYOUT
# (NOTE [Dynamic layouts] would make its sizes symbolic too): sizes and strides stay static and guarded,
# the offset is an unspecialised symbol (0 and 1 included: rows 0 and 1 share the entry). A trace that
# reads the offset (`x.storage_offset()`, `x.data_ptr()` specialises, as_strided keeps it symbolic) is
# guarded through the env; backends get the real tensors and read their offsets per call (NOTE [Storage
# offsets read by the graph] in backends/onnxrt/compiler.py). One recompile per helper, not per row. A
# tensor whose sizes are symbolic too keeps this offset symbol (torch's own specialises offset 0).
OFFSET = -2


# NOTE [Changing strides of arguments]: a user's frame called with views whose strides change and whose
# sizes do not (`cell(xs[:, t], h)` over sequences of growing length: x[:, t] of a (B, T, H) tensor has
# strides (T*H, 1) and the sizes (B, H) of every length) was traced once per stride, and ran eagerly from
# the recompile limit on (stock torch.compile: 2 graphs). As torch's automatic dynamic strides do, the hook
# marks each dimension whose stride alone changed, STRIDE - d (a tensor whose sizes changed too, or its
# rank, is not marked: its sizes become symbolic and torch infers its strides from them); later traces
# give those strides symbols of the env, every size and every other stride stays static (torch's
# INFER_STRIDE: a stride that is a product of a size and an inner stride is that expression, others static)
# and the offset is a symbol too (NOTE [Offsets that change with strides]). What the trace relies on is
# guarded through the env like sizes: `.view()`, `.is_contiguous()`, a reshape that copies or not, eager's
# output layouts (torch's meta functions decide them from the symbols' hints and record the relations
# used: `x.stride(0) == 4`), and the range `x.stride(0) >= 2` (0 and 1 are specialised). The resume
# functions of NOTE [Dynamic layouts] keep their LAYOUT marking (sizes symbolic too).
STRIDE = -3

# NOTE [Offsets that change with strides]: a tensor guard checks strides before the offset, so a miss where both
# changed names the strides only: a sliding-window cache's keys `full[:, :, -w:, :]` (`full` a new `torch.cat`
# each step: strides and offset follow its length). The strides got symbols, the offset stayed guarded, and
# the first decode step of a longer prompt (offset 128, not 16) missed again on the offset alone
# (ModernBertDecoder's generate: a graph more than stock, which guards no offset). A tensor whose strides
# are marked has a symbolic offset too (as NOTE [Changing offsets of rows]: unspecialised, guarded through
# the env where the trace relies on it): a view whose strides change is a view into a buffer of changing
# size, whose position in it changes as a rule (`xs[:, t]` too: offset t*H).


def layout_marks(kind: str, expected: str, actual: str | None, resume: bool) -> frozenset[int]:
    """The marks for a failed TENSOR_STRIDE or TENSOR_STORAGE_OFFSET guard, `expected` and `actual` the
    texts of the two values (NOTE [Dynamic layouts], NOTE [Changing strides of arguments])."""
    if kind == "TENSOR_STORAGE_OFFSET":
        return frozenset({OFFSET})
    if resume:
        return frozenset({LAYOUT})
    old, new = re.findall(r"-?\d+", expected), re.findall(r"-?\d+", actual or "")
    if len(old) != len(new):
        return frozenset()
    return frozenset(STRIDE - d for d, (a, b) in enumerate(zip(old, new)) if a != b)


def _strided_fake(out, tensor: torch.Tensor, source, strides: list[int]) -> torch.Tensor:
    """A fake of `tensor` with static sizes whose strides `strides` are symbols (NOTE [Changing strides of
    arguments])."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
    context = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.STATIC] * tensor.dim(),
        dynamic_strides=[DimDynamic.DYNAMIC if d in strides else DimDynamic.INFER_STRIDE for d in range(tensor.dim())])
    return out.fake_mode.from_tensor(tensor, symbolic_context=context, source=ShapeSource(source.expr(out.names)))


def offset_view_fake(out, tensor: torch.Tensor, source, fake: torch.Tensor | None) -> torch.Tensor | None:
    """`fake` (None: static sizes and strides) as a view at a symbolic storage offset where the hook marked
    the offset, else `fake` (NOTE [Changing offsets of scalar views], NOTE [Changing offsets of rows]);
    with static sizes, the strides the hook marked are symbols (NOTE [Changing strides of arguments])."""
    marked = out.dynamic_dims.get(source.describe(), ())
    strides = [d for d in range(tensor.dim()) if STRIDE - d in marked]
    if fake is None and strides and out.dynamic is None:
        fake = _strided_fake(out, tensor, source, strides)
    if OFFSET not in marked and not (LAYOUT in marked and tensor.dim() == 0) and not (strides and out.dynamic is None):
        return fake  # NOTE [Offsets that change with strides]: marked strides give the offset a symbol too
    offset = symbolic_int(out, tensor.storage_offset(), f"{source.expr(out.names)}.storage_offset()")
    if not isinstance(offset, torch.SymInt):
        return fake
    base = fake if fake is not None else out.fake_mode.from_tensor(tensor, static_shapes=True)
    with out.fake_mode:
        return base.as_strided(base.shape, base.stride(), offset)


# NOTE [Dynamic ints]: an int argument or attribute is specialised (guarded by value) until a call misses
# because it changed (NOTE [Automatic dynamic] in hook.py); later traces make it a graph input whose
# placeholder's `meta["val"]` is a SymInt of the env (the backend's example input is the int itself). Its
# arithmetic and comparisons stay symbolic like sizes; a use that needs the value (`range(n)`, `[x] * n`, a
# dict key) specialises it through the env, which guards it (`n == 3`), so such a frame still compiles
# once per value, as before. 0 and 1 are not specialised (unlike sizes; as torch's unspecialised ints): a
# step counter 0, 1, 2, ... compiles twice, not three times. Under compile(dynamic=True) the frame's int
# arguments are symbolic from the first call (torch.compile's unspecialised ints: one compilation for a
# step counter), and an int attribute or global becomes symbolic when it changes, as under dynamic=None.
# A torch.Size argument that changed (`shape = x.shape` carried into a resume function) becomes a tuple of
# such symbolic ints (values/builder.py `_symbolic_size`), not one entry per shape (under dynamic=True a
# torch.Size argument is symbolic from the first call, like an int argument).
def symbolic_int(out, value: int, expr: str):
    """A SymInt of the trace's env standing for a Python int input (NOTE [Dynamic ints]), 0 and 1 included."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    env = out.fake_mode.shape_env
    symbol = env.create_symbol(value, ShapeSource(expr), dynamic_dim=DimDynamic.DYNAMIC, positive=None,
                               do_not_specialize_zero_one=True)  # as torch's unspecialised ints
    if not hasattr(symbol, "name"):  # specialised (an Integer)
        return int(symbol)
    return env.create_symintnode(symbol, hint=value, source=ShapeSource(expr))


# NOTE [Float symbols are not NaN] (review revU HIGH): sympy treats a float symbol as a real number, so the env
# folds `t == t`, `t <= t`, `t >= t` to True and `t != t` to False with no guard: a later NaN (`float(s)` of a
# changing string, a NaN loss passed back in) reused the entry and took the other branch from eager's. A float
# input with a symbol is therefore guarded `not isnan(t)` beside its type; a NaN misses, and the retrace
# gives it no symbol (guarded by value below), so its comparisons are Python's own. Infinities need no such
# guard: every fold of a relation of inputs and finite constants holds for them too (`inf == inf`), and
# arithmetic on the float is the graph's own Python arithmetic, not the env's.
def input_float_symbol(out, value: float, source):
    """The SymFloat of a float input, guarded not NaN (NOTE [Float symbols are not NaN]), or None."""
    e = source.expr(out.names)
    sym = symbolic_float(out, value, e)
    if sym is not None:
        isnan = out.name_of(math.isnan, "isnan")
        out.add_guard("CONSTANT_MATCH", f"not {isnan}({e})", source, expected="a float that is not NaN", actual=e)
    return sym


def symbolic_float(out, value: float, expr: str):
    """A SymFloat of the trace's env standing for a float input (NOTE [Float relations] in values/scalars.py),
    or None for a value that is not finite (kept exact: guarded by value)."""
    if not math.isfinite(value):
        return None
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    env = out.fake_mode.shape_env
    symbol = env.create_unspecified_symbol(value, source=ShapeSource(expr), dynamic_dim=DimDynamic.DYNAMIC)
    return env.create_symfloatnode(symbol, hint=value, source=ShapeSource(expr))


# NOTE [Symbolic divisors are guarded nonzero] (review revU HIGH): the env simplifies `n // n` and `n % n` to 1
# and 0, `n / n` to 1.0, `(n * m) // m` to n, with no guard, so a later n == 0 (a dynamic int, `int(s)` of a
# changing string) reused the entry and returned a value where eager raises ZeroDivisionError. A symbolic
# divisor is therefore guarded `!= 0` through the env (no guard line when the env knows it already, as for
# sizes >= 2); when it is 0 now the env's guard reads `== 0` and the operation runs on the concrete values,
# raising eager's error. Only a value of 0 retraces.
DIVISIONS = (operator.floordiv, operator.mod, operator.truediv)


def guarded_nonzero(sym: Any) -> bool:
    """Whether the symbolic number `sym` is nonzero, the answer guarded by the env."""
    try:
        return bool(sym != 0)
    except Exception:  # noqa: BLE001 - a relation the env cannot decide or guard: the caller specialises
        return False


def divisor_checked(fn: Any, examples: list) -> list:
    """`examples` for `fn(*examples)`; for a division by a symbolic zero, the concrete values, so the
    operation raises eager's ZeroDivisionError (NOTE [Symbolic divisors are guarded nonzero])."""
    if fn in DIVISIONS and len(examples) == 2 and has_sym(examples[1]) and not guarded_nonzero(examples[1]):
        return [concrete(e) for e in examples]
    return examples


def concrete(value: Any) -> Any:
    """`value` with SymInts/SymBools (in tuples, torch.Size) specialised (guarded by the env)."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if type(value) in (tuple, list, torch.Size) and any(has_sym(v) for v in value):
        return type(value)(concrete(v) for v in value)
    return value


def has_sym(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return True
    return type(value) in (tuple, list, torch.Size) and any(has_sym(v) for v in value)


def sym_or_int(sym: Any) -> Any:
    """A SymInt/SymBool whose expression is a constant, as a Python int/bool."""
    if isinstance(sym, (torch.SymInt, torch.SymBool)):
        value = sym.node.maybe_as_bool() if isinstance(sym, torch.SymBool) else sym.node.maybe_as_int()
        if value is not None:
            return value
    return sym


# ---- broken mark_dynamic contracts ------------------------------------------------------------------
# NOTE [Broken mark_dynamic contracts]: `mark_dynamic(t, d)` (framejit's or torch._dynamo's: the strict
# marker, `_dynamo_dynamic_indices`) is a promise that the code serves every size of that dimension. As
# torch.compile does (its ConstraintViolationError), a trace that breaks the promise raises at compile
# time instead of recompiling quietly (`check_marked_dims`, after the trace, before the entry is made):
# - the dimension was specialised to a constant (`if x.size(0) == 4`, `x.view(2, 2, 3)`, a broadcast
#   against a static size), with the user line that did it (NOTE [Where a size was specialised]);
# - its size is outside the `min`/`max` given to mark_dynamic (on the first call, or on a later call that
#   fails the range guard and retraces: torch raises "32 not in range [4, 16]"); a size below 2 is one too
#   (torch 2.13 fails there with an internal AssertionError: framejit raises the same error as above);
# - with a range given, the trace narrowed it (`if x.size(0) > 10` leaves [4, 10] of [4, 16]) or relied
#   on a relation of that size alone that some size in the range breaks (`x.size(0) % 2 == 0`).
# Not violations, as in torch: the weak marker (maybe_mark_dynamic), dynamic=True and automatic dynamic
# dims; sizes 0 and 1 (specialised by rule, not by the code); two marked sizes unified by an op; without a
# range, relations (`x.size(0) > 10`, evenness: a guard, so the entry serves those sizes only).
# The exception is raised by the call that traced (it reaches the user even with fullgraph=False: a
# compile error of the user's contract, not a graph break); nothing is installed, so a later call with the
# contract kept compiles normally.
# The error raised is also torch's ConstraintViolationError, so code written for torch.compile catches it; that
# class lives in torch.fx.experimental.symbolic_shapes, which imports sympy, and a warm process must not
# (tests/backends/test_onnxrt_warm_imports.py). So the class raised, a subclass of both, is made on the first
# violation, when the trace's ShapeEnv has loaded that module anyway.
class ConstraintViolationError(FramejitError):
    """A dimension marked with `mark_dynamic` was specialised or left its range (NOTE [Broken
    mark_dynamic contracts]); what is raised is also a torch ConstraintViolationError."""


@functools.cache
def _raised_class() -> type:
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError as torch_error
    return type("ConstraintViolationError", (ConstraintViolationError, torch_error),
                {"__module__": __name__, "__doc__": ConstraintViolationError.__doc__})


def check_marked_dims(out) -> None:
    """Raise ConstraintViolationError for each strictly marked dimension of a graph input that the trace
    did not keep dynamic over its whole declared range (NOTE [Broken mark_dynamic contracts])."""
    env = out.fake_mode.shape_env
    problems: list[str] = []
    for inp in out.inputs:
        fake = getattr(inp.value, "_fake", None)  # its type only: no read (NOTE [Tensors passed through unread])
        if not isinstance(fake, torch.Tensor) or not isinstance(inp.tensor, torch.Tensor):
            continue
        marked = set(getattr(inp.tensor, "_dynamo_dynamic_indices", ()) or ()) - \
            set(getattr(inp.tensor, "_dynamo_static_indices", ()) or ())
        ranges = marked_ranges(inp.tensor)
        where = inp.source.describe()
        sizes = _arrived_sizes(inp)
        for d in sorted(d for d in marked if d < len(sizes)):
            plain = inp.tensor if type(inp.tensor) is torch.Tensor else inp.tensor.as_subclass(torch.Tensor)
            size = plain.size(d)  # a subclass's own __torch_function__ does not run (eager runs none here)
            problems += _dim_problems(env, f"{where}.size({d})", size, sizes[d],
                                      ranges.get(d, (None, None)))
    if problems:
        raise _raised_class()(
            "Constraints violated! A dimension marked with mark_dynamic must stay dynamic:\n" +
            "\n".join(f"  - {p}" for p in problems) +
            "\nIf the code may specialise it, use maybe_mark_dynamic instead of mark_dynamic, or remove the "
            "marker (or widen its min/max).")


def marker_guards(out) -> list[Guard]:
    """For each tensor input: its strictly marked dimensions are ones this entry keeps symbolic, so a
    tensor marked after an entry was made for it retraces (and is checked) instead of being served by a
    graph that specialised the dimension (torch's DYNAMIC_INDICES guard; NOTE [Broken mark_dynamic
    contracts]). An unmarked tensor passes at the cost of one attribute lookup."""
    env = out.fake_mode.shape_env
    guards = []
    for inp in out.inputs:
        fake = getattr(inp.value, "fake", None)
        if not isinstance(fake, torch.Tensor) or not isinstance(inp.tensor, torch.Tensor):
            continue
        sizes = _arrived_sizes(inp)
        kept = {d for d, size in enumerate(sizes) if isinstance(size, torch.SymInt)
                and not getattr(env.simplify(size.node.expr), "is_number", False)}
        kept |= _marked_by_rule(inp.tensor, sizes)
        e = inp.source.expr(out.names)
        allowed = "{" + ", ".join(map(str, sorted(kept))) + "}"
        check = f"not getattr({e}, '_dynamo_dynamic_indices', None)"  # literals only: the frame cache keeps
        if kept:  # the text; an unmarked tensor (the usual case) stops at the first test
            check += f" or {e}._dynamo_dynamic_indices <= {allowed}"
        guards.append(Guard(check, "DYNAMIC_INDICES",
                            inp.source.describe(), "", f"marked dynamic dims within {sorted(kept)}",
                            f"getattr({e}, '_dynamo_dynamic_indices', None)", COST_TENSOR + 1))
    return guards


def _arrived_sizes(inp) -> tuple:
    """A tensor input's sizes as it arrived (NOTE [Guards describe inputs as they arrived]): SymInts where
    symbolic; a static input's are its real sizes."""
    if inp.layout is not None:
        return inp.layout[0]
    plain = inp.tensor if type(inp.tensor) is torch.Tensor else inp.tensor.as_subclass(torch.Tensor)
    return tuple(plain.shape)


def _marked_by_rule(tensor: torch.Tensor, sizes: tuple) -> set[int]:
    """The strictly marked dims of the traced tensor that are 0 or 1: specialised by rule, which keeps the
    marker's contract, so a marked tensor of that size is served by the entry (torch's DYNAMIC_INDICES
    allows the traced tensor's own marked dims). Without them the entry failed its own input's marker:
    sizes 3, 0, 1, 0, 1 of a marked dim traced 0 and 1 twice each."""
    marked = getattr(tensor, "_dynamo_dynamic_indices", ()) or ()
    return {d for d in marked if d < len(sizes) and isinstance(sizes[d], int) and sizes[d] < 2}


def _dim_problems(env, name: str, size: int, sym: Any, bounds: tuple) -> list[str]:
    low, high = bounds
    if (low is not None and size < low) or (high is not None and size > high):
        return [f"{name} is {size}, not in the range [{low}, {'inf' if high is None else high}] given to "
                f"mark_dynamic"]
    if not isinstance(sym, torch.SymInt) or env is None:
        return []  # a size 0 or 1: specialised by rule (broadcasting), as torch does with a marked 0 or 1
    raw = sym.node._expr  # the input's own symbol (`expr` already applies the env's replacements)
    expr = env.simplify(raw)
    if getattr(expr, "is_number", False):
        at = user_location(env.replacements_slocs.get(raw))
        return [f"{name} was marked dynamic but the code specialised it to the constant {int(expr)}" +
                (f" at {at}" if at else "")]
    if low is None and high is None or not getattr(expr, "is_Symbol", False):
        return []
    return _range_problems(env, name, expr, low, high)


def _range_problems(env, name: str, symbol, low: int | None, high: int | None) -> list[str]:
    """The guards that some size in [low, high] breaks, for a symbol with a declared range."""
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy
    import sympy
    declared = ValueRanges(max(low if low is not None else 2, 2), high if high is not None else sympy.oo)
    text = f"{declared.lower} <= {name} <= {'inf' if high is None else high}"
    problems = []  # the narrowed range first: the guard that narrowed it is then implied
    vr, slocs = env.var_to_range[symbol], env.var_to_range_sloc.get(symbol)
    if vr.lower > declared.lower or vr.upper < declared.upper:
        at = "" if slocs is None else user_location(slocs.lower if vr.lower > declared.lower else slocs.upper)
        return [f"not all values of {name} in the range {text} given to mark_dynamic satisfy the guard "
                f"{vr.lower} <= {name} <= {vr.upper}" + (f" (from {at})" if at else "")]
    for g in env.guards:
        expr = env.simplify(g.expr)
        if expr.free_symbols != {symbol}:
            continue
        if bound_sympy(expr, {symbol: declared}) != ValueRanges(sympy.true, sympy.true):
            at = user_location(g.sloc)
            problems.append(f"not all values of {name} in the range {text} given to mark_dynamic satisfy the "
                            f"guard {str(expr).replace(str(symbol), name)}" + (f" (from {at})" if at else ""))
    return problems


# ---- guards -----------------------------------------------------------------------------------------
class _Unbound(Exception):
    pass


def shape_guards(out) -> list[Guard]:
    """The guard lines for the symbolic inputs of `out` (NOTE [Symbolic shapes])."""
    env = out.fake_mode.shape_env
    inputs = [(i, _occurrences(out, i)) for i in out.inputs]
    inputs = [(i, occ) for i, occ in inputs if occ]
    inputs += [(root, [(text, sym, "value")]) for root, text, sym in out.computed_floats]  # NOTE [Ints of
    # dynamic floats]: a computed float's symbol, printed as the code's own computation of it
    if env is None or not inputs:
        return []
    try:
        return _relation_guards(out, env, inputs)
    except _Unbound:
        pass
    based = [(i, occ + _base_occurrences(out, i)) for i, occ in inputs]  # NOTE [Symbols of a view's base]
    try:
        return _relation_guards(out, env, based) + _static_base_guards(out, based)
    except _Unbound:
        return _pinned_guards(out, inputs)


def arrived_layout(fake: torch.Tensor) -> tuple:
    """Sizes, strides and offset of a symbolic input's fake as wrapped, and its base's (or None): NOTE [Guards
    describe inputs as they arrived], NOTE [Symbols of a view's base]."""
    base = fake._base
    based = None if base is None else (tuple(base.shape), tuple(base.stride()), base.storage_offset())
    return tuple(fake.shape), tuple(fake.stride()), fake.storage_offset(), based


# NOTE [Symbols of a view's base]: the fake of an input that is a view (`torch.randn(3, n).t()`,
# `torch.randn(n + 2, 3)[1:-1]`) is made as a view of a fake base whose sizes are symbols of their own (torch's
# MetaConverter), and its storage's size is written with them. An in-place metadata op of the view
# (`x.unsqueeze_(0)`, `x.t_()`, `as_strided_`) checks that the new view fits the storage, a guard such as
# `12*s93 <= 4*s29*s68` whose s29, s68 no occurrence of the input names. Such guards used to fall back to
# pinning every size by value: one entry per size, then eager at the recompile limit (review revK MED-1;
# stock 2 compiles). The base's sizes, strides and offset are then bound to `x._base.size(d)` etc., as torch
# gives them a source; a later call whose x is not a view fails the guard (it raises) and recompiles. They are
# bound only when a guard needs them, so a view input's entry does not otherwise check its base.
def _base_occurrences(out, inp) -> list[tuple[str, Any, str]]:
    if inp.layout is None or inp.layout[3] is None or type(inp.tensor) is not torch.Tensor:
        return []  # a subclass's base: read through its own __torch_function__, left pinned
    sizes, strides, offset = inp.layout[3]
    e = inp.source.expr(out.names) + "._base"
    if type(inp.tensor._base) is not torch.Tensor:  # NOTE [Guards read subclass tensors as Tensors]
        # a plain view of a subclass tensor (`w.t()` of a subclass whose __torch_function__ returns plain
        # tensors): the base's sizes are read as a Tensor's, never through the user's __torch_function__
        # (review revP MED-1: 8 calls of it on every hit)
        from .tensor_subclasses import _as_tensor
        e = f"{out.name_of(_as_tensor, 'as_tensor')}({e})"
    occ = [(f"{e}.size({d})", s, f"size of dim {d} of the base") for d, s in enumerate(sizes)]
    occ += [(f"{e}.stride({d})", s, f"stride of dim {d} of the base") for d, s in enumerate(strides)]
    occ.append((f"{e}.storage_offset()", offset, "storage offset of the base"))
    return occ


def _static_base_guards(out, inputs) -> list[Guard]:
    """A base's static sizes: no tensor guard checks them (NOTE [Symbols of a view's base])."""
    return [_guard(out, f"{text} == {int(sym)}", inp.source.describe(), f"{what} == {int(sym)}", text, "")
            for inp, occ in inputs for text, sym, what in occ
            if "._base." in text and not isinstance(sym, (torch.SymInt, torch.SymFloat))]


# NOTE [Guards describe inputs as they arrived]: an in-place op of the trace may change an input's sizes or
# strides (`torch.add(x, 1, out=out)` resizes an empty `out` to x's size, `x.unsqueeze_(0)`, `x.as_strided_(...)`),
# and it changes the input's fake tensor in place. Guards check the input as the next call passes it, so they are
# made from the sizes, strides and offset the fake had when the input was wrapped (`GraphInput.layout`), never
# from the fake at the end of the trace: read there, `out`'s guard said `out.size(0) == x.size(0)` where every
# call passes size 0, and every call recompiled until the recompile limit. An input that arrived static is
# guarded by its tensor guard (exact sizes), whatever the trace made of it.
def _occurrences(out, inp) -> list[tuple[str, Any, str]]:
    """(expression, SymInt or int, what) for each size, stride and the storage offset of a symbolic input."""
    e = inp.source.expr(out.names)
    value = inp.value
    fake = getattr(value, "fake", None)
    if isinstance(fake, torch.Tensor):
        if inp.layout is None:
            return []
        sizes, strides, offset = inp.layout[:3]
        from .tensor_subclasses import metadata_expr  # NOTE [Guards read subclass tensors as Tensors]
        e = metadata_expr(out, inp.tensor, e)[1]
        occ = [(f"{e}.size({d})", s, f"size of dim {d}") for d, s in enumerate(sizes)]
        occ += [(f"{e}.stride({d})", s, f"stride of dim {d}") for d, s in enumerate(strides)]
        occ.append((f"{e}.storage_offset()", offset, "storage offset"))
        return occ
    sym = getattr(value, "sym", None)
    if isinstance(sym, (torch.SymInt, torch.SymFloat)):
        return [(e, sym, "value")]
    return []


def _relation_guards(out, env, inputs) -> list[Guard]:
    bound: dict[Any, str] = {}
    for _, occ in inputs:  # first pass: each symbol the env kept is defined by its first occurrence
        for text, sym, _ in occ:
            if isinstance(sym, (torch.SymInt, torch.SymFloat)):
                raw = sym.node.expr
                if getattr(raw, "is_Symbol", False) and env.simplify(raw) == raw and raw not in bound:
                    bound[raw] = text
    guards: list[Guard] = []
    for inp, occ in inputs:
        where = inp.source.describe()
        for text, sym, what in occ:
            if not isinstance(sym, (torch.SymInt, torch.SymFloat)):
                continue  # static: the tensor guard checks it
            expr = env.simplify(sym.node.expr)
            if bound.get(expr) == text:
                continue
            guards.append(_guard(out, f"{text} == {_print(out, expr, bound)}", where,
                                 f"{what} of {where} == {_readable(expr, bound, out)}", text,
                                 user_location(env.replacements_slocs.get(sym.node._expr))))
    for g in env.guards:
        expr = env.simplify(g.expr)
        if expr == True:  # noqa: E712 (sympy true)
            continue
        printed = _print(out, expr, bound)
        guards.append(_guard(out, printed, _sources_of(expr, bound), _readable(expr, bound, out),
                             _values_of(expr, bound), user_location(g.sloc)))
    for symbol, text in bound.items():
        vr = env.var_to_range.get(symbol)
        if vr is None or not symbol.is_integer:
            continue  # a float input's relations are guards of their own (NOTE [Float relations])
        low, high = vr.lower, vr.upper
        slocs = env.var_to_range_sloc.get(symbol)
        is_size = "." in text and ("size(" in text or "stride(" in text)
        if _finite(low) and (not is_size or int(low) > 0):
            guards.append(_guard(out, f"{text} >= {int(low)}", text, f"{text} >= {int(low)}", text,
                                 user_location(slocs and slocs.lower)))
        if _finite(high):
            guards.append(_guard(out, f"{text} <= {int(high)}", text, f"{text} <= {int(high)}", text,
                                 user_location(slocs and slocs.upper)))
    return guards


def _pinned_guards(out, inputs) -> list[Guard]:
    guards = []
    for inp, occ in inputs:
        for text, sym, what in occ:
            if isinstance(sym, torch.SymFloat):  # a float input (NOTE [Float relations]): exact, repr round-trips
                value = float(sym.node.hint)
                guards.append(_guard(out, f"{text} == {value!r}", inp.source.describe(), f"{what} == {value!r}",
                                     text, ""))
            elif isinstance(sym, torch.SymInt):
                value = sym.node.hint if sym.node.hint is not None else int(sym)
                guards.append(_guard(out, f"{text} == {int(value)}", inp.source.describe(),
                                     f"{what} == {int(value)}", text, ""))
    return guards


def _guard(out, expr: str, where: str, expected: str, actual: str | None, origin: str) -> Guard:
    """`origin`: the user line that made the env record it (NOTE [Where a size was specialised])."""
    return Guard(expr, "SHAPE_ENV", where, origin, expected, actual, COST_TENSOR + 1)


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError, OverflowError):
        return False


_SYMBOL = re.compile(r"(?<![\w.])[a-z]+\d+\b")  # a symbol (s0, zf1), never a name after a dot (`math.log2`: NOTE
# [Math functions of sizes] in sym_arith.py; read as a symbol, every guard of the entry was pinned by value)


def _print(out, expr, bound: dict) -> str:
    from torch.utils._sympy.printers import PythonPrinter
    text = PythonPrinter().doprint(expr)
    names = {str(s): t for s, t in bound.items()}
    if "math." in text:
        text = re.sub(r"\bmath\.", out.name_of(math, "math") + ".", text)
    if "torch." in text:  # torch.sym_float(...) of a size scaled by a float: `torch` is not a guard global
        text = re.sub(r"(?<![\w.])torch\.", out.name_of(torch, "torch") + ".", text)

    def name(m: re.Match) -> str:
        if m.group(0) not in names:
            raise _Unbound(m.group(0))
        return names[m.group(0)]  # an attribute chain or call: an atom wherever it is printed
    return _SYMBOL.sub(name, text)


def _readable(expr, bound: dict, out) -> str:
    try:
        return _print(out, expr, bound)
    except _Unbound:
        return str(expr)


def _values_of(expr, bound: dict) -> str | None:
    """The `actual` of a relation's guard: a dict display of the sizes it reads (`{'x.size(0)': x.size(0)}`),
    so that the recompile log names the dimension and the value that broke the relation, not "a different
    value" (issue 13)."""
    texts = sorted({bound[s] for s in getattr(expr, "free_symbols", ()) if s in bound})
    return "{" + ", ".join(f"{t!r}: {t}" for t in texts) + "}" if texts else None


def _sources_of(expr, bound: dict) -> str:
    return ", ".join(bound[s] for s in getattr(expr, "free_symbols", ()) if s in bound) or "sizes"
