"""Floats computed from symbolic sizes, passed to a lowered program as float inputs.

NOTE [Floats of sizes as inputs]: a graph with symbolic sizes can compute a Python float from them and use
it on tensors: attention's `x * (1 / x.size(-1) ** 0.5)`, `x / (step + 1.5)` with a symbolic int `step`, a
mean written `x.sum() / x.numel()` scaled by `n / (n + 1)`. The node's value is a SymFloat; lowering
(make_fx) bakes its value at the example's sizes into the program, so triton's size-generic module saw a
float literal that changes with the sizes ('a kernel body depends on a symbolic size beyond integer
literals') and compiled the graph once per shape (6 modules over 6 widths; stock torch.compile 1).
Here such a float is computed outside the program, as eager computes it (Python float arithmetic on the
call's real sizes and ints), and passed in as a float input: the graph is split into

- `prefix`: the nodes the floats depend on (size reads of inputs, int inputs, scalar arithmetic), returning
  the floats; it runs as Python on the call's inputs (NOTE [Graphs that only read sizes], capture side);
- `inner`: the graph with each such float replaced by a new placeholder marked `dynamic_float`, which
  NOTE [Float inputs as tensors] (float_inputs.py) turns into a 0-d float64 tensor cast to the result's
  dtype where it meets tensors, exactly as torch casts a Python scalar.

NOTE [Relations of sizes as inputs]: a relation of sizes used as a number (`y + (x.size(0) >= x.size(1))`) is a
SymBool node; triton's probes would fix its value (all sizes large and ordered), so such graphs compiled per
shape (`_size_relation`, dynamic.py: 6 modules over 6 shapes for 3 graphs). It is passed the same way, as
the float 1.0 or 0.0: where float_inputs takes it (a float32/float64 result of +, -, *, / and the like) torch
computes `y + True` as `y + 1` in y's dtype, which is what the cast of 1.0 to y's dtype gives.

Only the uses by tensor ops read the new input; scalar uses of the same node (`int(s * 10)` for a size) keep
computing it in the graph. Taken only where the inner graph can be rewritten so (`floats_as_tensors` succeeds): any other use of such
a float (an argument torch reads as a Scalar of another dtype, a graph output) keeps the graph as it was,
compiled per shape with the reason logged. A float whose value is needed by a size (`int(n * 0.5)`) is not
a float used by a tensor op and stays in the graph (its SymInt is a size like any other).
Persisted: NOTE [Persisted size floats].

NOTE [Extrema of sizes as inputs]: `n = max(x.size(0), y.size(0))` (a sym_max/sym_min node) used as a size
(`F.pad(x, (0, 0, 0, n - x.size(0)))`, `x[:n]`) made triton's graph compile per shape (NOTE [Extrema of
sizes are not fitted], dynamic.py: 6 modules over 6 shapes for 1 graph; the eager backend and stock
torch.compile 1). Such an int is computed by the prefix too (Python's max/min of the call's sizes) and
passed as an int input marked `size_extremum` (every use reads it, scalar uses included, so no Max is left
in the inner graph). The backend makes it a symbol of its own, defined as the extremum of the others
(backends/symbolic.py `definitions`: its size check tests the definition on every call, triton's probes
take its value), so the module's literals are fitted over it. Where every probe gives it the value of one
of its arguments (`max(x.size(1), 3)`: every probe is above 3), a literal could be fitted as that argument
(wrong at width 2: a (2, 2) result for eager's (2, 3)), so the module serves only the calls where it equals
that argument (`s2 == s1` added to the size check, probe_relations.extrema_untold); the others compile per
shape.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from ..grad_mode import grad_mode
import torch.fx

_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def _symbolic_float(node: torch.fx.Node) -> bool:
    """A SymFloat, or a SymBool (NOTE [Relations of sizes as inputs]), whose value the sizes decide."""
    val = node.meta.get("val")
    if isinstance(val, torch.SymBool):
        return val.node.maybe_as_bool() is None
    return isinstance(val, torch.SymFloat) and val.node.maybe_as_float() is None


def _tensor_use(user: torch.fx.Node) -> bool:
    return not isinstance(user.meta.get("val"), _SCALARS)


def _scalar_only(node: torch.fx.Node) -> bool:
    """`node` computes a Python scalar from sizes and scalars (never reads tensor data)."""
    if node.op == "placeholder":
        return True
    if node.op == "call_method" and node.target in ("size", "dim", "numel", "stride"):
        return isinstance(node.meta.get("val"), _SCALARS + (torch.Size, tuple))
    if node.op != "call_function":
        return False
    val = node.meta.get("val")
    if isinstance(val, (tuple, torch.Size)) and all(isinstance(v, _SCALARS) for v in val):
        return True  # `x.shape` read whole, then indexed
    return isinstance(val, _SCALARS)


def _ancestors(nodes: list) -> list:
    seen, stack = set(), list(nodes)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return list(seen)


_EXTREMA = (torch.sym_max, torch.sym_min, max, min)


def _extremum(node: torch.fx.Node) -> bool:
    """A max or min of sizes (NOTE [Extrema of sizes as inputs]) whose value the sizes decide."""
    val = node.meta.get("val")
    return node.op == "call_function" and node.target in _EXTREMA and isinstance(val, torch.SymInt) \
        and val.node.maybe_as_int() is None and bool(node.users)


def size_floats(gm: torch.fx.GraphModule) -> list:
    """The nodes of `gm` that compute a symbolic float (a SymFloat of sizes) used by a tensor op, and its
    extrema of sizes (NOTE [Extrema of sizes as inputs])."""
    found = []
    for node in gm.graph.nodes:
        if _extremum(node):
            found.append(node)
            continue
        if node.op != "call_function" or not _symbolic_float(node):
            continue
        if any(_tensor_use(user) for user in node.users):
            found.append(node)
    if not found or not all(_scalar_only(n) for n in _ancestors(found)):
        return []
    return found


def _erase_dead_scalars(graph: torch.fx.Graph, replaced: list) -> None:
    """Erase the replaced float nodes left without users, and the scalar arithmetic only they read.
    NOTE [Floats of sizes as inputs]: never torch.fx's eliminate_dead_code, which drops in-place methods
    (`y.mul_(s)`, `x.fill_(s)`) and `out=` calls whose results are unused, so their writes were lost."""
    candidates = set(_ancestors(replaced))
    for node in reversed(list(graph.nodes)):
        if node in candidates and not node.users and node.op in ("call_function", "call_method") \
                and _scalar_only(node):
            graph.erase_node(node)


def split(gm: torch.fx.GraphModule, floats: list, layout: dict | None = None) -> \
        tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """(prefix computing `floats` from gm's inputs, inner graph taking them as extra placeholders). With a
    persisted `layout` (NOTE [Persisted size floats]) the tensor uses and the nodes kept are the layout's
    (a loaded graph has no values to tell them by)."""
    prefix_graph = torch.fx.Graph()
    env: dict = {}
    needed = set(_ancestors(floats))
    for node in gm.graph.nodes:
        if node.op == "placeholder" or node in needed:
            env[node] = prefix_graph.node_copy(node, lambda n: env[n])
    prefix_graph.output(tuple(env[n] for n in floats))
    prefix = torch.fx.GraphModule(gm, prefix_graph)

    inner_graph = copy.deepcopy(gm.graph)
    by_name = {n.name: n for n in inner_graph.nodes}
    last = [n for n in inner_graph.nodes if n.op == "placeholder"][-1]
    extrema = _extrema_of(floats, layout)
    for k, node in enumerate(floats):
        old = by_name[node.name]
        with inner_graph.inserting_after(last):
            new = inner_graph.placeholder(f"size_{'int' if k in extrema else 'float'}_{k}")
        if "val" in old.meta:
            new.meta["val"] = old.meta["val"]
        new.meta["size_extremum" if k in extrema else "dynamic_float"] = True
        uses = _tensor_use if layout is None else (lambda user, _k=k: user.name in layout["tensor_uses"][_k])
        if k in extrema:  # NOTE [Extrema of sizes as inputs]: every use
            uses = (lambda user: True) if layout is None else uses
        old.replace_all_uses_with(new, delete_user_cb=uses)  # scalar uses keep computing in the graph
        last = new
    if layout is None:
        _erase_dead_scalars(inner_graph, [by_name[n.name] for n in floats])
    else:
        kept = set(layout["inner_nodes"])
        for node in reversed(list(inner_graph.nodes)):
            if node.name not in kept and not node.users and node.op in ("call_function", "call_method"):
                inner_graph.erase_node(node)
    inner_graph.lint()
    return prefix, torch.fx.GraphModule(gm, inner_graph)


def _extrema_of(nodes: list, layout: dict | None) -> set:
    """Positions in `nodes` of the extrema (NOTE [Extrema of sizes as inputs]), from the values or `layout`."""
    if layout is not None:
        return set(layout.get("extrema", ()))
    return {k for k, node in enumerate(nodes) if _extremum(node)}


def _layout(gm: torch.fx.GraphModule, floats: list, inner: torch.fx.GraphModule) -> dict:
    """What `split` decided from the graph's values, by node names (NOTE [Persisted size floats])."""
    extrema = _extrema_of(floats, None)
    return {"floats": [n.name for n in floats],
            "tensor_uses": [[u.name for u in n.users if k in extrema or _tensor_use(u)] for k, n in enumerate(floats)],
            "inner_nodes": [n.name for n in inner.graph.nodes], "extrema": sorted(extrema)}


def _casts(layout: dict, count: int) -> list:
    """int for the extrema (NOTE [Extrema of sizes as inputs]), float for the others."""
    extrema = set(layout.get("extrema", ()))
    return [int if k in extrema else float for k in range(count)]


class SizeFloatsGraph:
    """`compiled` (from the inner graph) called with the floats `prefix` computes from the call's inputs
    appended; other attributes are the compiled callable's (counts and summaries, for explain and tests)."""

    def __init__(self, compiled: Callable, prefix: torch.fx.GraphModule, layout: dict | None = None) -> None:
        self.compiled, self.prefix, self.layout = compiled, prefix, layout
        self.casts = _casts(layout or {}, len(prefix.graph.find_nodes(op="output")[0].args[0]))

    def __call__(self, *args: Any) -> Any:
        # forward, not __call__: GraphModule's call prints its 'Call using an FX-traced Module' block to stderr
        # on any exception (a ZeroDivisionError of sizes), which eager never prints
        return self.compiled(*args, *_cast(self.casts, self.prefix.forward(*args)))

    def __getattr__(self, name: str) -> Any:
        if name in ("compiled", "prefix", "layout", "casts"):  # an instance not initialised (copy.copy looks for __setstate__)
            raise AttributeError(name)
        return getattr(self.compiled, name)


def _cast(casts: list, values) -> list:
    return [cast(value) for cast, value in zip(casts, values)]


def compile_with_size_floats(gm: torch.fx.GraphModule, example_inputs, backend: Callable,
                             log: Callable) -> Callable | None:
    """`backend(inner, examples + floats)` wrapped to compute the floats per call (NOTE [Floats of sizes as
    inputs]), for a graph that has such floats and whose inner graph takes them as float inputs; else None."""
    from .float_inputs import NotRewritable, floats_as_tensors

    try:
        floats = size_floats(gm)
        if not floats:
            return None
        prefix, inner = split(gm, floats)
        floats_as_tensors(inner)  # raises NotRewritable where the floats meet tensors in a way it cannot write
    except NotRewritable as why:
        log(f"floats of sizes stay in the graph: {why}")
        return None
    except Exception as error:  # noqa: BLE001 - internal failures never reach the user: compiled as before
        log(f"floats of sizes stay in the graph: splitting failed ({type(error).__name__}: {error})")
        return None
    layout = _layout(gm, floats, inner)
    with grad_mode(False):
        values = _cast(_casts(layout, len(floats)), prefix.forward(*example_inputs)) if example_inputs is not None else None
    examples = None if example_inputs is None else [*example_inputs, *values]
    return SizeFloatsGraph(backend(inner, examples), prefix, layout)


# NOTE [Persisted size floats]: a SizeFloatsGraph's artifact (kind "size_floats") is the layout `split` found
# (the float nodes by name, the names of their tensor uses, the names of the inner graph's nodes) and the
# artifact of what the backend compiled from the inner graph. A persisted graph has names and no values, so
# `load_size_floats` splits it by the layout (a name it does not hold is an ArtifactError: the frame cache
# compiles again), computes the example's floats with the prefix and loads the inner artifact for the inner
# graph and those inputs. Before, such graphs were kept in memory only: every warm process traced and
# compiled `x * (1 / x.size(-1) ** 0.5)` on triton again.
KIND = "size_floats"


def save_size_floats(compiled: SizeFloatsGraph, save: Callable) -> bytes | None:
    """The artifact of a SizeFloatsGraph (NOTE [Persisted size floats]); None where the inner compiled object
    has none. `save` is the backend's own."""
    from .artifact import pack
    inner = save(compiled.compiled)
    if inner is None or compiled.layout is None:
        return None
    return pack(KIND, compiled.layout, {"inner": inner})


def load_size_floats(data: bytes, gm: torch.fx.GraphModule, example_inputs, load: Callable) -> Callable | None:
    """The SizeFloatsGraph `save_size_floats` saved, or None when `data` is another kind of artifact; raises
    ArtifactError where `gm` does not split by the persisted layout."""
    from .artifact import ArtifactError, kind_of, unpack
    if kind_of(data) != KIND:
        return None
    layout, blobs = unpack(data, KIND)
    if example_inputs is None:
        raise ArtifactError("size floats: the floats are computed from the call's inputs, which were not given")
    by_name = {n.name: n for n in gm.graph.nodes}
    try:
        prefix, inner = split(gm, [by_name[name] for name in layout["floats"]], layout)
        with grad_mode(False):
            values = _cast(_casts(layout, len(layout["floats"])), prefix.forward(*example_inputs))
    except (KeyError, TypeError, ValueError, RuntimeError) as why:
        raise ArtifactError(f"size floats: the loaded graph does not split by the persisted layout ({why})") from None
    return SizeFloatsGraph(load(blobs["inner"], inner, [*example_inputs, *values]), prefix, layout)


__all__ = ["SizeFloatsGraph", "compile_with_size_floats", "load_size_floats", "save_size_floats", "size_floats",
           "split"]
