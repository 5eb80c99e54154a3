"""Functions marked with torch's `allow_in_graph`: one graph node each, not inlined.

NOTE [Allowed in graph]: `torch.compiler.allow_in_graph(fn)` (and `torch._dynamo.allow_in_graph`) records
`id(fn)` in `torch._dynamo.trace_rules._allowed_callable_ids`. framejit reads that set, read-only: it never
imports or calls torch._dynamo (the module is looked up in `sys.modules`, and the set's lazy initialiser is
never run; a set never initialised holds no marks). A call of a marked function from traced code is not
inlined: it becomes one `call_function` node whose target is the function itself, so it runs when the
graph runs, after the nodes before it (state nodes included: grad mode, SDPA flags). To learn its result
it is also run once at trace time on fake tensors, under the trace's view of the state (grad, inference
and autocast modes, default dtype as for any op; the SDPA backend flags, `sdp_state.trace_flags`).
Like torch.compile, this is the user's promise that the function is safe to run that way (no Python
side effects the program relies on; output printed by the function also appears at trace time).

Arguments must be tensors, symbolic sizes or constants (in tuples, lists, dicts); the result must be a
tensor, a tuple/list of tensors and constants, or None. Anything else is a graph break. The node is
kept even when its result is unused. The function object is guarded by identity (a closure is otherwise
guarded by its code only, NOTE [Closures guarded by code]). Marking or unmarking a function later
recompiles instead of reusing a trace that inlined or called it (NOTE [Guarding the marks]).

NOTE [Guarding the marks]: while no function is marked (the common case), a trace that considers a user
function guards that the set stays empty (one line: what `allowed_ids_are(frozenset())` computes, written
out as `'torch._dynamo.trace_rules' not in sys.modules or not getattr(getattr(sys.modules[...],
'_allowed_callable_ids', None), 'function_ids', None)`, the same reads without a Python call: measured,
loaded, ~30 ns while torch._dynamo is not imported (a warm process that traces nothing; torch's ShapeEnv
imports it on the first trace) and ~120 ns once it is, vs ~240 ns for the call). Once some are marked
(importing transformers marks several), each user function the trace considers is guarded on its own mark,
`allowed_mark(<its source>) is True/False`: a guard that names no process-local id, so the entry can still be
persisted (measured: with transformers imported, no frame calling a user function was persisted while the
guard was the set of ids). A function considered without a source (a module's `forward` reached through the
module call) is guarded the same way through the guard's namespace when its module and qualified name import
it (a stable object; the frame cache locates it by that name). Any other falls back to the set of ids; such
an entry is persisted with the marked functions themselves, whose ids the loading process takes (NOTE
[Persisted marks] in frame_cache.py).

NOTE [Functions made while tracing are never marked]: a function the traced code makes (MAKE_FUNCTION: a
comprehension, a generator expression, a nested def or lambda) is a new object at every call of the frame,
made after any mark was set; the trace's stand-in (handlers/calls.py) is a framejit object no user holds.
Neither can be marked, so such a function is inlined with no guard (its id matching a mark would be a
dead marked function's address reused). Before, each one fell back to the guard on the set of ids and
kept the entry in memory only: with transformers imported (it marks functions), every frame whose trace
ran a comprehension (HF's ModelOutput.__setattr__, DynamicCache.__init__, masking_utils) was traced again
in every process (bloom's training step).
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from .breaks import BreakKind, Unsupported
from .locators import NotPersistable, _import_locator
from .values import ConstantValue, SequenceValue, SymNodeValue, TensorValue, TupleValue, UserFunctionValue, Value
from .values.containers import DictValue


_RULES = "torch._dynamo.trace_rules"


def allowed_ids() -> frozenset[int]:
    """The ids torch's allow_in_graph has marked (empty when torch._dynamo was never imported)."""
    rules = sys.modules.get(_RULES)
    ids = getattr(getattr(rules, "_allowed_callable_ids", None), "function_ids", None)
    return frozenset(ids) if ids else frozenset()


def allowed_ids_are(snapshot: frozenset[int]) -> bool:
    """Guard helper: the marks are those the trace saw."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    ids = getattr(getattr(rules, "_allowed_callable_ids", None), "function_ids", None)
    return ids == snapshot if ids else not snapshot


def allowed_mark(fn: Any) -> bool:
    """Guard helper: whether `fn` is marked now (NOTE [Guarding the marks])."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    ids = getattr(getattr(rules, "_allowed_callable_ids", None), "function_ids", None)
    return bool(ids) and id(fn) in ids


def _importable(fn: Any) -> bool:
    """`fn` is the object its module and qualified name import (a stable object, so the guard may hold it)."""
    try:
        _import_locator(fn)
    except NotPersistable:
        return False
    return True


def _guard_set(out, snap: frozenset[int]) -> None:
    """One guard line: the marks are exactly `snap` (once per trace)."""
    if out.__dict__.get("allowed_ids_set_guarded"):
        return
    out.__dict__["allowed_ids_set_guarded"] = True
    arg = "frozenset()" if not snap else out.name_of(snap, "allowed_ids")
    check = f"{out.name_of(allowed_ids_are, 'allowed_ids_are')}({arg})"
    if not snap:  # NOTE [Guarding the marks]: allowed_ids_are(frozenset()) is `not ids`, read inline
        modules, get = f"{out.name_of(sys, 'sys')}.modules", out.name_of(getattr, "getattr")
        check = (f"{_RULES!r} not in {modules} or not {get}({get}({modules}[{_RULES!r}], '_allowed_callable_ids', "
                 "None), 'function_ids', None)")
    out.add_guard("GLOBAL_STATE", check, None,
                  expected="the functions marked allow_in_graph are those seen while tracing",
                  actual=f"{out.name_of(allowed_ids, 'allowed_ids')}()")


def is_allowed_in_graph(tx, fn: UserFunctionValue) -> bool:
    out = tx.output
    snap = out.__dict__.get("allowed_ids_snapshot")
    if snap is None:
        snap = out.__dict__["allowed_ids_snapshot"] = allowed_ids()  # one view of the marks per trace
    marked = id(fn.fn) in snap
    if not snap:
        _guard_set(out, snap)
        return False
    if fn.source is None and fn.attrs is not None:  # NOTE [Functions made while tracing are never marked]
        return False
    if fn.source is not None:
        e = fn.source.expr(out.names)
    elif _importable(fn.fn):  # a module's forward reached through the module call has no source
        e = out.name_of(fn.fn, fn.fn.__name__)
    else:
        _guard_set(out, snap)
        return marked
    seen = out.__dict__.setdefault("allowed_marks_guarded", set())
    if e not in seen:
        seen.add(e)
        out.add_guard("GLOBAL_STATE", f"{out.name_of(allowed_mark, 'allowed_mark')}({e}) is {marked}", fn.source,
                      expected=f"{fn.fn.__qualname__} {'is' if marked else 'is not'} marked allow_in_graph",
                      actual=f"{out.name_of(allowed_mark, 'allowed_mark')}({e})")
    return marked


def _graph_arg(v: Any) -> bool:
    return isinstance(v, (TensorValue, SymNodeValue)) or (isinstance(v, Value) and v.is_constant())


def _plain(v: Value) -> Any:
    """Arguments as Python containers of graph values and constants (or a graph break)."""
    if isinstance(v, (TupleValue, SequenceValue)) and type(v) in (TupleValue, SequenceValue):
        items = [_plain(i) for i in v.items]
        return tuple(items) if isinstance(v, TupleValue) else items
    if isinstance(v, DictValue) and all(isinstance(k, (str, int)) for k in v.items):
        return {k: _plain(i) for k, i in v.items.items()}
    if _graph_arg(v):
        return v
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"an allow_in_graph function given {v.describe()}")


def call_allowed(tx, fn: UserFunctionValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`fn(*args, **kwargs)` as one node (NOTE [Allowed in graph])."""
    from .graph_calls import _fake_of, _is_value, _node_of
    from .sdp_state import trace_flags
    out = tx.output
    if fn.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"an allow_in_graph function {fn.fn.__qualname__} without a source")
    out.guard_id(fn.source, fn.fn)
    pargs, pkwargs = tuple(_plain(a) for a in args), {k: _plain(v) for k, v in kwargs.items()}
    fake_args, fake_kwargs = tree_map(lambda v: _fake_of(v) if _is_value(v) else v, (pargs, pkwargs))
    with trace_flags(out):
        result = out._run_fake("call_function", fn.fn, fake_args, fake_kwargs)
    if not all(isinstance(r, (torch.Tensor, int, float, bool, type(None))) for r in tree_leaves(result)) or \
            not (result is None or isinstance(result, (torch.Tensor, tuple, list))):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"the allow_in_graph function {fn.fn.__qualname__} returned {type(result).__name__}")
    out.side_effects.bump()  # it may have written its tensor arguments in place (NOTE [Eager generators])
    node_args, node_kwargs = tree_map(lambda v: _node_of(v) if _is_value(v) else v, (pargs, pkwargs))
    node = out.graph.create_node("call_function", fn.fn, node_args, node_kwargs)
    node.meta["val"] = result
    node.meta["effect"] = True  # kept even if its result is unused
    node.meta["stack_trace"] = out.stack_trace()
    out.op_count += 1
    if result is None:
        return ConstantValue(None)
    return out.wrap_result(node, result)


__all__ = ["allowed_ids", "allowed_ids_are", "allowed_mark", "call_allowed", "is_allowed_in_graph"]
