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
made (eager makes it only when the failing op comes later: a known gap; an attribute, global or cell stored
both before and after the first op is not made at all). Also not made (known gaps, the old behaviour): values
that are not such constants (a tensor, an object, a float input), a container mutated other than by a logged
call, outside iterators, finishing calls, cells found through a source, and every effect of an entry loaded
from the frame cache (on_graph_error is not persisted).
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch

from .. import logs
from .values import Value
from .codegen import GRAPH_OUT, Codegen, FunctionShape, Reconstructor, graph_call_span, make_function
from .side_effects import SideEffects
from .side_effects import SAFE_INT_OPS
from .values import ConstantValue, TupleValue
from .values.scalars import SymNodeValue

_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _int_leaves(node: torch.fx.Node, leaves: dict) -> bool:
    """`node` computes an int from placeholders by SAFE_INT_OPS and int constants; fills `leaves`."""
    if node.op == "placeholder":
        leaves[node] = None
        return isinstance(node.meta.get("val"), (int, torch.SymInt))
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
        return _int_leaves(value.node, leaves) and all(leaf in inputs for leaf in leaves)
    return False


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
            self.inputs[leaf].reload(self.cg)
        self.cg.call(2 + len(leaves))


def _early(se: SideEffects, inputs: dict) -> SideEffects | None:
    """The effects recorded before the graph's first op whose values are plain constants."""
    def plain(v):
        return _plain(v, inputs)
    early = SideEffects()
    for c in se.containers.values():  # a container's logged calls before the first op
        ops = [op for k, (value, op) in enumerate(se.ops) if value is c and ("op", k) not in se.late]
        if not ops or any(op is None or not all(map(plain, op[1])) for op in ops):
            continue
        early.containers[id(c)] = c
        early.ops += [[c, op] for op in ops]
    for key, (obj, name, value) in se.attrs.items():
        if ("attr", *key) not in se.late and plain(value):
            early.attrs[key] = (obj, name, value)
            if key in se.raw_attrs:
                early.raw_attrs.add(key)
    for key, entry in se.globals.items():
        if ("global", *key) not in se.late and plain(entry[2]):
            early.globals[key] = entry
    for key, (cell, value) in se.cells.items():
        if ("cell", key) not in se.late and key not in se.cell_sources and plain(value):
            early.cells[key] = (cell, value)
    return early if early else None


def on_graph_error(fn: types.FunctionType, shape: FunctionShape, output: Any, has_graph: bool,
                   reruns: bool) -> Callable | None:
    """The function that makes the effects before the graph's first op (NOTE [Effects before a failing
    graph]), or None when there are none or the entry reruns eagerly instead."""
    if not has_graph or reruns:
        return None
    inputs = {inp.value.node: inp.source for inp in output.inputs
              if isinstance(getattr(inp, "value", None), SymNodeValue) and inp.source is not None}
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


__all__ = ["graph_call_frame", "make_effects", "on_graph_error"]
