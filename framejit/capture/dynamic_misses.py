"""Which earlier trace a miss is compared with to find the sizes that changed (NOTE [Automatic dynamic] in hook.py).

A miss compares the call with the frame's newest entry; `older_entry_sizes` consults the older ones, and
`failed_trace` keeps a trace that raised ConstraintViolationError, which installed no entry, for the next miss.
"""
from __future__ import annotations

import ast

import types
from typing import Any, Callable


# NOTE [Automatic dynamic across entries]: the newest entry's failure decides whether a miss is a size
# that changed. A frame whose entries differ in something else (a loop's resume function, one entry
# per position of the loop over a model's layers: nllb_moe's encoder and decoder) is often called where
# the newest entry is for another position: its first failure is the position (an alias guard, or the
# iterator's index, an int, past which no other guard of that entry is read), and the entry for this
# position, failing only on sizes, was not consulted. So each new size traced every position static
# again, until the recompile limit ran the frame eagerly. When the newest entry names no size that
# changed, the first older entry whose failures are all changed values (the one this call would have
# hit with those sizes symbolic) marks them too.
def older_entry_sizes(entries: list, explain: Callable, changed_value: Callable) -> list:
    for entry in entries[1:]:
        try:
            failures = explain(entry)
        except Exception:  # noqa: BLE001 - a signature that does not bind: not this entry
            continue
        if failures and all(changed_value(f) for f in failures):
            return failures
    return []


# NOTE [A failed trace records its sizes]: a trace that breaks a mark_dynamic contract raises
# ConstraintViolationError and installs no entry (NOTE [Broken mark_dynamic contracts] in shapes.py). Stock
# torch.compile has recorded the sizes of the call in its frame state all the same, so its next call sees
# which sizes changed and traces them symbolic: `x + y` with x's dim 0 marked and y's unmarked, of the same
# varying size, raises on the first call (y's static size specialises x's marked dim) and then works. With
# nothing recorded, framejit traced y static again on every call and raised forever. The failed trace's
# guard function is kept (`failed_trace`): the next miss marks the dims and ints whose checks in it fail as
# an entry's would (NOTE [Automatic dynamic]), then forgets it.
def failed_trace(error: BaseException, fn: types.FunctionType, shape: Any, output: Any, guard_function: Callable):
    """Attach to `error` an object with the `guard` of the trace that raised it (None if it cannot be built)."""
    try:
        error.failed_trace = types.SimpleNamespace(guard=guard_function(fn, shape, output))
    except Exception:  # noqa: BLE001 - only a hint for the next miss: without it, that miss traces as before
        error.failed_trace = None


def failures_of_failed_trace(hook: Any, explain: Callable) -> list:
    """The failures of the last call's failed trace for this call, if the last call's trace failed."""
    failed = hook.__dict__.pop("failed_trace", None)
    if failed is None:
        return []
    try:
        return list(explain(failed))
    except Exception:  # noqa: BLE001 - a call that does not bind as the failed one did
        return []


# NOTE [Calls that raise at a symbolic op]: a call whose traced op raises eager's error for its symbolic values
# (`torch.zeros(n)` with n = -1, `x.view(n, -1)` that does not divide, `x.narrow(0, n, 2)` or `x[n]` out of range)
# made a break entry before that op, where plain Python raises the error. Nothing the trace read said why the op
# failed (the fake run decided from the symbols' values; NOTE [Errors of ops on symbolic values] in
# graph_calls.py), so the entry guarded nothing about it: tried first (newest), it served every later call,
# with a graph break and a resume function on each, instead of the entry compiled for the good sizes (a server
# that got one bad request lost its graph for good). Such a call now installs no entry and runs eagerly this
# once, where eager raises its own error (stock torch.compile raises at compile time and keeps its entries).
# At most `recompile_limit` calls of a frame do so (`RaisedAtSymbolicOp`); after that the break entry is
# made as before, so a frame that raises on every call is not traced on every call.
class RaisedAtSymbolicOp(Exception):
    """convert_frame's answer for such a call: run it eagerly, install no entry."""


_RUN_EAGERLY = [False]


def raising_calls_run_eagerly() -> bool:
    """A call of the frame being traced that raises at a symbolic op runs eagerly (NOTE [Calls that raise at a
    symbolic op])."""
    return _RUN_EAGERLY[0]


class failed_traces_kept:
    """Around a trace of `hook`'s frame: a ConstraintViolationError carrying its failed trace leaves that trace
    on the hook for the next miss (and not on the exception the user sees); a call that raised at a symbolic
    op is counted (NOTE [Calls that raise at a symbolic op])."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def __enter__(self) -> None:
        from .. import config
        self.hook.__dict__.pop("failed_trace", None)  # read by the miss before this trace, or never (dynamic=False)
        self.before = _RUN_EAGERLY[0]
        _RUN_EAGERLY[0] = self.hook.__dict__.get("raised_at_symbolic_ops", 0) < config.recompile_limit

    def __exit__(self, kind, error, tb) -> bool:
        _RUN_EAGERLY[0] = self.before
        failed = error.__dict__.pop("failed_trace", None) if error is not None and hasattr(error, "__dict__") else None
        if failed is not None:
            self.hook.failed_trace = failed
        if isinstance(error, RaisedAtSymbolicOp):
            self.hook.raised_at_symbolic_ops = self.hook.__dict__.get("raised_at_symbolic_ops", 0) + 1
        return False


# NOTE [Results of calls that broke inside]: a break whose op's output is split along a symbolic size or shaped by
# data (`split_result`, NOTE [Unbind along a symbolic length] in graph_calls.py; `shaped_by_data`, NOTE [Results
# shaped by data are dynamic in resume functions] in carried_loops.py) marks the result the resume function takes
# as a sequence of changing length or with dim 0 symbolic. Where that op ran in a callee (the break's `nest_path`
# goes through inlined frames) and the frame breaks at its own call of that callee (a plain break: a try block on
# the way, a loop), the result it hands on is the callee's return value, not the op's. It was marked all the
# same: tiny DBRX's `DbrxFFN.forward.<resume at 18>` took `self.experts(...)`'s (2, 8, 32) result as (s93, 8, 32),
# a batch size that never changed made symbolic while the sequence length that did stayed static (hhuntHF6
# LOW-0). Only a break in the frame's own code marks its result now; the callee's resume function, where the op
# ran, is marked as before.
def mark_break_results(gen: Any, exc: BaseException) -> None:
    """Set on the break code `gen` whether the result of the break `exc` is split or shaped by data."""
    own = len(exc.__dict__.get("nest_path") or ()) <= 1
    gen.split_result = own and getattr(exc, "split_result", False)  # NOTE [Unbind along a symbolic length]
    gen.shaped_by_data = own and getattr(exc, "shaped_by_data", False)


def other_literal(actual: Any) -> bool:
    """A changed int's source now holds a literal that is no int or size (`seq[1]` was 3, is [3, 4] or 'b'):
    it is not made a symbol (as one, the list would be read as an opaque sequence)."""
    text = str(actual)
    if text.startswith("torch.Size(["):
        return False
    try:
        return type(ast.literal_eval(text)) is not int
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False  # not a literal (a NumPy scalar's `<float64 object at ...>`): decided by its expected value
