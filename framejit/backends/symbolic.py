"""Graphs with symbolic shapes, as backends see them: one compilation for every size.

The capture frontend hands a backend a GraphModule whose placeholders carry `meta["val"]`: fake tensors
whose sizes may be `SymInt`s of the frontend's `ShapeEnv`, and `SymInt` placeholders for sizes passed as
ints. `example_inputs` are the real values of the call that compiled. A backend that wants one program for
every size asks this module for `SymbolicInputs.build(gm, example_inputs)`:

- a FRESH `ShapeEnv` and `FakeTensorMode` (never the frontend's: guards a backend adds while tracing
  must not leak into the frontend's guard function, and backends never import `capture`);
- one fresh symbol per frontend symbol (the backend's ShapeEnv names it), so two inputs that share a
  symbol share a size in the backend too (the same ONNX axis name, the same kernel argument);
- fake example inputs over those symbols (`fake_inputs`), to trace with make_fx(tracing_mode="symbolic");
- after tracing, `finish()` turns everything the backend's tracing assumed (the ShapeEnv's guards, the
  symbols' ranges, which sizes are equal or static) into one generated Python function, `bind(inputs)`,
  that returns the symbols' values for a call (a tuple in `symbols` order) or None when the program
  traced for these symbols does not apply to the call (the caller then builds another program: a size
  of 0 or 1, a relation the tracing specialised on). Its source is kept in `bind_source` for logs.

Invariant: a program traced over `fake_inputs` is correct for every call `bind` accepts; nothing else
is assumed (the frontend's own guards are not relied on, so the backend also works when called directly
under the torch.compile contract).

`is_symbolic(gm)` says whether a graph has symbolic sizes or strides at all (a view whose stride alone
changes between calls: NOTE [Changing strides of arguments] in capture/shapes.py); graphs without them keep
the per-signature static path of each backend.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import operator

import torch
import torch.fx
from torch._guards import GuardSource, Source


def _symbolic_value(value) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return not _is_constant(value)
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) and not _is_constant(s) for s in (*value.shape, *value.stride()))
    return False


def _is_constant(value) -> bool:
    import sympy

    return isinstance(value.node.expr, (sympy.Integer, sympy.Float, sympy.logic.boolalg.BooleanAtom))


def placeholder_vals(gm: torch.fx.GraphModule) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether some placeholder of `gm` has a symbolic size or stride or is a symbolic scalar."""
    return any(_symbolic_value(v) for v in placeholder_vals(gm))


def symbolic_int_positions(gm: torch.fx.GraphModule) -> frozenset:
    """Positions of the placeholders that are symbolic ints (their values are sizes, not constants)."""
    return frozenset(i for i, v in enumerate(placeholder_vals(gm))
                     if isinstance(v, torch.SymInt) and not _is_constant(v))


def constant_int_positions(gm: torch.fx.GraphModule) -> frozenset:
    """Positions of the placeholders that are ints the frontend specialised (a SymInt whose expression is
    a number: an int argument made symbolic, then guarded `n == 1` by a later trace). Their value is fixed
    for the graph, so a backend may bake it in."""
    return frozenset(i for i, v in enumerate(placeholder_vals(gm)) if isinstance(v, torch.SymInt) and _is_constant(v))


@dataclasses.dataclass(frozen=True)
class _InputSize(Source):
    """Where a backend symbol is read: input `index`, dimension `dim` (None: the input is the int;
    ("stride", d): the stride of dimension d, NOTE [Strided inputs of symbolic programs])."""
    index: int
    dim: int | tuple | None

    @property
    def _name_template(self) -> str:
        return f"a{self.index}" if self.dim is None else f"a{self.index}.{_read_of(self.dim)}"

    @functools.cached_property
    def name(self) -> str:  # noqa: D401 - torch's Source API
        return self._name_template

    @functools.cached_property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


def _hint(size) -> int | None:
    """The value a size had when traced (a SymInt's hint; adds no guard), or None."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return None if hint is None else int(hint)
    return int(size)


def _shape_env_of(vals: list):
    """The frontend's ShapeEnv, from the first symbolic size of the placeholders' values (or None)."""
    for val in vals:
        items = list(val.shape) + list(val.stride()) if isinstance(val, torch.Tensor) else [val]
        for item in items:
            if isinstance(item, torch.SymInt):
                return item.node.shape_env
    return None


def _read_of(dim) -> str:
    """The tensor method call reading `dim` of a `_reads` entry: size(d), or stride(d) for ("stride", d)."""
    return f"stride({dim[1]})" if isinstance(dim, tuple) else f"size({dim})"


class NotSymbolic(Exception):
    """The graph's symbolic sizes cannot be served by one program (reason in the message)."""


def _layout_key(value) -> tuple:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.dim(), value.device, value.is_contiguous(), value.requires_grad)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int",)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, (str, type(None))):
        return (type(value), value)
    return (type(value), id(value))


def layout_signature(inputs, symbolic_ints: frozenset = frozenset()) -> tuple:
    """What a symbolic program is specialised on besides sizes: dtypes, ranks, devices, contiguity;
    ints at `symbolic_ints` positions by type only, other scalars by value."""
    sig = []
    tensor = torch.Tensor
    for index, value in enumerate(inputs):
        if isinstance(value, tensor):  # _layout_key's first case, inline: this runs on every call
            sig.append(("tensor", value.dtype, value.dim(), value.device, value.is_contiguous(), value.requires_grad))
        elif isinstance(value, int) and not isinstance(value, bool) and index not in symbolic_ints:
            sig.append(("int", value))
        else:
            sig.append(_layout_key(value))
    return tuple(sig)


def reads_storage_offset(gm: torch.fx.GraphModule) -> bool:
    """Whether `gm` reads an input's storage offset (`x.storage_offset()`): NOTE [Storage offsets read
    by the graph] in backends/onnxrt/compiler.py. The fake inputs here are dense, of offset 0, so such a
    graph is not served symbolically (a program traced over them returned 0 for every call's offset)."""
    return any(node.target in ("storage_offset", torch.ops.aten.storage_offset.default)
               for node in gm.graph.nodes if node.op in ("call_method", "call_function"))


def reads_storage(gm: torch.fx.GraphModule) -> bool:
    """Whether `gm` reads an input's storage by position (`as_strided`: NOTE [Storage read by as_strided] in
    backends/onnxrt/translate.py), or its offset (reads_storage_offset)."""
    return reads_storage_offset(gm) or any(
        node.target in ("as_strided", torch.as_strided, torch.ops.aten.as_strided.default)
        for node in gm.graph.nodes if node.op in ("call_method", "call_function"))


_IN_PLACE_OPERATORS = frozenset({operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                  operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                                  operator.ixor, operator.ilshift, operator.irshift, operator.imatmul})


def _in_place(node: torch.fx.Node) -> bool:
    target = node.target
    if target in _IN_PLACE_OPERATORS or "out" in node.kwargs:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


# NOTE [Storage read after a write]: a graph that writes a tensor in place and reads storage positions or offsets
# (`r.mul_(2); r.as_strided(..., 0)`, `r * r.storage_offset()`) runs eagerly on the onnxrt and triton backends:
# functionalized, the read saw the written value as a new dense tensor at offset 0 instead of the view into its
# base (review revY F1: row 1 of a (2, 4) base gave [8, 10] where eager gives [0, 1], and offset 0 after a write).
def storage_read_after_a_write(gm: torch.fx.GraphModule) -> str | None:
    """NOTE [Storage read after a write]: why `gm` runs eagerly when it both writes in place and reads storage
    (reads_storage), else None."""
    nodes = [n for n in gm.graph.nodes if n.op in ("call_method", "call_function")]
    if any(_in_place(n) for n in nodes) and reads_storage(gm):
        return "the graph reads a tensor's storage offset or positions (as_strided) and writes in place"
    return None


def _range_checks(env, symbols) -> list[str]:
    """The bounds tracing gave each symbol (one replaced by an expression is checked by the guard that says so)."""
    import sympy

    checks = []
    for sym in symbols:
        value_range = env.var_to_range.get(sym)
        if sym in env.replacements:  # tracing found it equal to something: the guard says what
            continue
        if value_range is not None:
            if isinstance(value_range.lower, sympy.Integer):
                checks.append(f"{sym} >= {int(value_range.lower)}")
            if isinstance(value_range.upper, sympy.Integer):
                checks.append(f"{sym} <= {int(value_range.upper)}")
    return checks


class SymbolicInputs:
    """Fake inputs over fresh symbols for one graph, and, after tracing, the `bind` check (module doc)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list, strided: bool = False):
        """`strided`: non-contiguous inputs keep their strides, which the size check reads (NOTE [Strided
        inputs of symbolic programs]); else such an input raises NotSymbolic."""
        self.strided = strided
        if reads_storage_offset(gm):
            raise NotSymbolic("the graph reads an input's storage offset")
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        self.shape_env = ShapeEnv()
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True, static_shapes=True)
        self.symbols: list = []          # backend symbols, in order of first appearance
        self._mapping: dict = {}         # frontend symbol -> backend symbol expr
        self._reads: list = []           # (index, dim or None, frontend expr or int)
        self.symbolic_ints: frozenset = frozenset()
        self.example_inputs = list(example_inputs)
        # NOTE [Extrema of sizes as inputs] (size_floats.py): (backend symbol, its expression over the others)
        self.definitions: list = []
        self._extrema = frozenset(k for k, n in enumerate(gm.graph.find_nodes(op="placeholder"))
                                  if n.meta.get("size_extremum"))
        self.fake_inputs = self._make_fakes(placeholder_vals(gm), list(example_inputs))
        self.bind = None
        self.bind_source = ""

    # -- fake inputs ----------------------------------------------------------------------------
    def _make_fakes(self, vals: list, inputs: list) -> list:
        if len(vals) != len(inputs):
            raise NotSymbolic(f"{len(vals)} placeholders but {len(inputs)} inputs")
        ints = set()
        fakes = []
        sizes: dict = {}
        self._frontend_env = _shape_env_of(vals)  # NOTE [Ranges of the frontend's symbols]
        for index, (val, real) in enumerate(zip(vals, inputs)):
            if isinstance(real, torch.Tensor):
                sizes[index] = self._sizes(index, val, real)
                fakes.append(None)  # made below, once every input's sizes introduced their symbols
            elif isinstance(val, torch.SymInt) and not _is_constant(val) and type(real) is int:
                ints.add(index)
                expr = self._extremum_symbol(index, val.node.expr) if index in self._extrema else val.node.expr
                fakes.append(self._symint(index, None, expr, real))
            elif isinstance(val, (torch.SymFloat, torch.SymBool)) and not _is_constant(val):
                raise NotSymbolic(f"input {index} is a symbolic {type(val).__name__}")
            else:
                fakes.append(real)
        self.symbolic_ints = frozenset(ints)
        for index, shape in sizes.items():  # a stride may be an expression of another input's size
            fakes[index] = self._fake_tensor(index, vals[index], inputs[index], shape)
        return fakes

    def _sizes(self, index: int, val, real: torch.Tensor) -> list:
        if not isinstance(val, torch.Tensor) or val.dim() != real.dim():
            sizes = [int(s) for s in real.shape]
            self._reads.extend((index, d, s) for d, s in enumerate(sizes))
        else:
            sizes = []
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt) and not _is_constant(size):
                    sizes.append(self._symint(index, d, size.node.expr, int(real.shape[d])))
                else:
                    self._reads.append((index, d, int(size)))
                    sizes.append(int(size))
        return sizes

    def _fake_tensor(self, index: int, val, real: torch.Tensor, sizes: list):
        if real.is_contiguous():
            strides = None
        elif self.strided:
            strides = self._strides(index, val, real)
        else:
            raise NotSymbolic(f"input {index} is not contiguous")
        with self.fake_mode:
            if strides is None:
                fake = torch.empty(sizes, dtype=real.dtype, device=real.device)
            else:
                fake = torch.empty_strided(sizes, strides, dtype=real.dtype, device=real.device)
        if real.requires_grad:
            fake.requires_grad_(True)
        return fake

    # NOTE [Strided inputs of symbolic programs]: a transposed or sliced input (x.t(), x[:, 1:]) has strides
    # the frontend's fake tensor gives as numbers or expressions of its own symbols (a sliced row's stride is
    # a symbol of its own, guarded != the row's length). With `strided`, such an input's fake keeps them: a
    # symbolic stride becomes a backend symbol read from the input (`inputs[0].stride(0)`) or a check of its
    # expression, a static one a check, so the program traced over the fakes (a kernel indexing with the
    # strides) applies to exactly the calls whose strides `bind` accepts. Contiguous inputs are unchanged
    # (the layout signature's contiguity says their strides).
    def _strides(self, index: int, val, real: torch.Tensor) -> list:
        import sympy

        given = val.stride() if isinstance(val, torch.Tensor) and val.dim() == real.dim() else real.stride()
        if [_hint(s) for s in given] != list(real.stride()):  # the graph was traced for other strides
            raise NotSymbolic(f"input {index} is not contiguous and its graph value has other strides")
        symbolic = [isinstance(s, torch.SymInt) and not _is_constant(s) for s in given]
        strides: list = [None] * len(given)
        # plain symbols first (a stride (3*s20, s20) of x[:, ::2] introduces s20 in dimension 1)
        order = sorted(range(len(given)), key=lambda d: not (symbolic[d] and isinstance(given[d].node.expr, sympy.Symbol)))
        for d in order:
            if symbolic[d]:
                strides[d] = self._symint(index, ("stride", d), given[d].node.expr, int(real.stride(d)))
            else:
                self._reads.append((index, ("stride", d), int(given[d])))
                strides[d] = int(given[d])
        return strides

    def _symint(self, index: int, dim: int | tuple | None, expr, hint: int):
        """The backend SymInt for frontend `expr` (a plain symbol: a new backend symbol the first time)."""
        import sympy
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        self._reads.append((index, dim, expr))
        if isinstance(expr, sympy.Symbol):
            if expr not in self._mapping:  # NOTE [Int inputs keep 0 and 1]
                sym = self.shape_env.create_symbol(hint, _InputSize(index, dim), dynamic_dim=DimDynamic.DYNAMIC,
                                                   positive=True if dim is not None else None,  # NOTE [Int symbols have no sign]
                                                   do_not_specialize_zero_one=dim is None)
                self._mapping[expr] = sym
                if isinstance(sym, sympy.Symbol):
                    self.symbols.append(sym)
                    self._narrow(sym, expr)
                    definition = getattr(self, "_pending_definition", None)
                    if definition is not None:  # NOTE [Extrema of sizes as inputs]
                        self.definitions.append((sym, definition))
                        self._pending_definition = None
            backend = self._mapping[expr]
        else:
            missing = expr.free_symbols - set(self._mapping)
            if missing:
                raise NotSymbolic(f"size {expr} of input {index} uses symbols no input introduces: {missing}")
            backend = expr.xreplace(self._mapping)
        if isinstance(backend, sympy.Integer):
            return int(backend)
        return self.shape_env.create_symintnode(backend, hint=hint)

    def _extremum_symbol(self, index: int, expr):
        """A frontend stand-in for the extremum input `index` (NOTE [Extrema of sizes as inputs]): `_symint`
        makes it a backend symbol of its own, defined as `expr` over the other inputs' symbols."""
        import sympy

        missing = expr.free_symbols - set(self._mapping)
        if missing:
            raise NotSymbolic(f"extremum {expr} of input {index} uses symbols no earlier input introduces: {missing}")
        stand_in = sympy.Symbol(f"extremum{index}", integer=True)
        self._pending_definition = expr.xreplace(self._mapping)
        return stand_in

    # NOTE [Int inputs keep 0 and 1]: an int input the frontend made symbolic (a step counter, an offset) is
    # not a size: the frontend serves 0 and 1 with the same graph. The env's `create_symbol` specialises a
    # hint of 0 or 1 to the number, so a counter whose example was step 0 or 1 (its usual start) got a size
    # check `inputs[k] == 1` and every other step compiled per shape on triton (`x * step` over 9 steps: 8
    # modules). Int symbols keep 0 and 1 (`do_not_specialize_zero_one`); the frontend's range still narrows
    # them (below); sizes are specialised as before.
    # NOTE [Int symbols have no sign]: `create_symbol(positive=False)` does not mean "any sign": it makes a
    # sympy symbol assumed nonpositive. Int symbols were made so, and sympy then decided relations with them
    # from that assumption: the frontend's guard `n <= w` of `x[:, :n]` (n an int argument) read True, and
    # `n * b >= 2` False, when triton's probes were checked against the frontend's relations, so probes with
    # n > w were generated (where the slice is clamped to w) and the graph compiled per shape (6 modules over
    # 6 values of n, stock torch.compile 1). `positive=None` makes an integer symbol of either sign.
    # NOTE [Ranges of the frontend's symbols]: the frontend's guards may bound a size (`m[:, :t]` with m 16
    # wide: t <= 16). A backend symbol takes the frontend symbol's range too, so `bind` checks it (a program
    # is never used for sizes its graph was not traced for, also when called directly) and a backend that
    # samples sizes (triton's probes) picks them within it (`ranges`).
    def _narrow(self, sym, frontend_expr) -> None:
        env = self._frontend_env
        frontend = env.var_to_range.get(frontend_expr) if env is not None else None
        if frontend is not None and sym in self.shape_env.var_to_range:
            self.shape_env.var_to_range[sym] = self.shape_env.var_to_range[sym] & frontend

    def ranges(self) -> list[tuple]:
        """(lower, upper) of each symbol in `symbols` (None where unbounded)."""
        import sympy

        out = []
        for sym in self.symbols:
            r = self.shape_env.var_to_range.get(sym)
            lower = int(r.lower) if r is not None and isinstance(r.lower, sympy.Integer) else None
            upper = int(r.upper) if r is not None and isinstance(r.upper, sympy.Integer) else None
            out.append((lower, upper))
        return out

    def sizes_at(self, values: dict) -> tuple[dict, dict]:
        """The inputs' sizes when the backend symbols take `values`: ({input: {dim: size}}, {input: int})."""
        sizes: dict = {}
        scalars: dict = {}
        for index, dim, expr in self._reads:
            value = expr if isinstance(expr, int) else int(expr.xreplace(self._mapping).xreplace(values))
            if dim is None:
                scalars[index] = value
            else:
                sizes.setdefault(index, {})[dim] = value
        return sizes, scalars

    # -- after tracing --------------------------------------------------------------------------
    def finish(self, traced: torch.fx.GraphModule | None = None) -> None:
        """Build `bind` from what tracing assumed (call after the backend traced `fake_inputs`); sizes
        of intermediates in `traced` are read from its inputs instead (`rebase_sizes`)."""
        import sympy

        if traced is not None:
            drop_noop_views(traced)
            rebase_sizes(traced, self.shape_env)
        from torch.utils._sympy.printers import PythonPrinter

        env = self.shape_env
        printer = PythonPrinter()
        lines = ["def bind(inputs):"]
        names: dict = {}
        checks: list[str] = []
        static_shapes, shape_reads = _static_shapes(self._reads)
        for index, shape in static_shapes.items():  # NOTE [Size checks per call]
            checks.append(f"inputs[{index}].shape == {shape!r}")
        for index in shape_reads:
            lines.append(f"    shape{index} = inputs[{index}].shape")
        for index, dim, expr in self._reads:
            if index in static_shapes and isinstance(dim, int):
                continue
            read = f"inputs[{index}]" if dim is None else f"shape{index}[{dim}]" if isinstance(dim, int) \
                else f"inputs[{index}].{_read_of(dim)}"
            if isinstance(expr, int):
                checks.append(f"{read} == {expr}")
                continue
            backend = env.simplify(expr.xreplace(self._mapping))
            free = sorted(backend.free_symbols, key=str)
            if len(free) == 1 and backend == free[0] and free[0] not in names:
                names[free[0]] = read
                lines.append(f"    {free[0]} = {read}")
            else:
                pending = [s for s in free if s not in names]
                if pending:
                    raise NotSymbolic(f"size {expr} is read before its symbols")
                checks.append(f"{read} == {printer.doprint(backend)}")
        checks += _range_checks(env, self.symbols)
        defined = [sympy.Eq(sym, expr) for sym, expr in self.definitions]  # NOTE [Extrema of sizes as inputs]
        for expr in [env.simplify(guard.expr) for guard in env.guards] + defined:
            unknown = [s for s in expr.free_symbols if s not in names]
            if unknown:  # tracing made a symbol of something the check cannot read (a constant int input)
                raise NotSymbolic(f"tracing relied on {expr}, over symbols no input size gives")
            checks.append(printer.doprint(expr))
        for check in checks:
            lines.append(f"    if not ({check}):")
            lines.append("        return None")
        bound = [s for s in self.symbols if s in names]
        lines.append(f"    return ({', '.join(str(s) for s in bound)}{',' if bound else ''})")
        self.symbols = bound
        self.bind_source = "\n".join(lines)
        self.bind = compile_bind(self.bind_source)

    def require(self, expr) -> None:
        """Add the check `expr` (over `symbols`) to `bind`, before its return (NOTE [Extrema of sizes as
        inputs], size_floats.py: the branch of an extremum the probes took)."""
        from torch.utils._sympy.printers import PythonPrinter

        lines = self.bind_source.split("\n")
        check = [f"    if not ({PythonPrinter().doprint(expr)}):", "        return None"]
        self.bind_source = "\n".join(lines[:-1] + check + lines[-1:])
        self.bind = compile_bind(self.bind_source)


# NOTE [Size checks per call]: `bind` runs on every call of a symbolic program, so it reads each input's
# shape once (`shape3 = inputs[3].shape`) and checks a tensor whose sizes are all static (a weight) with
# one comparison of its whole shape (`inputs[5].shape == (96, 32)`, one C call) instead of one line per
# dimension: on the zoo's gpt (28 weights) bind went from 58 checks to 30.
def _static_shapes(reads: list) -> tuple[dict, list]:
    """({input: its whole static shape} for tensors all of whose sizes are static ints, [other tensors
    with size reads]), from `SymbolicInputs._reads` (each tensor's dims are read in order, all of them)."""
    dims: dict = {}
    for index, dim, expr in reads:
        if isinstance(dim, int):  # sizes only (not ints, not strides)
            dims.setdefault(index, []).append((dim, expr))
    static, others = {}, []
    for index, items in dims.items():
        if all(isinstance(expr, int) for _, expr in items) and [d for d, _ in items] == list(range(len(items))):
            static[index] = tuple(expr for _, expr in items)
        else:
            others.append(index)
    return static, others


# NOTE [Sizes read from inputs]
# A traced graph reads sizes where its Python read them: `sym_size(view_3, 0)` of an intermediate. A
# backend that splits the graph (onnxrt's ORT parts, triton's kernels) then has to compute that size
# between parts, which cuts one ORT part in three. Every size of an intermediate (sym_size, sym_numel,
# sym_stride: any int node that reads a tensor computed by the graph) whose expression is made of input
# sizes is computed from the inputs instead, right after the placeholders, so size nodes depend on inputs
# only: a plain input size is read from that input, and an expression of them (the zoo's ViT flattens
# its patch grid: `(s73 // 2) * (s82 // 2)`, read from the conv output) is rebuilt with the same
# arithmetic (+, *, //, %, max, min) over the inputs' sizes. The expressions are those of the backend's
# own symbolic trace (`meta["val"]`), exact for every call `bind` accepts. Before, the ViT's dynamic=True
# program was cut into 7 ORT parts with 17 size nodes between them in torch (1.5x the static program's
# per-call time).
def rebase_sizes(traced: torch.fx.GraphModule, shape_env) -> int:
    """Compute sizes of intermediates from the inputs (NOTE [Sizes read from inputs]); returns how many."""
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return 0
    reads: dict = {}
    for node in placeholders:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            reads.setdefault(shape_env.simplify(val.node.expr), (node, None))
        elif isinstance(val, torch.Tensor):
            for dim, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt):
                    reads.setdefault(shape_env.simplify(size.node.expr), (node, dim))
    sizes = _InputSizes(graph, placeholders[-1], reads)
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.SymInt):
            continue
        if not any(isinstance(a, torch.fx.Node) and a.op != "placeholder" and isinstance(a.meta.get("val"), torch.Tensor)
                   for a in node.args):
            continue
        made = sizes.node_for(shape_env.simplify(node.meta["val"].node.expr))
        if not isinstance(made, torch.fx.Node):
            continue
        node.replace_all_uses_with(made)
        graph.erase_node(node)
        count += 1
    count += _merge_equal_sizes(graph, shape_env)
    if count:
        traced.recompile()
    return count


def _merge_equal_sizes(graph: torch.fx.Graph, shape_env) -> int:
    """Replace every size node computed from the inputs' sizes alone by the first node of the same
    expression (the ViT's `s1 * (1 + (s73 // 2) * (s82 // 2))`, the row count of each block's Linear, was
    computed, and fed to ORT, 8 times per call)."""
    first: dict = {}
    sized: set = {n for n in graph.nodes if n.op == "placeholder"}
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.SymInt):
            continue
        if not all(a in sized for a in node.all_input_nodes):
            continue
        key = shape_env.simplify(node.meta["val"].node.expr)
        if key in first:
            node.replace_all_uses_with(first[key])
            graph.erase_node(node)
            count += 1
        else:
            first[key] = node
            sized.add(node)
    return count


class _InputSizes:
    """FX nodes computing size expressions from the placeholders' sizes (NOTE [Sizes read from inputs]),
    each expression made once, inserted in order right after the placeholders."""

    def __init__(self, graph: torch.fx.Graph, last_placeholder: torch.fx.Node, reads: dict):
        self.graph = graph
        self.cursor = last_placeholder
        self.reads = reads  # expr -> (placeholder, dim or None)
        self.made: dict = {}

    def _insert(self, target, args: tuple, val) -> torch.fx.Node:
        with self.graph.inserting_after(self.cursor):
            node = self.graph.call_function(target, args)
        node.meta["val"] = val
        self.cursor = node
        return node

    def node_for(self, expr):
        """A node (or an int) computing `expr`, or None when `expr` uses something the inputs do not give."""
        if expr in self.made:
            return self.made[expr]
        made = self._make(expr)
        if made is not None:
            self.made[expr] = made
        return made

    def _make(self, expr):
        import operator

        import sympy
        from torch.utils._sympy.functions import CleanDiv, FloorDiv, Mod, PythonMod

        if isinstance(expr, sympy.Integer):
            return int(expr)
        if expr in self.reads:
            source, dim = self.reads[expr]
            if dim is None:
                return source
            return self._insert(torch.ops.aten.sym_size.int, (source, dim), source.meta["val"].shape[dim])
        if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and expr.exp >= 1:
            return self._fold(operator.mul, [expr.base] * int(expr.exp))
        ops = ((sympy.Add, operator.add), (sympy.Mul, operator.mul), (FloorDiv, operator.floordiv),
               (CleanDiv, operator.floordiv), (PythonMod, operator.mod), (Mod, operator.mod),
               (sympy.Mod, operator.mod), (sympy.Max, torch.sym_max), (sympy.Min, torch.sym_min))
        for kind, function in ops:
            if isinstance(expr, kind):
                return self._fold(function, list(expr.args))
        return None

    def _fold(self, function, args: list):
        values = []
        for arg in args:
            value = self.node_for(arg)
            if value is None:
                return None
            values.append(value)
        result = values[0]
        for value in values[1:]:
            val = function(_val(result), _val(value))
            result = val if isinstance(val, int) else self._insert(function, (result, value), val)
        return result


def _val(value):
    return value if isinstance(value, int) else value.meta["val"]


# NOTE [No-op views of symbolic sizes]
# With static sizes ONNX Runtime folds a Reshape or Expand to the shape its input already has; with
# symbolic sizes their target shapes are computed at run time (Concat of size inputs), so they run, and
# Expand copies. The bmm decomposition of a 4-d matmul expands q, k and v to their own shapes: in the
# attention block of benchmarks/dynamic.py that was 4 copies and 9 Reshapes per call. A view, reshape or
# expand whose output has its input's shape (the same size expressions) is replaced by its input, unless
# the graph returns it (a returned view is a new tensor object in eager).
_SAME_SHAPE_VIEWS = ("aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand", "aten::alias")


def _same_sizes(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x = x.node.expr if isinstance(x, torch.SymInt) else x
        y = y.node.expr if isinstance(y, torch.SymInt) else y
        if x != y:  # structural comparison of expressions: adds no guard
            return False
    return True


def drop_noop_views(traced: torch.fx.GraphModule) -> int:
    """Remove views to the shape their input already has (NOTE [No-op views of symbolic sizes])."""
    count = 0
    for node in list(traced.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target.name() not in _SAME_SHAPE_VIEWS or not node.args:
            continue
        source = node.args[0]
        val, src = node.meta.get("val"), getattr(source, "meta", {}).get("val")
        if not (isinstance(val, torch.Tensor) and isinstance(src, torch.Tensor)) or val.dtype != src.dtype:
            continue
        if any(user.op == "output" for user in node.users) or not _same_sizes(val.shape, src.shape):
            continue
        node.replace_all_uses_with(source)
        traced.graph.erase_node(node)
        count += 1
    if count:
        traced.recompile()
    return count


def compile_bind(source: str):
    """The `bind` function of a size check's source (`SymbolicInputs.finish`; persisted programs)."""
    namespace = {"math": math, "torch": torch}
    exec(compile(source, "<framejit backend size check>", "exec"), namespace)
    return namespace["bind"]


def encode_layout(layout: tuple) -> list | None:
    """`layout_signature`'s tuple as JSON data, or None when it holds something only this process knows."""
    encoded = []
    for item in layout:
        if item[0] == "tensor":
            encoded.append(["tensor", str(item[1]), item[2], str(item[3]), item[4], item[5]])
        elif item[0] in ("int", "bool", "float") and all(isinstance(v, (int, float)) for v in item[1:]):
            encoded.append(list(item))
        elif item[0] in (str, type(None)):
            encoded.append(["const", item[1]])
        else:
            return None
    return encoded


def decode_layout(encoded: list) -> tuple:
    from .artifact import dtype_from_text

    layout = []
    for item in encoded:
        if item[0] == "tensor":
            layout.append(("tensor", dtype_from_text(item[1]), item[2], torch.device(item[3]), item[4], item[5]))
        elif item[0] == "const":
            layout.append((type(item[1]), item[1]))
        else:
            layout.append(tuple(item))
    return tuple(layout)
