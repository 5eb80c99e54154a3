"""Side effects a call makes when its graph raises at run time and the call cannot rerun eagerly.

NOTE [Effects before a failing graph]: side effects are replayed after the graph (NOTE [Mutation log] in
side_effects.py). When the graph raises at run time (an index out of range: fake tensors cannot tell) and the
call cannot rerun eagerly (its graph writes an input in place or draws random numbers: NOTE [Graph failures
rerun eagerly] in requests.py), the replay never runs; yet eager made every effect that precedes the failing
op in program order before raising. Where the failing op lies in the fused graph is unknown, but an effect
recorded before the graph's first op (`SideEffects.late` does not hold its key; for a container, each logged
call before the first op: NOTE [Mutation log]) precedes every op that can fail: eager made it whichever op
failed. So such an entry gets `on_graph_error`, a function of the frame's signature that makes exactly those
effects; the hook calls it (with the call's arguments) when the exception came from the graph call (NOTE
[Graph call span]), then re-raises the exception. Only effects whose values are plain immutable constants
(ints, strs, tuples of them, ...) or symbolic ints computed from int inputs by `+ - *` (NOTE [Dynamic ints]: a
counter that changed between calls, recomputed in Python from the inputs' sources, read before any write) are
made: they read no tensor the failed graph may have half-written, so making them after the graph's partial
writes is what eager's order shows (`log.append("a")`, `global N; N += 1`, `self.calls += 1`, `d["k"] = 1`).
Such int arithmetic (SAFE_INT_OPS in side_effects.py) cannot raise, so it is no "op" for `late`
(SideEffects._mark), nor are elementwise tensor ops that cannot fail once traced (NOTE [Tensor ops that cannot
fail at run time]). An effect recorded after any other op may precede or follow the failing op; it is not
made here (an attribute, global or cell stored both before and after the first op is not made at all), nor
are values that are not such constants (a tensor, an object, a float input), a container mutated other than
by a logged call, outside iterators, finishing calls and cells found through a source: NOTE [Effects between
failing ops] makes such calls exact instead.

NOTE [Effects between failing ops]: an effect that on_graph_error does not make is still right when no op that
may fail at run time (`side_effects._may_fail`) follows its first write: eager then never makes it before
raising either. Otherwise (`log.append(x.size(0))` after a node that is an op, an append between two tensor
indexes; review revQ HIGH-2: `x.add_(1); log.append(x.size(0)); return x[torch.tensor([3])] * 2` with a size-3
`x` raised with `log == []`, eager `[3]`) eager makes it exactly when the failing op comes later, which only
eager can tell: `effects_need_rerun` asks handler_reruns.restore_plan to clone the inputs the graph writes (and
save the random generators it draws from) before each call and put them back when the call raises, so the
call reruns eagerly (NOTE [Failing graphs inside handlers], NOTE [Graph failures rerun eagerly]) and makes
exactly eager's effects. SideEffects numbers the ops that may fail in program order as it records effects
(`first_marks`, `last_failing_op`); draws from the `random` module, made after the graph (NOTE [Draws from the
random module]), count as made before every op (review revS MED-1: a failing call drew nothing). The snapshot
costs a copy of the written inputs per call, so it is taken only for such effects: one made after the graph's
last op that may fail (a step counter at the end of a forward that writes a cache) needs none, and only ops
whose success depends on values may fail (NOTE [Ops that fail on values] in failing_ops.py); above 4 MiB of
written inputs a call takes none (NOTE [Bounded snapshots] in handler_reruns.py). The snapshot puts back values,
version counters, sizes, strides and offsets (an in-place `unsqueeze_`/`t_` of an input: review revS HIGH-1, the
rerun applied it twice). Where the writes cannot be put back (a view autograd tracks: NOTE [Rewound histories],
inference mode, a generator of the program's own: `unrestorable`; an in-place change of storage such as
`resize_`/`set_`, or an `out=` write: `metadata_kept`) the old behaviour stays (a known gap). The plan is
persisted with the entry
(frame_cache.Persisted.restore): an entry loaded from the frame cache reruns the same way, where on_graph_error
is not persisted.
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch

from .. import logs
from .values import Value
from .codegen import GRAPH_OUT, Codegen, FunctionShape, Reconstructor, graph_call_span, make_function
from .side_effects import SideEffects
from .side_effects import SAFE_INT_OPS, SAFE_TENSOR_METHODS, is_size_read
from .values import ConstantValue, TensorValue, TupleValue
from .values.scalars import SymNodeValue

_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _int_leaves(node: torch.fx.Node, leaves: dict) -> bool:
    """`node` computes an int from placeholders and sizes of tensor placeholders (side_effects.is_size_read) by
    SAFE_INT_OPS and int constants; fills `leaves`."""
    if node.op == "placeholder":
        leaves[node] = None
        return isinstance(node.meta.get("val"), (int, torch.SymInt))
    if is_size_read(node) and isinstance(node.meta.get("val"), (int, torch.SymInt)):
        leaves[node] = None
        return _sizes_kept(_tensor_of(node))
    if node.op != "call_function" or node.target not in SAFE_INT_OPS or node.kwargs:
        return False
    return all(_int_leaves(a, leaves) if isinstance(a, torch.fx.Node) else type(a) is int for a in node.args)


def _plain(value: Any, inputs: dict) -> bool:
    if isinstance(value, ConstantValue):
        return type(value.value) in _PLAIN
    if isinstance(value, TupleValue):
        return type(value).__name__ == "TupleValue" and all(_plain(v, inputs) for v in value.items)
    if isinstance(value, SymNodeValue) and isinstance(value.sym, torch.SymInt):
        leaves: dict = {}
        return _int_leaves(value.node, leaves) and all(_tensor_of(leaf) in inputs for leaf in leaves)
    return False


def _sizes_kept(placeholder: torch.fx.Node) -> bool:
    """No op of the graph changes the sizes of the input `placeholder` (no `resize_`, `unsqueeze_`, `set_`, no
    `out=` into it): a size read after the graph failed is the size eager read."""
    for user in placeholder.users:
        name = user.target if isinstance(user.target, str) else getattr(user.target, "__name__", "")
        if (name.endswith("_") and not name.endswith("__") and name not in SAFE_TENSOR_METHODS) or \
                user.kwargs.get("out") is not None:
            return False
    return True


def _tensor_of(leaf: torch.fx.Node) -> torch.fx.Node:
    """The placeholder whose Source reloads what a leaf of `_int_leaves` is computed from."""
    while leaf.op != "placeholder":
        leaf = leaf.args[0]
    return leaf


def _size_read(node: torch.fx.Node, tensor: torch.Tensor) -> int:
    """What the size read `node` (side_effects.is_size_read) gives for `tensor`, the call's input."""
    if node.op == "call_function":  # an item of `t.size()`
        return tensor.size()[node.args[1]]
    return getattr(tensor, node.target)(*node.args[1:])


def _evaluate(node: torch.fx.Node, leaves: tuple, *values: int) -> int:
    """The int `node` computes, from the leaves' values (NOTE [Effects before a failing graph])."""
    env = dict(zip(leaves, values))

    def value(n):
        if n not in env:
            env[n] = n.target(*[value(a) if isinstance(a, torch.fx.Node) else a for a in n.args])
        return env[n]
    return value(node)


class _Rebuild(Reconstructor):
    """Rebuilds symbolic ints from the sources of the graph inputs they derive from (no graph ran)."""

    def __init__(self, cg: Codegen, f_globals: dict, inputs: dict) -> None:
        super().__init__(cg, {}, GRAPH_OUT, f_globals)
        self.inputs = inputs  # placeholder node -> its Source

    def emit(self, value: Value) -> None:
        if not isinstance(value, SymNodeValue):
            return super().emit(value)
        leaves: dict = {}
        _int_leaves(value.node, leaves)
        self.cg.push_null()
        self.cg.load_const(_evaluate)
        self.cg.load_const(value.node)
        self.cg.load_const(tuple(leaves))
        for leaf in leaves:
            if leaf.op == "placeholder":
                self.inputs[leaf].reload(self.cg)
                continue
            self.cg.push_null()  # a size of a tensor input, read again from the input
            self.cg.load_const(_size_read)
            self.cg.load_const(leaf)
            self.inputs[_tensor_of(leaf)].reload(self.cg)
            self.cg.call(2)
        self.cg.call(2 + len(leaves))


def _early(se: SideEffects, inputs: dict, made: set | None = None) -> SideEffects | None:
    """The effects recorded before the graph's first op whose values are plain constants; `made` collects their
    keys (as SideEffects._mark names them, a container's logged call as ("op", index))."""
    def plain(v):
        return _plain(v, inputs)
    made = set() if made is None else made
    early = SideEffects()
    for c in se.containers.values():  # a container's logged calls before the first op
        ops = [(k, op) for k, (value, op) in enumerate(se.ops) if value is c and ("op", k) not in se.late]
        if not ops or any(op is None or not all(map(plain, op[1])) for _, op in ops):
            continue
        early.containers[id(c)] = c
        early.ops += [[c, op] for _, op in ops]
        made.update(("op", k) for k, _ in ops)
    for key, (obj, name, value) in se.attrs.items():
        if ("attr", *key) not in se.late and plain(value) and key not in se.deleted_attrs | se.readded_attrs:
            early.attrs[key] = (obj, name, value)
            made.add(("attr", *key))
            if key in se.raw_attrs:
                early.raw_attrs.add(key)
    for key, entry in se.globals.items():
        if ("global", *key) not in se.late and plain(entry[2]):
            early.globals[key] = entry
            made.add(("global", *key))
    for key, (cell, value) in se.cells.items():
        if ("cell", key) not in se.late and key not in se.cell_sources and plain(value):
            early.cells[key] = (cell, value)
            made.add(("cell", key))
    return early if early else None


def _symbolic_inputs(output: Any) -> dict:
    """Placeholder node -> Source of the graph inputs that are symbolic ints or tensors."""
    return {inp.value.node: inp.source for inp in output.inputs
            if isinstance(getattr(inp, "value", None), (SymNodeValue, TensorValue)) and inp.source is not None
            and getattr(inp.value, "node", None) is not None}


# in-place ops that change a tensor's storage, the region of it the tensor covers, or its autograd identity: the
# snapshot of RestoredOnError (values, version counters, sizes, strides and offset of the tensor's own region)
# cannot put that back, so a graph holding one gets no snapshot for its effects. In-place view ops that keep the
# region (`unsqueeze_`, `t_`, `transpose_`...) are restorable: the snapshot puts their sizes back
# (handler_reruns._restore; review revS HIGH-1). `as_strided_` may move the tensor onto storage outside the
# region the snapshot cloned, whose writes the rerun would then make twice (review revA2 HIGH-2)
METADATA_WRITES = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "detach_", "requires_grad_"})


def metadata_kept(output: Any) -> bool:
    """No op of the trace's graph changes a tensor's metadata in place or writes an `out=` tensor (which may
    resize it): a rerun from handler_reruns' snapshot starts from eager's state (NOTE [Effects between failing
    ops])."""
    for node in output.graph.nodes:
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if node.op in ("call_function", "call_method") and (name in METADATA_WRITES or "out" in node.kwargs):
            return False
    return True


def effects_need_rerun(output: Any) -> bool:
    """Some effect of the trace is made by eager before an op of the graph that may fail at run time, and
    `on_graph_error` would not make it (NOTE [Effects between failing ops])."""
    se = output.side_effects
    from .python_draws import has_draws  # NOTE [Draws from the random module]: made after the graph too
    if not se and not has_draws(output):
        return False
    made: set = set()
    _early(se, _symbolic_inputs(output), made)
    last = se.last_failing_op()
    keys = [("op", k) for k in range(len(se.ops))]
    keys += [("attr", *key) for key in se.attrs] + [("global", *key) for key in se.globals]
    keys += [("cell", key) for key in se.cells] + [("item", k) for k in range(len(se.item_writes))]
    keys += [("tensor_hook", k) for k in range(len(se.tensor_hooks))]
    if se.finishing_calls or se._moved_iterators() or has_draws(output):
        keys.append(("unmarked",))  # never marked: counts as made before every op
    return any(key not in made and se.first_marks.get(key, 0) < last for key in keys)


def on_graph_error(fn: types.FunctionType, shape: FunctionShape, output: Any, has_graph: bool,
                   reruns: bool) -> Callable | None:
    """The function that makes the effects before the graph's first op (NOTE [Effects before a failing
    graph]), or None when there are none or the entry reruns eagerly instead."""
    from .handler_reruns import snapshot_bounded  # NOTE [Bounded snapshots]: a call without one does not rerun
    if not has_graph or reruns and not snapshot_bounded(output):
        return None
    inputs = _symbolic_inputs(output)
    early = _early(output.side_effects, inputs)
    if early is None:
        return None
    cg = Codegen()
    early.emit(_Rebuild(cg, fn.__globals__, inputs))
    cg.load_const(None)
    cg.return_value()
    return make_function(shape, cg, fn.__globals__, fn.__defaults__, fn.__kwdefaults__, suffix="graph_error")


def graph_call_frame(entry: Any, exc: BaseException) -> types.FrameType | None:
    """The frame of `entry`'s transformed function in `exc`'s traceback when its graph call raised `exc`."""
    code = entry.fn.__code__
    start, end = graph_call_span(code)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None and start <= tb.tb_lasti < end else None


def make_effects(entry: Any, exc: BaseException, args: tuple, kwargs: dict) -> None:
    """`exc` propagates from `entry`'s transformed function: when the graph call raised it, make the
    effects that precede the graph's ops (NOTE [Effects before a failing graph])."""
    function = entry.on_graph_error
    if graph_call_frame(entry, exc) is None:
        return
    # NOTE [Live defaults]: the entry's function binds with the defaults of now
    function.__defaults__, function.__kwdefaults__ = entry.fn.__defaults__, entry.fn.__kwdefaults__
    try:
        function(*args, **kwargs)
    except Exception as e:  # internal: never replaces the user's exception
        logs.log("eager_fallback", "the effects before a failing graph of %s were not made: %s: %s",
                 entry.fn.__code__.co_qualname, type(e).__name__, e)


__all__ = ["effects_need_rerun", "graph_call_frame", "make_effects", "on_graph_error"]
