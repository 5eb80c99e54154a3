"""Cells a non-reentrant checkpoint's function closes over that the program writes after the call (NOTE
[Non-reentrant checkpoint over cells written later]).

`note(tx, function)` (while tracing the call) records the cells of the trace that `function` (a closure made in
the frame, a partial or bound method over one) closes over; `check(frame)` (when the graph is built) traces the
frame again with the call a break where one of them may hold another value when the backward recomputes.
"""
from __future__ import annotations

# NOTE [Non-reentrant checkpoint over cells written later]: eager's `checkpoint(fn, x, use_reentrant=False)`
# calls `fn` again in the backward; a lambda made in the frame reads its cells as they hold then. The traced
# region (NOTE [Checkpointed regions] in higher_order.py) recomputes the trace's values: `y = checkpoint(lambda t:
# (t * s).sin(), x, use_reentrant=False); s = s * 2` gave 1.5cos(1.5x) where eager gives 1.5cos(3x) (review
# hhuntG7 HIGH-3, the cell part; the same in an inlined callee, and for a `nonlocal s` closure the user calls
# before the backward). The reentrant path's rule (NOTE [Cells written after the call] in reentrant_recall.py)
# decides it the same way: a cell whose contents changed by the end of the trace, that a function made by its
# frame's code writes (`nonlocal`), or that may be written after a break makes the frame trace again with the
# call a break, where torch's checkpoint runs with the real function and cells and recomputes through the
# function itself (NOTE [Non-reentrant recomputation runs eagerly]). Not covered (the region recomputes with the
# trace's values): other Python state `fn` reads that changes between the forward and the backward (a global, an
# attribute: hhuntG7 HIGH-3's other cases, as stock torch.compile).


def _break(why: str):
    from .breaks import BreakKind, Unsupported
    return Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.utils.checkpoint.checkpoint with use_reentrant=False: {why}")


def note(tx, function) -> None:
    """Record the cells of the trace `function` closes over (a break where an earlier trace found one written)."""
    from .reentrant_recall import Got, breaks_here, recipe, stored_after
    key = (tx.code, tx.current.index if tx.current is not None else -1)
    if breaks_here(tx.output, key):
        raise _break("a closure variable of its function is written after the call, and eager's recomputation in "
                     "backward reads it then (NOTE [Non-reentrant checkpoint over cells written later])")
    got = Got()
    recipe(function, got)
    if not got.cells:
        return
    root = (tx.output.__dict__.get("tx_stack") or [tx])[0]
    names = {id(cell): name for name, cell in root.cells.items()}  # the root frame's own cells
    later = stored_after(root)
    cells = [(cell, held, names.get(id(cell)), names.get(id(cell)) in later) for cell, held in got.cells]
    tx.output.__dict__.setdefault("nonreentrant_cells", []).append((cells, key))


def check(frame: tuple | None) -> None:
    """RetraceWithBreak where a noted call's cell may be written before its recomputation; `frame`: (output, shape,
    fn, whether the graph is the one before a break)."""
    if frame is None:
        return
    from .reentrant_recall import _written_after, retrace
    output, _, fn, at_break = frame
    for cells, key in output.__dict__.get("nonreentrant_cells", ()):
        if _written_after(cells, fn.__code__, at_break):
            retrace(output, key, "a closure variable of a non-reentrant checkpoint's function is written after the "
                                 "call (NOTE [Non-reentrant checkpoint over cells written later])")
