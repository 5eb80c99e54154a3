"""Checks of a graph's inputs made before any of its ops: `entry_check(cond)` in traced library code.

NOTE [Entry checks]: a speculated check (NOTE [Speculated checks]) may not come before a write of an input,
because a failing check reruns the call eagerly and a rerun after a write would repeat it. Some library code
raises only after a write: `_BatchNorm.forward` with `momentum=None` adds 1 to `num_batches_tracked` and then
divides by it, so a count of -1 raises ZeroDivisionError after the increment (eager: the count is 0
afterwards, the statistics untouched). The condition that decides it (`count != -1`) is a function of the
graph's inputs as they are at the graph's start, so it can be checked there, before anything is written:
- `entry_check(cond)` is plain Python outside a trace (`bool(cond)`). Traced, it records
  `torch._assert_async(cond, ENTRY_CHECK + ...)` right after the graph's inputs, moving `cond` there too,
  and is True; the code after it is traced on that assumption. This needs `cond` to be one op on inputs that
  nothing in the graph has written so far (its value is then the same at the start); otherwise the call is
  a graph break and runs as Python (`bool(cond)`, the caller then takes its exact path).
- Such a check is not a speculated check: writes and random ops may follow it.
- The eager backend runs the graph as it is (the check is its first op). onnxrt and triton compute the entry
  checks before the lowered program runs (NOTE [Run-time checks as outputs], backends/checks.py).
- A failing entry check raises before any of the graph's effects, so the hook reruns the call eagerly also
  when the graph writes inputs or draws random numbers (RerunState.entry_checks_only in requests.py): the
  rerun raises the library's own error (ZeroDivisionError) with the state eager leaves.
"""
from __future__ import annotations

from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, TensorValue

ENTRY_CHECK = "framejit entry check: "  # the same text as backends/checks.py's ENTRY_CHECK
SIZE_TRUTH_CHECK = ENTRY_CHECK + "a truth of sizes changed"  # NOTE [Truths over symbolic sizes]


# NOTE [A failed truth of sizes recompiles]: an entry check of a truth over symbolic sizes (NOTE [Truths over
# symbolic sizes] in constant_tensors.py) that fails means this call's sizes give the other answer. The call
# reruns eagerly; kept, the entry failed (and reran) every later call of such sizes, forever (review revP
# HIGH-2: `x + 1 if torch.ones(n).sum() > 3 else x - 1`, 100 of 102 calls eager). So the frame's hook drops
# the entry (RerunState.restore_after in requests.py) and traces that frame from then on with such truths
# kept as breaks (`sizes_kept`): one rerun per frame, then compiled calls again. (A persisted entry loaded
# in another process may fail once there too.)
_KEPT = [False]


def size_truths_kept() -> bool:
    """The frame being traced keeps truths over symbolic sizes as breaks (NOTE [A failed truth of sizes recompiles])."""
    return _KEPT[0]


class sizes_kept:
    """Trace a frame of `hook` with truths over symbolic sizes kept as breaks once one of its entries' failed
    (NOTE [A failed truth of sizes recompiles])."""

    def __init__(self, hook: Any) -> None:
        self.kept = getattr(hook, "size_truths_kept", False)

    def __enter__(self) -> None:
        self.before, _KEPT[0] = _KEPT[0], self.kept

    def __exit__(self, *exc: Any) -> None:
        _KEPT[0] = self.before


def entry_check(cond) -> bool:
    """The truth of `cond` (a one-element tensor); traced, a check at the graph's start (NOTE [Entry checks])."""
    return bool(cond)


def is_entry_check(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch._assert_async and len(node.args) > 1 and \
        isinstance(node.args[1], str) and node.args[1].startswith(ENTRY_CHECK)


def _unsupported(why: str) -> Unsupported:
    return Unsupported(BreakKind.DATA_DEPENDENT, f"entry_check: {why} (NOTE [Entry checks])")


def _unwritten_inputs(out) -> set:
    """The placeholder nodes of tensor inputs that no op of the graph has written so far."""
    written = {id(entry) for entry in out.mutated_entries}
    return {entry.value.node for entry in out.inputs
            if isinstance(entry.value, TensorValue) and id(entry) not in written}


def record_entry_check(tx, args: list, kwargs: dict) -> ConstantValue:
    """Record `entry_check(cond)` at the start of the graph (NOTE [Entry checks]); a break where it cannot be."""
    from .graph_calls import _inplace
    from .requests import draws_random
    out = tx.output
    cond = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(cond, TensorValue) or cond.fake.dtype is not torch.bool or cond.fake.numel() != 1:
        raise _unsupported("the condition is not a one-element bool tensor")
    node = cond.node
    inputs = _unwritten_inputs(out)
    if node.op not in ("call_function", "call_method") or _inplace(node.target) or draws_random(node.target, node.args, node.kwargs) \
            or any(arg not in inputs for arg in node.all_input_nodes):
        raise _unsupported("the condition is not one op on inputs the graph has not written")
    check = out.record_effect(torch._assert_async, (node, f"{ENTRY_CHECK}the call reruns eagerly"))
    first = next((n for n in out.graph.nodes if n.op != "placeholder" and n is not node), None)
    if first is not None and first is not check:
        first.prepend(node)
        first.prepend(check)
    return ConstantValue(True)
