"""Eager's recomputation for a captured reentrant checkpoint whose frame's guards fail in the backward (NOTE [State
changed between the forward and the backward]).

`recipe(value, ...)` (while tracing the call) says how to get `fn` or an argument again at run time; `Recall`
(made when the entry is compiled) gets those objects from the frame's arguments at the graph call; `bind_frame`
lets the graph's ReentrantCalls see the frame's arguments and its guards.
"""
from __future__ import annotations

import functools
import threading
import types

import torch

# NOTE [State changed between the forward and the backward]
# Eager's CheckpointFunction keeps `fn` and its arguments from the forward and calls `fn` again in the backward:
# the recomputation reads the Python state of that moment. A captured region runs the values of its trace,
# guarded when the frame was called: a schedule setting a scale read by `fn`, `model.eval()` or a global changed
# between the forward and the backward gave that backward silently different gradients (review revY H1). So
# each ReentrantCall whose `fn` and non-tensor arguments can be got again from the frame (a source: `self.block`,
# a closure's function, a global; a constant; a function made in the frame over such values, a bound method)
# keeps them from the graph call (`Recall`: one generated function over the frame's parameters, as a guard
# function is), with the frame's guard function and arguments and the frame's grad mode (`bind_frame`: the
# entry's guard check notes the call's arguments, the graph call takes them, per thread). The recomputation first
# checks the frame's guards again, under the frame's grad mode (it runs under enable_grad), and reads the graph
# inputs the region reads again from their sources (a Parameter of the block replaced by one of the same shape,
# which no guard tells apart, a float made a graph input: NOTE [Dynamic floats]): where the guards hold and
# those are the same, the region is what `fn` would run; otherwise `fn` itself runs on torch's detached
# arguments, as eager's recomputation, for that backward (review revY H1: a scale attribute, a global dict value,
# `model.eval()` with BatchNorm in the block, a replaced Parameter). Every kind of `fn` has a recipe (review revAF
# HIGH): a function, a bound method, a module, a functools.partial (transformers' `partial(forward, self,
# **kwargs)`), a function made in the frame (its real cells themselves, its other cells as they hold at the call:
# NOTE [Cells written after the call]), tuples of such values; a tensor (or symbolic size) of the trace that is not one of the tensor arguments (a closure's
# `h = x.sin()`, HF's position_embeddings) is held by the graph call as an extra input of the ReentrantCall (the
# region does not read it), and each tensor argument is torch's detached one at its position (one tensor passed
# twice: two). A `fn` or argument with no recipe (an object made in the frame) is a break: torch's checkpoint runs
# there with the real objects; so is a call whose getter cannot be made (the frame is traced again). Graphs
# compiled before a break are bound as the frame's one is; a frame entry holding such a call is not persisted
# (NOTE [Persisted reentrant checkpoints]). Not covered (the region runs, as before): a getter that raises at the
# graph call, a reentrant call inside another's region in that region's recomputation (the outer one's check
# covers it), state changed during the backward (a hook setting it: the guards are checked once per backward and
# frame call). Cost: where such a call is captured, per frame call a
# wrapper of the guard check and of the graph call and per region one call of the generated function; per backward
# a guard check per frame call, and per region that call again where the region reads graph inputs; the frame's
# arguments and the held values stay alive with the region's autograd graph.
_THREAD = threading.local()


class Got:
    """What the recipes of one call read: `sources` (got by the generated getter), `nodes` (values of the trace the
    graph call holds) and `cells` (cells of the trace a made function closes over, with what they held at the call,
    and their name in the root frame or None)."""

    def __init__(self) -> None:
        self.sources: list = []
        self.nodes: list = []
        self.cells: list = []
        self.reads = None  # reentrant_reads.RegionReads: NOTE [State the frame writes around a reentrant call]


def recipe(value, got: Got):
    """How to get `value` again at run time: ("value", i) of `got.sources`, ("const", v), ("node", j) (the j-th of
    `got.nodes`: a tensor or symbolic number of the trace, which the graph call holds), ("made", ...) a function
    made in the frame, ("bound", f, self), ("partial", f, args, keywords), ("tuple", items); None: it cannot be
    got again."""
    from .sources import LocalSource
    from .values import TensorValue, TupleValue
    from .values.base import LazyArg
    from .values.callables import BoundMethodValue, PartialValue, UserFunctionValue
    from .values.scalars import SymFloatValue, SymNodeValue
    if isinstance(value, (TensorValue, SymNodeValue, SymFloatValue)):
        node = getattr(value, "node", None)
        if not isinstance(node, torch.fx.Node):
            return None
        known = [v.node for v in got.nodes]
        if node not in known:
            got.nodes.append(value)
            known.append(node)
        return ("node", known.index(node))
    if isinstance(value, LazyArg):  # a root frame argument not read yet
        value = _Sourced(LocalSource(value.name))
    if getattr(value, "source", None) is not None:
        got.sources.append(value.source)
        return ("value", len(got.sources) - 1)
    if value.is_constant():
        return ("const", value.as_constant())
    if isinstance(value, TupleValue) and value.python_type() is tuple:
        items = tuple(recipe(v, got) for v in value.items)
        return None if None in items else ("tuple", items)
    if isinstance(value, BoundMethodValue):
        func, owner = recipe(value.func, got), recipe(value.self_value, got)
        return None if func is None or owner is None else ("bound", func, owner)
    if isinstance(value, PartialValue):
        return _partial(value, got)
    if isinstance(value, UserFunctionValue) and value.attrs is None and value.closure is None:
        return ("const", value.fn)  # a function from outside, reached through guarded objects (a class's method)
    if isinstance(value, UserFunctionValue) and not value.kwdefaults and not value.attrs:
        return _made(value, got)
    return None


def _partial(value, got: Got):
    """A functools.partial made in the frame (HF's `partial(forward, self, **kwargs)`), as `recipe`."""
    if value.keywords is not None:
        return None
    func = recipe(value.func, got)
    args = tuple(recipe(v, got) for v in value.args)
    keywords = tuple((k, recipe(v, got)) for k, v in value.kwargs.items())
    if func is None or None in args or any(r is None for _, r in keywords):
        return None
    return ("partial", func, args, keywords)


def _made(value, got: Got):
    """A function made in the frame: its code over cells `recipe` gets again (a real cell itself, eager's function
    closing over it reads it in the backward; a cell of the trace as it holds its value at the call: NOTE [Cells
    written after the call]) and defaults."""
    from .translator import RealCell
    from .values.callables import CellValue
    cells = []
    for cell in value.closure or ():
        item = None
        if isinstance(cell, RealCell):  # the same cell object every call (its function guarded) or got by source
            item = ("const", cell.cell) if cell.source is None else recipe(_Sourced(cell.source), got)
            item = item and ("real", item)
        elif isinstance(cell, CellValue) and not cell.deleted and cell.contents is not None:
            item = recipe(cell.contents, got)
            item = item and ("fresh", item)
            got.cells.append((cell, cell.contents))
        if item is None:
            return None
        cells.append(item)
    defaults = [recipe(d, got) for d in value.defaults or ()]
    kwdefaults = {k: recipe(d, got) for k, d in (value.kwdefaults or {}).items()}  # `lambda t, *, fn=lambda: s:`
    if None in defaults or None in kwdefaults.values() or len(cells) != len(value.fn.__code__.co_freevars):
        return None
    return ("made", value.fn.__code__, value.fn.__globals__, value.fn.__name__, tuple(cells),
            tuple(defaults) if value.defaults else None, tuple(kwdefaults.items()))


class _Sourced:
    """A real cell got by its source, as `recipe` takes values."""

    def __init__(self, source) -> None:
        self.source = source


def _build(item, values: tuple, held: tuple, tensors: tuple):
    kind = item[0]
    if kind == "value":
        return values[item[1]]
    if kind == "const":
        return item[1]
    if kind == "tensor":
        return tensors[item[1]]
    if kind == "node":
        return held[item[1]]
    if kind == "tuple":
        return tuple(_build(i, values, held, tensors) for i in item[1])
    if kind == "bound":
        return types.MethodType(_build(item[1], values, held, tensors), _build(item[2], values, held, tensors))
    if kind == "partial":
        return functools.partial(_build(item[1], values, held, tensors),
                                 *[_build(i, values, held, tensors) for i in item[2]],
                                 **{k: _build(i, values, held, tensors) for k, i in item[3]})
    _, code, globals_, name, cells, defaults, kwdefaults = item
    closure = tuple(_build(c[1], values, held, tensors) if c[0] == "real" else
                    types.CellType(_build(c[1], values, held, tensors)) for c in cells) or None
    made = types.FunctionType(code, globals_, name, None if defaults is None else
                              tuple(_build(d, values, held, tensors) for d in defaults), closure)
    if kwdefaults:
        made.__kwdefaults__ = {k: _build(d, values, held, tensors) for k, d in kwdefaults}
    return made


class Recall:
    """`fn` and its arguments as recipes over the values one generated function `getter` reads from the frame's
    arguments (NOTE [State changed between the forward and the backward])."""

    def __init__(self, getter, items: tuple, watched: int, reads: tuple = (None, [], 0)) -> None:
        self.getter, self.items = getter, items  # items: (fn's recipe, recipe per argument)
        self.watched = watched  # the getter's last values: graph inputs the region reads
        # NOTE [State the frame writes around a reentrant call]: why `fn` always runs again, or the checks of the
        # stores the region read (the getter's values from `first` on: the owners of the attribute checks)
        self.stale, self.checks, self.first = reads

    def at_call(self):
        """(the frame call that runs the graph now, the getter's values) or None; the call: (the frame's guard
        check, arguments, keywords, grad mode, {graph task: whether the guards held in it})."""
        call = getattr(_THREAD, "call", None)
        if call is None:
            return None
        try:
            return call, self.getter(*call[1], **call[2])
        except Exception:  # not got: the region runs in the backward, as before
            return None

    def holds(self, at_call, nodes: tuple = ()) -> bool:
        """Whether the region is what `fn` would run now, in a recomputation: the frame's guards hold (checked once
        per backward for all the frame call's regions, under the frame's grad mode), the graph inputs the region
        reads are the same, and so are the stores of the frame it read (NOTE [State the frame writes around a
        reentrant call]; `nodes`: the graph call's values of the recipes' nodes)."""
        if self.stale is not None:  # NOTE [State the frame writes around a reentrant call]
            return False
        from .reentrant_reads import holds as reads_hold
        (check, args, kwargs, grad, held), then = at_call
        task = torch._C._current_graph_task_id()
        ok = held.get(task)
        if ok is None:
            try:
                with torch.set_grad_enabled(grad):
                    ok = bool(check(*args, **kwargs))
            except Exception:
                ok = False
            held.clear()
            held[task] = ok
        if not ok or not self.watched and not self.checks:
            return ok
        try:
            now = self.getter(*args, **kwargs)
            if self.checks and not reads_hold(self.checks, now[self.first:], nodes):
                return False  # a store the region read holds another value now
            return not self.watched or not any(
                a is not b and (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or bool(a != b))
                for a, b in zip(then[-self.watched:], now[-self.watched:]))
        except Exception:  # not got again, or not comparable: as eager, fn runs
            return False

    def eager(self, values: tuple, held: tuple, tensors: tuple):
        """eager's `fn(*args)` of the recomputation, on torch's detached tensor arguments `tensors` (`held`: the
        graph call's values of the recipes' nodes)."""
        built = [_build(item, values, held, tensors) for item in self.items]
        return built[0](*built[1:])


def make_recall(items: tuple, got: Got, key: tuple, watched: list, output, shape, fn, at_break: bool) -> Recall:
    """The Recall of a traced call (`items`, `got`: recipe's results; `key`: where the call is; `watched`: the
    sources of the graph inputs the region reads), compiled over the frame's parameters; `at_break`: the graph is
    the one before a break. RetraceWithBreak where it cannot be (NOTE [Cells written after the call])."""
    from ..guards.codegen import BASE_NAMESPACE
    stale, checks = (got.reads.stale, got.reads.checks) if got.reads is not None else (None, [])
    checks = [] if stale is not None else checks  # NOTE [State the frame writes around a reentrant call]
    owners = [c[1] for c in checks if c[0] == "attr"]
    why = "a closure variable of its function is written after the call" if _written_after(got.cells, fn.__code__,
                                                                                           at_break) else None
    if why is None and got.reads is not None and got.reads.written_after(output.side_effects, at_break):
        why = "a value made in the frame that its function reads is written after the call (NOTE [State the " \
              "frame writes around a reentrant call])"
    if why is None and got.reads is not None and not at_break and \
            got.reads.escapes(output.__dict__.get("hook_id_roots") or []):
        why = "a value made in the frame that its function reads is left where the caller can change it before " \
              "the backward (NOTE [Containers reached inside what the region loads])"
    if why is None:
        try:
            exprs = [source.expr(output.names) for source in [*got.sources, *owners, *watched]]
            text = f"def ___recall({shape.params_source()}):\n    return ({''.join(e + ', ' for e in exprs)})\n"
            namespace = dict(BASE_NAMESPACE)
            namespace.update(output.names.namespace)
            exec(compile(text, "<framejit reentrant recall>", "exec"), namespace)
        except Exception as e:
            why = f"its recall could not be made ({type(e).__name__}: {e})"
    if why is not None:
        retrace(output, key, why)
    getter = namespace["___recall"]
    getter.__defaults__, getter.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return Recall(getter, items, len(watched), (stale, checks, len(got.sources)))


# NOTE [Cells written after the call]: eager's `fn` made in the frame (a lambda) closes over the frame's cells, and
# its recomputation reads what they hold in the backward; the region, and a recipe's fresh cell, hold what they
# held at the call. Where a cell `fn` closes over holds another value when the trace ends (`s = s * 3` after the
# call; the variable of a loop over layers, which eager's recomputations all read as the last layer), may be
# written after a break (a STORE_DEREF or DELETE_DEREF of it in the root's code, a cell of an inlined frame), or
# written by a function of the root's code through `nonlocal`, the frame is traced again with that call a break
# (`RetraceWithBreak`; the calls are kept in the frame's LazyDecisions across its traces): torch's checkpoint runs
# there with the real function and cells. The same where the getter cannot be made. On the last of the frame's
# traces the frame runs eagerly instead (an internal error, logged). A cell of an inlined frame is checked the
# same way against the functions made by that frame's code (`CellValue.made_in`): a `def bump(v): nonlocal s`
# made there and left in a global list is called by the user after the forward (review hhuntG7 HIGH-1; before,
# only the root's cells were checked, and the backward read the old s).
class RetraceWithBreak(Exception):
    """Trace the frame again: a reentrant call (`output.lazy_decisions.reentrant_breaks`) is a break."""


def breaks_here(output, key: tuple) -> bool:
    """Whether the reentrant call at `key` (code, instruction index) is a break in this trace."""
    return key in getattr(getattr(output, "lazy_decisions", None), "reentrant_breaks", ())


def retrace(output, key: tuple, why: str):
    decisions = getattr(output, "lazy_decisions", None)
    if decisions is None or not getattr(output, "retry_lazy", False) or breaks_here(output, key):
        raise RuntimeError(f"framejit: a reentrant checkpoint's recomputation cannot be as eager's: {why}")
    if not hasattr(decisions, "reentrant_breaks"):
        decisions.reentrant_breaks = set()
    decisions.reentrant_breaks.add(key)
    raise RetraceWithBreak(why)


def _written_after(cells: list, code, at_break: bool) -> bool:
    from .sources import LocalSource
    from .values.base import LazyArg
    for cell, held, name, later in cells:
        same = cell.contents is held or isinstance(held, LazyArg) and \
            getattr(cell.contents, "source", None) == LocalSource(held.name)  # the argument, read since
        if cell.deleted or not same or (at_break and (name is None or later)):
            return True
        if name is not None and _nested_writes(code, name):
            return True
        if name is None and (cell.made_in is None or _nested_writes(*cell.made_in)):
            return True  # a cell of an inlined frame that a function made there writes (it may escape)
    return False


def stored_after(tx) -> set:
    """The cells the frame of translator `tx` may write after its current instruction: a STORE_DEREF or
    DELETE_DEREF after it, or anywhere where a loop holds it."""
    insts, at = tx.program.insts, tx.current.index if tx.current is not None else 0
    looped = any("JUMP" in i.name and isinstance(i.arg, int) and i.arg <= at <= i.index for i in insts)
    return {i.arg for i in insts if i.name in ("STORE_DEREF", "DELETE_DEREF") and (looped or i.index > at)}


def _writes(code, name: str) -> bool:
    import dis
    return any(i.opname in ("STORE_DEREF", "DELETE_DEREF") and i.argval == name for i in dis.get_instructions(code))


def _nested_writes(code, name: str) -> bool:
    """Whether a function made by `code` (or one made inside it) writes `name` through its closure."""
    return any(isinstance(c, types.CodeType) and name in c.co_freevars and (_writes(c, name) or _nested_writes(c, name))
               for c in code.co_consts)


class FrameBinding:
    """NOTE [State changed between the forward and the backward]: the entry's guard check notes each accepted
    call's arguments (per thread), and the graph call hands them to the ReentrantCalls it runs."""

    def __init__(self) -> None:
        self.noted = threading.local()

    def graph(self, compiled):
        """The graph callable to call instead of `compiled`."""
        noted = self.noted

        def graph(*inputs):
            call, noted.call = getattr(noted, "call", None), None
            outer, _THREAD.call = getattr(_THREAD, "call", None), call
            try:
                return compiled(*inputs)
            finally:
                _THREAD.call = outer
        graph.__wrapped__ = compiled
        return graph

    def guard(self, entry, args: tuple, kwargs: dict) -> None:
        """Wrap `entry`'s guard check; `args`, `kwargs`: the call that compiled it (it runs without a check)."""
        noted, check = self.noted, entry.guard.check

        def noting(*args, **kwargs):
            hit = check(*args, **kwargs)
            if hit:
                noted.call = (check, args, kwargs, torch.is_grad_enabled(), {})
            return hit
        noting.__wrapped__ = check
        entry.guard.check = noting
        noted.call = (check, args, kwargs, torch.is_grad_enabled(), {})
