"""Graphs with symbolic shapes on the triton backend: one generated module for every size where possible.

NOTE [Size-generic modules]
The triton pipeline (lowering, the loop-level IR, fusion, codegen) works on concrete sizes: index
arithmetic is simplified with the known range of every loop variable. Kernels already take `xnumel` and
`rnumel` as runtime arguments; what else depends on sizes is either in the kernel bodies (strides and
moduli of index expressions, the divisor of a mean) or in the wrapper's Python (buffer shapes and
strides, numels, grids, sizes of extern calls). So for a graph whose placeholders have symbolic sizes
(backends/symbolic.py) the module is generated at four probe assignments of the symbols, all with the
same launch configuration and 64-bit indexing: the example inputs' sizes, and three of distinct primes
times 16 (products of sizes can be told apart; views such as view(s0, 2, -1) stay valid) whose orders
differ (increasing, decreasing, interleaved), so a simplification of index arithmetic that holds only for
one order of the symbols (`i % s1` dropped because s0 <= s1) shows up as a difference between probes.
Then:
- the kernel sources must be identical across the probes except for integer literals (strides and
  moduli of index expressions: `xindex % 80` for a bias broadcast over a symbolic last dimension); each
  literal that changes is fitted as below and becomes a runtime argument of its kernel (`ks0, ks1, ...`,
  passed by the wrapper), so the same kernel serves every size. A float literal that changes (the divisor
  of a mean over a symbolic dimension) or a different kernel structure makes the graph specialise;
- the wrapper's text must be identical except for integer literals; every literal that changes is fitted
  as `c * s0**e0 * s1**e1 ...` (exponents 0..2) over the three probes, and the fit is checked on all of
  them; a literal no product fits is matched against the graph's own size expressions (`s1 // 2`,
  `(-s1) % 8`, `s0 - off % s0`: NOTE [Literals fitted to the graph's size expressions], size_exprs.py).
  The wrapper's `call` then starts by binding the symbols from its inputs and uses the fitted
  expressions, so grids, numels, shapes and strides are computed per call;
- reductions whose `rnumel` changes with the probes use looped reductions (a persistent block sized for
  one probe would leave elements out for larger rows).
A call whose sizes the size check (`bind`, backends/symbolic.py) rejects (a size of 0 or 1, inconsistent
sizes), and every call of a graph that is not size-generic, is compiled for its concrete shapes
(`SpecialisingGraph`), each time with a `recompiles` log line naming the reason.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.utils._pytree as pytree

from framejit import logs
from framejit.backends import symbolic
from framejit.backends.aliasing import alias_mutated_inputs
from framejit.backends.layout import output_layouts, restore as restore_layouts
from framejit.backends.state import switches_grad_on

from ...grad_mode import grad_mode
from . import codegen, probe_relations, size_exprs
from .literal_fits import (NotGeneric, _SkeletonDiffers, _generic_source, _has_fraction,
                           _same_skeleton, _split, _with_params)
from .lowering import lower, to_aten
from .runtime import load_module, needs_autograd, register_kernels, rerun_exactly, rerun_on_error, written_versions
from .scheduler import FusedGroup, describe, schedule
from .wrapper import generate_module

# NOTE [Size-generic modules]: increasing, decreasing (reversed after taking n), interleaved; the fourth
# stands for the example's sizes where those are degenerate (NOTE [Degenerate sizes are not probed])
_PROBES = ((3, 5, 7, 11, 13, 17, 19, 23), (29, 31, 37, 41, 43, 47, 53, 59), (61, 97, 67, 89, 71, 83, 73, 79),
           (109, 131, 101, 137, 107, 127, 103, 113))


def _probes(n: int, example: list[int], ranges: list | None = None, example_degenerate: bool = False) -> list[list[int]]:
    """The example's sizes (or, when `example_degenerate`, a fourth probe), then the three probes of primes."""
    increasing, decreasing, interleaved, fourth = (list(p[:n]) for p in _PROBES)
    probes = [[16 * v for v in p] for p in (increasing, decreasing[::-1], interleaved)]
    if example_degenerate:
        probes.insert(0, [16 * v for v in fourth])
    for k, (lower, upper) in enumerate(ranges or []):  # NOTE [Ranges of the frontend's symbols]
        if upper is not None and lower == upper:  # NOTE [Symbols with too few sizes to probe]
            for p in probes:
                p[k] = upper
        elif upper is not None and any(p[k] > upper for p in probes):
            # sizes of several residues (the odd probes above the bound are rejected by the size check)
            inside = [upper - d for d in (0, 1, 3, 6, 2, 5, 4, 7) if upper - d >= max(lower or 2, 2)]
            inside = [v for v in inside if v != example[k]]
            if len(inside) < len(probes):
                raise NotGeneric(f"symbol {k} ranges over too few sizes ({lower}..{upper}) to probe")
            for p, v in zip(probes, inside):
                p[k] = v
    return probes if example_degenerate else [list(example)] + probes


# NOTE [Degenerate sizes are not probed]: a size the graph computes can be 1 at some sizes of its symbols and
# larger at others: `x[:, ::3]` has (s + 2) // 3 columns, 1 for s <= 3; `x.reshape(-1)[:x.numel() % 7 + 1]`
# has 1 element when 7 divides the numel; an offset can be 0 (`x[:, x.size(1) % 3:]`). Lowering folds a
# dimension of size 1 away (its loop variable is the constant 0, a reduction over it has one element) and an
# offset of 0 (`+ 0`), so the module generated at such sizes differs in structure from the one generated
# where the value is larger, and the graph compiled per shape (every size, with
# dynamic=True as well, when the first call's sizes were the degenerate ones). The kernels generated where
# the size is larger index with the general expression, which at a size of 1 takes the value 0 as the fold
# does; eager's semantics cannot differ there unnoticed, as the frontend guards any use of such a size that
# depends on it being 1 (broadcasting, squeeze). So sizes where a size expression of the graph is 1 and it is
# larger at the three probes of primes (or 0 where it is not 0 there) are not probed: the example's sizes give way to a fourth probe of
# primes, and odd probes and disambiguating probes at such sizes are skipped; the module serves them. (Such
# a probe's module can also have fewer literals: NOTE [Literal counts differ between probes] (literal_fits.py).)


_MAX_SYMBOLS = 8  # 3**8 candidate monomials per literal


# NOTE [Symbols with too few sizes to probe]: the frontend's guards can bound a size to two or three values:
# conv2d(x, w, padding=1) with w a dynamic=True input bounds w's kernel width to 2..3 (eager's algorithm choice)
# and the batch below 16. Probes need three values of every symbol besides the example's, so such a graph
# compiled per shape ('symbol 6 ranges over too few sizes'), and before that the conv's 7 symbols were over the
# limit of 6 (now 8, each probe set has 8 primes). A symbol with fewer than four values in its range is now
# fixed at the example's value: its range becomes that one value, which the size check tests, every probe
# takes it, and the module serves every size of the other symbols (calls with another value of it compile per
# shape, logged).
class _PinAndRetry(Exception):
    """Generating at a probe failed where it breaks a frontend guard: make the module again with `pins`
    fixed (NOTE [Symbols pinned by guards the probes miss])."""

    def __init__(self, pins: frozenset) -> None:
        super().__init__(", ".join(sorted(pins)))
        self.pins = pins


def _pin_narrow_symbols(sym: symbolic.SymbolicInputs, pins: frozenset = frozenset()) -> list[str]:
    """Fix the symbols whose range has fewer than 4 values, and those named in `pins` (NOTE [Symbols pinned
    by guards the probes miss]), at their example value (before `sym.finish()`); returns 'symbol = value'
    for each."""
    from torch.utils._sympy.value_ranges import ValueRanges

    env = sym.shape_env
    hints = getattr(env, "backed_var_to_val", None)  # torch >= 2.13; var_to_val, its old name, warns there
    if hints is None:
        hints = env.var_to_val
    pinned = []
    for symbol, (lower, upper) in zip(sym.symbols, sym.ranges()):
        narrow = upper is not None and upper - max(lower or 2, 2) + 1 < 4
        if (narrow or str(symbol) in pins) and symbol in hints:
            value = int(hints[symbol])
            env.var_to_range[symbol] = ValueRanges(value, value)
            pinned.append(f"{symbol} = {value}")
    return pinned


_MAX_SPECIALISED = 16


class _IntsBaked(torch.nn.Module):
    """`gm` with its size-int inputs fixed (the triton pipeline lowers tensor inputs only); called with
    the remaining tensors. `graph` is gm's (backends/state.py reads it)."""

    def __init__(self, gm, inputs: list, positions: frozenset):
        super().__init__()
        self.gm = gm
        self.graph = gm.graph
        self.ints = {i: inputs[i] for i in positions}
        self.count = len(inputs)

    def forward(self, *tensors):
        rest = iter(tensors)
        return self.gm.forward(*[self.ints[i] if i in self.ints else next(rest) for i in range(self.count)])


def _tensors(args, positions: frozenset) -> list:
    return [a for i, a in enumerate(args) if i not in positions]


def _generate(gm, inputs: list, device: torch.device, opts: dict, configs: dict | None, ints: frozenset):
    """compile_graph's pipeline up to the module source (no loading); `configs` forces launch configs;
    the ints at positions `ints` are fixed into the graph (their values reach the source as literals)."""
    with grad_mode(False):
        aten_gm = to_aten(_IntsBaked(gm, inputs, ints) if ints else gm, _tensors(inputs, ints))
    alias_mutated_inputs(aten_gm)
    graph, fallbacks = lower(aten_gm)
    sched = schedule(graph)
    buffers = graph.buffers()
    kernels, used = {}, {}
    for step in sched.steps:
        if isinstance(step, FusedGroup) and step.xnumel * step.rnumel > 0:
            config = (configs or {}).get(step.name) or codegen.choose_config(
                step, device.type == "cpu", opts["persistent_reduction_limit"])
            used[step.name] = (config, step.rnumel)
            kernels[step.name] = codegen.KernelWriter(step, buffers, config, True).generate(step.name)
    source, extra = generate_module(sched, kernels, device, False, describe(sched))
    return source, kernels, sched, graph, extra, fallbacks, used


# NOTE [Constants made from sizes]: make_fx traces each probe with fake tensors of concrete sizes, so a tensor
# made from a size (`y[0] = x.size(1)` is aten.scalar_tensor(size) then fill_) becomes a constant of that probe's
# graph (`const0`), passed to the module at run time, not a literal of its source: the sources agreed and the
# first probe's constant served every size (eager 5, 3, 2, 9; framejit 5, 5, 5, 5; review revB #5). Constants
# that differ between the probes make the graph specialise; one equal at every probe but made from a value that
# is not (`n // 100000`) is found by NOTE [Size expressions the probes cannot tell] (size_exprs.py).
def _same_constants(graphs: list) -> bool:
    first = graphs[0].constants
    for graph in graphs[1:]:
        if list(graph.constants) != list(first):
            return False
        for name, tensor in graph.constants.items():
            ref = first[name]
            if tensor is not ref and (tensor.shape != ref.shape or tensor.dtype != ref.dtype
                                      or not torch.equal(tensor, ref)):
                return False
    return True


class _FusionsDiffer(NotGeneric):
    """Some probes fused what others kept apart (NOTE [Fusions kept apart at every probe], scheduler.py)."""

    def __init__(self, pairs: set) -> None:
        super().__init__(f"fusion depends on the sizes: {sorted(pairs)}")
        self.pairs = pairs


def compile_dynamic(gm, example_inputs: list, device: torch.device, opts: dict) -> "DynamicGraph":
    """One size-generic module for `gm` (NOTE [Size-generic modules]); raises NotGeneric."""
    from . import ir, scheduler

    apart, recombine = set(), True
    for _ in range(4):
        scheduler.KEEP_APART.update(apart)
        ir.RECOMBINE[0] = recombine
        try:
            return _compile_dynamic(gm, example_inputs, device, opts)
        except _FusionsDiffer as differ:  # NOTE [Fusions kept apart at every probe] (scheduler.py)
            if differ.pairs <= apart:
                raise
            apart |= differ.pairs
        except _SkeletonDiffers:  # NOTE [Recombination off at probes] (ir.py)
            if not recombine:
                raise
            recombine = False
        finally:
            scheduler.KEEP_APART.clear()
            ir.RECOMBINE[0] = True
    raise NotGeneric("the kernels generated at different sizes differ in structure")


def _compile_dynamic(gm, example_inputs: list, device: torch.device, opts: dict,
                     pins: frozenset = frozenset()) -> "DynamicGraph":
    sym, names, example_sizes = _symbolic_inputs(gm, example_inputs, pins)
    exprs = _size_expressions(gm, sym, example_inputs)  # NOTE [Literals fitted to the graph's size expressions]
    probes = _probes(len(names), list(example_sizes), sym.ranges())
    if exprs.degenerate_at(probes[0], probes[1:]):  # NOTE [Degenerate sizes are not probed]
        probes = _probes(len(names), list(example_sizes), sym.ranges(), example_degenerate=True)
    relations = probe_relations.relations_of(sym)  # NOTE [Probes within the frontend's relations]
    fixed = {k for k, (lower, upper) in enumerate(sym.ranges()) if lower is not None and lower == upper}
    probes = probe_relations.within_relations(probes, relations, fixed)
    branches = probe_relations.extrema_untold(sym, probes)
    for branch in branches:  # NOTE [Extrema of sizes as inputs] (size_floats.py)
        sym.require(branch)  # the module serves the branch the probes took; the others compile per shape
    unmet = probe_relations.unmet_symbols(sym, probes, degenerate=False,  # NOTE [Probes that break a guard]
                                          dims=probe_relations.tensor_dims(gm, sym._mapping),
                                          example=list(example_sizes)) - fixed  # NOTE [Fewest symbols pinned]
    if unmet:
        more = frozenset(names[k] for k in unmet)
        if more <= pins:
            raise NotGeneric(f"probes break the frontend's guards over {', '.join(sorted(more))}")
        return _compile_dynamic(gm, example_inputs, device, opts, pins | more)
    probing = _Probing(gm, example_inputs, device, opts, sym, names, fixed, pins)
    try:  # both passes: a probe that fails with looped reductions pins its symbols too (not 'internal error')
        runs, configs = probing.generate_all(probes, None)
        if _loop_varying_reductions(runs, configs):
            runs, _ = probing.generate_all(probes, configs)
    except _PinAndRetry as retry:
        return _compile_dynamic(gm, example_inputs, device, opts, retry.pins)
    heads = [_split(r[0])[0] for r in runs]
    # NOTE [Odd probes]
    if _has_fraction(heads, [_split(r[0])[1] for r in runs], probes, names) or _rounds_sizes(gm) or exprs.rounds():
        runs, probes = probing.add_odd_probes(runs, probes, exprs, relations, configs)
        heads = [_split(r[0])[0] for r in runs]
    untold = size_exprs.untold(exprs, probes, {sym.symbols[k]: sym.ranges()[k][0] for k in fixed}, relations, branches,
                               lambda point: _served_at(point, sym, gm, example_inputs, relations))
    if untold is not None:  # NOTE [Size expressions the probes cannot tell] (size_exprs.py)
        raise NotGeneric(f"the probes cannot tell a size expression of the graph: {untold}")
    _check_runs(runs, heads)

    def probe_at(points):
        return _probe_where_they_differ(points, sym, gm, example_inputs, device, opts, configs, exprs.excluded,
                                        lambda point: exprs.degenerate_at(point, probes[1:4]), relations)
    source, kernel_args = _generic_source(runs, probes, names, exprs, probe_at)
    return _dynamic_graph(gm, sym, names, runs, source, kernel_args, device, opts)


def _symbolic_inputs(gm, example_inputs: list, pins: frozenset):
    """The graph's inputs with symbolic sizes, the symbols' names and the example's sizes, or NotGeneric."""
    try:
        sym = symbolic.SymbolicInputs(gm, example_inputs, strided=True)  # NOTE [Strided inputs of symbolic programs]
        pinned = _pin_narrow_symbols(sym, pins)
        sym.finish()
    except symbolic.NotSymbolic as why:
        raise NotGeneric(str(why)) from None
    if pinned:
        logs.log("recompiles", "triton: sizes with too few values to probe are fixed in the size-generic module "
                 "(other values compile per shape): %s", ", ".join(pinned))
    names = [str(s) for s in sym.symbols]
    relation = _size_relation(gm)
    if relation is not None:
        raise NotGeneric(f"the graph computes a relation of sizes ({relation}), which the probe sizes would fix")
    extremum = _size_extremum(gm)
    if extremum is not None:
        raise NotGeneric(f"the graph computes a max or min of sizes ({extremum}), which the probe sizes would fix")
    if not names or len(names) > _MAX_SYMBOLS:
        raise NotGeneric(f"{len(names)} symbols (1 to {_MAX_SYMBOLS} are made size-generic): {_symbol_sources(sym)}")
    example_sizes = sym.bind(example_inputs)
    if example_sizes is None:
        raise NotGeneric("the example inputs fail their own size check")
    return sym, names, example_sizes


class _Probing:
    """Generating the graph's program at probe sizes, for _compile_dynamic."""

    def __init__(self, gm, example_inputs, device, opts, sym, names, fixed, pins):
        self.gm, self.example_inputs, self.device, self.opts = gm, example_inputs, device, opts
        self.sym, self.names, self.fixed, self.pins = sym, names, fixed, pins

    def generate(self, probe, configs):
        inputs = _probe_inputs(self.sym, dict(zip(self.sym.symbols, probe)), self.example_inputs)
        return _generate(self.gm, inputs, self.device, self.opts, configs, self.sym.symbolic_ints)

    def generate_all(self, probes, configs):
        runs = []
        for probe in probes:
            try:
                runs.append(self.generate(probe, configs))
            except Exception as exc:
                unmet = probe_relations.unmet_symbols(self.sym, [probe]) - self.fixed
                if unmet and not self.pins:  # NOTE [Symbols pinned by guards the probes miss] (probe_relations.py)
                    raise _PinAndRetry(frozenset(self.names[k] for k in unmet)) from None
                raise NotGeneric(f"generating at probe sizes {probe} failed ({type(exc).__name__}: {exc})") from None
            if configs is None:
                configs = {name: config for name, (config, _) in runs[0][6].items()}
        return runs, configs

    def add_odd_probes(self, runs, probes, exprs, relations, configs):
        """NOTE [Odd probes]: the runs and probes with the odd probes the graph can take added."""
        for probe in _odd_probes(self.sym, probes, self.example_inputs):
            probe = relations.defined(probe)  # NOTE [Probes within the frontend's relations]
            if exprs.degenerate_at(probe, probes[1:4]) or not relations.hold(probe) or probe in probes:
                continue  # NOTE [Degenerate sizes are not probed]
            try:
                run = self.generate(probe, configs)
            except Exception:  # noqa: BLE001 - sizes the graph cannot take (a view needs them even): no probe
                continue
            runs, probes = [*runs, run], [*probes, probe]
        return runs, probes


def _check_runs(runs: list, heads: list) -> None:
    """NotGeneric (or _FusionsDiffer) where the probes' programs differ in what one module cannot serve."""
    if not _same_constants([r[3] for r in runs]):  # NOTE [Constants made from sizes]
        raise NotGeneric("a constant the lowering made differs between probe sizes (a value computed from sizes)")
    kept_apart = set().union(*(r[2].kept_apart for r in runs))  # NOTE [Fusions kept apart at every probe]
    if not _same_skeleton(heads) and any(r[2].kept_apart != kept_apart for r in runs):
        raise _FusionsDiffer(kept_apart)
    if any(r[4] for r in runs):
        raise NotGeneric("the wrapper passes values it cannot spell (extra)")


def _dynamic_graph(gm, sym, names, runs, source, kernel_args, device, opts) -> "DynamicGraph":
    kernels = {name: _with_params(k, kernel_args.get(name, {})) for name, k in runs[0][1].items()}
    sched, graph, fallbacks = runs[0][2], runs[0][3], runs[0][5]
    module, path = load_module(source)
    register_kernels(path, kernels.values())
    logs.log("output_code", "triton: one module for every size (symbols %s): %s\n%s", ", ".join(names), path, source)
    externs = sum(1 for s in sched.steps if not isinstance(s, FusedGroup))
    constants = [graph.constants[name] for name in graph.constants]
    return DynamicGraph(gm, module, path, source, sym.bind, sym.bind_source,
                        symbolic.layout_signature(sym.example_inputs, sym.symbolic_ints), sym.symbolic_ints,
                        constants, graph.output_spec, (len(kernels), externs, fallbacks), device, opts)


# NOTE [Probes that break a guard]: a probe the repairs (NOTE [Probes within the frontend's relations]) left
# breaking a frontend guard was used as it was when generating there succeeded: `for c in x.split(3): ...`
# traced at 10 rows guards `(s + 2) // 3 == 4` (four chunks, the last `s - 9` rows), the probes of primes
# (48, 496, ...) broke it, generating at them succeeded (a narrow of `s - 9` rows), and the fits made from
# them were wrong for every size the graph serves: the last chunk's size fitted as 3 (values off by up to
# 4 at 10 rows, 1e21 at 10 x 5; red team of h13dyn). The symbols of such guards are now pinned at their
# example values before anything is generated (as NOTE [Symbols pinned by guards the probes miss] does
# after a failure), and a graph whose probes still break a guard after that is compiled per shape. Guards
# that a size is (or is not) 0 or 1 are left out: the probes break those on purpose (NOTE [Degenerate sizes
# are not probed]: `x[o % x.size(0):]` traced where one row is left guards `s - o % s == 1`), and so are
# guards that exclude one value (`Ne(t, 16)`, see probe_relations.unmet_symbols).
# NOTE [Odd probes]: the fitted probes are multiples of 16 (views such as view(s0, 2, -1) stay valid), so a
# fraction fitted over them cannot tell `(s1 * s28) // 2` from `(s1 // 2) * s28` (`x[h:2 * h]` with
# `h = x.size(0) // 2`: the second slice's offset): both agree on every even s1, and the module computed
# the wrong offset for odd sizes (red team, issue 13: wrong values for sizes 5 and 7); `x * (s0 % 2)` held
# 0 the same way. When a fit has a denominator, a literal fits no product, or the graph rounds sizes (%, //,
# floor, ...), the module is also generated at probes where sizes are 1, 3 and 6 past the multiples of 16
# (all at once, then each symbol 1 past alone) that the graph's
# size check accepts (a probe the graph cannot take, a view needing even sizes, is skipped: eager fails for
# such sizes too), and the fits must hold there too, else the graph is compiled per shape.
def _symbol_sources(sym: symbolic.SymbolicInputs) -> str:
    """Where each symbol is read ('s0 = input 0 size(1), s1 = input 2'), for log lines."""
    import sympy

    seen = {}
    for index, dim, expr in sym._reads:
        backend = expr if isinstance(expr, int) else expr.xreplace(sym._mapping)
        if isinstance(backend, sympy.Symbol) and backend not in seen:
            where = "" if dim is None else f" {symbolic._read_of(dim)}"
            seen[backend] = f"{backend} = input {index}{where}"
    return ", ".join(seen.values())


def _probe_where_they_differ(points: list, sym, gm, example_inputs, device, opts, configs,
                             excluded: set, degenerate, relations) -> tuple | None:
    """(probe, the module generated there) at the first of `points` the graph takes; points it does not take
    (its size check rejects them, or its ops raise there: `conv2d` of a size below its kernel, where the
    candidates `Max(1, (s - 3) // 2 + 1)` and `(s - 3) // 2 + 1` differ) are added to `excluded`; None
    when no point is left."""
    for probe in points:
        inputs = _probe_inputs(sym, dict(zip(sym.symbols, probe)), example_inputs)
        # NOTE [Probes within the frontend's relations]: sizes breaking a relation are never served
        if sym.bind(inputs) is None or not relations.hold(probe) or not _graph_takes(gm, inputs):
            excluded.add(tuple(probe))
            continue
        if degenerate(probe):  # NOTE [Degenerate sizes are not probed]: served, not excluded
            continue
        try:
            run = _generate(gm, inputs, device, opts, configs, sym.symbolic_ints)
        except Exception as exc:  # the module would serve these sizes: the literal stays ambiguous
            raise NotGeneric(f"a literal fits several size expressions, and generating at {probe}, where they "
                             f"differ, failed ({type(exc).__name__}: {exc})") from None
        if run[4]:
            raise NotGeneric("the wrapper passes values it cannot spell (extra)")
        return probe, run
    return None


def _served_at(point: list[int], sym, gm, example_inputs: list, relations) -> bool:
    """Whether the module would serve sizes `point`: its size check and the frontend's relations take them, and
    the graph's ops run there (on fake tensors)."""
    inputs = _probe_inputs(sym, dict(zip(sym.symbols, point)), example_inputs)
    return sym.bind(inputs) is not None and relations.hold(point) and _graph_takes(gm, inputs)


def _graph_takes(gm, inputs: list) -> bool:
    """Whether `gm` runs on `inputs`' sizes (on fake tensors: no data read, no kernel run, no state changed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with grad_mode(False), FakeTensorMode(allow_non_fake_inputs=True):
            gm.forward(*inputs)
    except Exception:  # noqa: BLE001 - eager raises for these sizes too
        return False
    return True


def _size_expressions(gm, sym: symbolic.SymbolicInputs, example_inputs: list) -> size_exprs.SizeExpressions:
    """The size expressions of `gm` and of its aten graph traced over fresh symbols (a trace of its own, so
    that nothing it assumes reaches `sym`'s size check), over `sym`'s symbols."""
    graphs = [(gm.graph, sym._mapping)]
    try:
        fresh = symbolic.SymbolicInputs(gm, example_inputs, strided=True)
        with grad_mode(False):
            aten_gm = to_aten(_IntsBaked(gm, fresh.fake_inputs, fresh.symbolic_ints) if fresh.symbolic_ints else gm,
                              _tensors(fresh.fake_inputs, fresh.symbolic_ints))
        to_frontend = {backend: frontend for frontend, backend in fresh._mapping.items()}
        graphs.append((aten_gm.graph, {b: f.xreplace(sym._mapping) for b, f in to_frontend.items()}))
    except Exception:  # noqa: BLE001 - the aten graph does not trace symbolically: the frontend's expressions
        pass
    atoms, floats = [], []
    for graph, mapping in graphs:
        ints, more = size_exprs.collect([graph], mapping, sym.shape_env.simplify, sym.symbols)
        atoms, floats = atoms + ints, floats + more
    return size_exprs.SizeExpressions(list(dict.fromkeys(atoms)), sym.symbols, list(dict.fromkeys(floats)))


# sizes rounded, truncated or compared in the graph: their values at the probes (multiples of 16 in the
# same order) are not those of every size
_ROUNDING = {operator.mod, operator.floordiv, operator.truediv, operator.and_, operator.or_, operator.xor,
             operator.rshift, math.floor, math.ceil, math.trunc, round, divmod, torch.sym_int, torch.sym_float}


def _rounds_sizes(gm) -> bool:
    return any(n.op == "call_function" and n.target in _ROUNDING for n in gm.graph.nodes)


def _size_relation(gm) -> str | None:
    """A node that computes a SymBool of sizes (`x.size(0) > 3` used by an op or returned): the module
    would hold its value at the probes, where every size is large and the sizes ordered (red team, issue
    13: `x * (x.size(0) > 3)` was wrong for size 3). Such graphs are compiled per shape."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "call_function" and isinstance(val, torch.SymBool) and val.node.maybe_as_bool() is None:
            return node.format_node()
    return None


# NOTE [Extrema of sizes are not fitted]: `x + min(step, x.size(0)) - max(step, x.size(1))` (sym_min/sym_max
# nodes, no guard) was fitted at probes where every symbol is large: `max(step, 6)` fitted as `step`, and the
# module was off by 5 at step 1 (red team, h13dyn2). Such graphs compile per shape, as relations do, unless
# the extremum is passed in as an int input (NOTE [Extrema of sizes as inputs], size_floats.py), which is a
# symbol of its own here, served where it takes the branch the probes took (probe_relations.extrema_untold).
_EXTREMA = (torch.sym_max, torch.sym_min, max, min)


def _size_extremum(gm) -> str | None:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "call_function" and node.target in _EXTREMA and isinstance(val, torch.SymInt) \
                and val.node.maybe_as_int() is None:
            return node.format_node()
    return None


def _odd_probes(sym: symbolic.SymbolicInputs, probes: list, example_inputs: list) -> list[list[int]]:
    base = probes[1]
    singles = [[v + 1 if i == k else v for i, v in enumerate(base)] for k in range(len(base))] if len(base) > 1 else []
    # other residues (3 and 6 past a multiple of 16) tell `(-s) % 8` from `(-s) % 4` and `s // 2` from `s // 4`
    candidates = [[v + 1 for v in base], [v + 3 for v in base], [v + 6 for v in base]] + singles
    accepted = []
    for probe in candidates:
        inputs = _probe_inputs(sym, dict(zip(sym.symbols, probe)), example_inputs)
        if sym.bind(inputs) is not None:
            accepted.append(probe)
    return accepted


def _loop_varying_reductions(runs: list, configs: dict) -> bool:
    """Reductions whose rnumel changes with the probes get a looped config (see the NOTE); True if any."""
    changed = False
    for name, (config, rnumel) in runs[0][6].items():
        varies = any(r[6].get(name, (None, rnumel))[1] != rnumel for r in runs)
        if varies and config.persistent:
            rblock = max(1, min(64, config.rblock))
            configs[name] = codegen.LaunchConfig(max(1, min(config.xblock, 16384 // rblock)), rblock, False)
            changed = True
    return changed


# NOTE [Probes too large to allocate]: with four or more symbols in one input (dynamic=True on an image
# batch: b, c, h, w) a probe tensor has 16**4 x a product of four primes elements (464 x 496 x 592 x 656:
# 357 GB of float32), more than the allocator grants even uninitialised. The RuntimeError reached the
# backend's catch-all, which ran the graph eagerly for every size; then (c377b93) the graph compiled per
# shape with a log line naming neither the input's sizes nor its symbols. Lowering reads no data of its
# inputs, so such a probe is now made of fake tensors (one static FakeTensorMode for all inputs of the
# probe: make_fx traces them as it traces real ones), and the graph gets its size-generic module.
def _probe_inputs(sym: symbolic.SymbolicInputs, values: dict, example_inputs: list) -> list:
    """Inputs like `example_inputs` whose symbolic sizes take `values`. Uninitialised (`empty`): lowering
    traces with fake tensors and reads no data, and the probe sizes are large (16 x the primes in _PROBES:
    three symbols make a 976 x 1552 x 1072 probe, 6.5 GB of float32 that `zeros` would write, ~10 s each);
    fake tensors where an input cannot be allocated (NOTE [Probes too large to allocate])."""
    sizes, scalars = sym.sizes_at(values)
    layouts = {}
    for index, real in enumerate(example_inputs):
        if isinstance(real, torch.Tensor):
            shape = [sizes.get(index, {}).get(d, s) for d, s in enumerate(real.shape)]
            strides = [sizes.get(index, {}).get(("stride", d), s) for d, s in enumerate(real.stride())]
            # NOTE [Strided inputs of symbolic programs] (backends/symbolic.py)
            layouts[index] = (shape, None if real.is_contiguous() else strides)
    try:
        made = {i: _empty(shape, strides, example_inputs[i]) for i, (shape, strides) in layouts.items()}
    except (RuntimeError, MemoryError):  # NOTE [Probes too large to allocate]
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            made = {i: _empty(shape, strides, example_inputs[i]) for i, (shape, strides) in layouts.items()}
    return [made[i] if i in made else scalars.get(i, real) for i, real in enumerate(example_inputs)]


def _empty(shape: list, strides: list | None, like: torch.Tensor) -> torch.Tensor:
    if strides is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return torch.empty_strided(shape, strides, dtype=like.dtype, device=like.device)


class DynamicGraph:
    """A size-generic module (NOTE [Size-generic modules]); calls its size check rejects are compiled for
    their concrete shapes (`specialised`, one CompiledGraph per shape signature, logged)."""

    def __init__(self, gm, module, path, source, bind, bind_source: str, layout: tuple, symbolic_ints: frozenset,
                 constants, out_spec, counts: tuple, device, opts):
        """`bind`: the size check (its source `bind_source`); `layout`: the layout signature served;
        `counts`: (kernels, extern calls, fallback ops) for `explain`. Also rebuilt by persist.py."""
        self.gm, self.module, self.source_path, self.source = gm, module, path, source
        self.bind, self.bind_source = bind, bind_source
        self.symbolic_ints = symbolic_ints
        self.constants, self.out_spec = constants, out_spec
        self.kernel_count, self.extern_count, self.fallbacks = counts
        self.device, self.opts = device, opts
        self.params_require_grad = any(p.requires_grad for p in gm.parameters()) or \
            any(t.requires_grad for t in constants)
        self.grad_inside = switches_grad_on(gm)
        self.layout = layout
        self.specialised = SpecialisingGraph(gm, device, opts, "the sizes fail the size check of the generic module",
                                             self.symbolic_ints)
        self.reason = None
        self.modules = 1  # generated modules loaded for this graph (specialisations count in `specialised`)
        self.out_layouts = output_layouts(gm)  # NOTE [Output strides follow eager] (backends/layout.py)
        self.rerun_on_error = rerun_on_error(gm)  # NOTE [Input writes of a failing kernel program] (runtime.py)

    def __call__(self, *args):
        if needs_autograd(args, self.params_require_grad, self.grad_inside):
            return self.specialised(*args)
        layout = symbolic.layout_signature(args, self.symbolic_ints)
        sizes = self.bind(args) if layout == self.layout else None
        if sizes is None:
            return self.specialised(*args)
        tensors = _tensors(args, self.symbolic_ints) if self.symbolic_ints else args
        versions = written_versions(self.rerun_on_error, tensors)
        try:
            flat = self.module.call(sizes, *tensors, *self.constants, [])
        except Exception:
            if rerun_exactly(self.rerun_on_error, tensors, versions):
                return self.gm.forward(*args)  # NOTE [Input writes of a failing kernel program] (runtime.py)
            raise
        return restore_layouts(pytree.tree_unflatten(list(flat), self.out_spec), self.out_layouts, args)


class SpecialisingGraph:
    """Compiles the graph for each concrete shape signature it is called with (logged each time)."""

    kernel_count = extern_count = 0
    source_path = None
    restride_inputs = False  # passed on to each compilation (NOTE [Restrided inputs of training halves])

    def __init__(self, gm, device, opts, reason: str, ints: frozenset = frozenset()):
        self.gm, self.device, self.opts, self.reason = gm, device, opts, reason
        self.ints = ints  # size-int inputs: fixed into each specialisation (`_IntsBaked`)
        self.compiled: dict = {}

    def __call__(self, *args):
        from . import compile_graph

        key = tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a), a)
                    for a in args)
        compiled = self.compiled.get(key)
        if compiled is None:
            if len(self.compiled) >= _MAX_SPECIALISED:
                return self.gm.forward(*args)
            logs.log("recompiles", "triton: compiling the graph for shapes %s: %s",
                     [k[0] if isinstance(k[0], tuple) else k[1] for k in key], self.reason)
            try:
                if self.ints:
                    compiled = compile_graph(_IntsBaked(self.gm, list(args), self.ints), _tensors(args, self.ints),
                                             self.device, self.opts)
                else:
                    compiled = compile_graph(self.gm, list(args), self.device, self.opts)
            except Exception as exc:
                logs.log("eager_fallback", "triton: specialising failed (%s: %s); these shapes run eagerly",
                         type(exc).__name__, exc)
                compiled = None
            if compiled is not None and self.restride_inputs:
                compiled.restride_inputs = True
            self.compiled[key] = compiled
        if compiled is None:
            return self.gm.forward(*args)
        return compiled(*(_tensors(args, self.ints) if self.ints else args))
