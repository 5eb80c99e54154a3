"""Cells a non-reentrant checkpoint's function closes over that the program writes after the call (NOTE
[Non-reentrant checkpoint over cells written later]).

`recipes(tx, function, args, kwargs)` (while tracing the call) makes the recall's recipes (NOTE [Non-reentrant
recomputation after a state change] in higher_order.py) and records the cells of the trace that `function` (a
closure made in the frame, a partial or bound method over one) closes over; `check(frame)` (when the graph is built)
traces the frame again with the call a break where one of them may hold another value when the backward
recomputes; `region_recall` makes a region's Recall.
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
# function itself (NOTE [Non-reentrant recomputation runs eagerly]). Other Python state `fn` reads that changes
# between the forward and the backward (a global, an attribute): NOTE [Non-reentrant recomputation after a state
# change] in higher_order.py.


def _break(why: str):
    from .breaks import BreakKind, Unsupported
    return Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.utils.checkpoint.checkpoint with use_reentrant=False: {why}")


_OWN = ("use_reentrant", "context_fn", "determinism_check", "debug", "early_stop", "preserve_rng_state")


def recipes(tx, function, fn_args, kwargs: dict) -> tuple:
    """(recipes of `function(*fn_args, **its keywords)` as one callable and its arguments, what they read
    (reentrant_recall.Got), where the call is): NOTE [Non-reentrant recomputation after a state change]. Records
    the cells of the trace `function` closes over (NOTE [Non-reentrant checkpoint over cells written later]); a
    break where an earlier trace found one written, or where one cannot be got again."""
    from .reentrant_recall import Got, breaks_here, recipe, stored_after
    key = (tx.code, tx.current.index if tx.current is not None else -1)
    if breaks_here(tx.output, key):
        raise _break("a closure variable of its function is written after the call, or its recall could not be "
                     "made, and eager's recomputation in backward reads the state of that moment (NOTE [Non-"
                     "reentrant checkpoint over cells written later])")
    got = Got()
    got.lists, got.touched = [], len(tx.output.side_effects.touched)
    fn = recipe(function, got)
    args = tuple(recipe(a, got) for a in fn_args)
    keywords = tuple((k, recipe(v, got)) for k, v in kwargs.items() if k not in _OWN)
    if fn is None or None in args or any(r is None for _, r in keywords):
        raise _break("its function or an argument cannot be got again for the recomputation in backward, which "
                     "eager's runs with the state of that moment (NOTE [Non-reentrant recomputation after a state "
                     "change])")
    if got.cells:
        root = (tx.output.__dict__.get("tx_stack") or [tx])[0]
        names = {id(cell): name for name, cell in root.cells.items()}  # the root frame's own cells
        later = stored_after(root)
        got.cells = [(cell, held, names.get(id(cell)), names.get(id(cell)) in later) for cell, held in got.cells]
        tx.output.__dict__.setdefault("nonreentrant_cells", []).append((got.cells, key))
    return (("partial", fn, (), keywords) if keywords else fn, *args), got, key


def check(frame: tuple | None) -> None:
    """RetraceWithBreak where a noted call's cell may be written before its recomputation; `frame`: (output, shape,
    fn, whether the graph is the one before a break)."""
    if frame is None:
        return
    from .reentrant_recall import _written_after, retrace
    output, _, fn, at_break = frame
    for cells, key in output.__dict__.get("nonreentrant_cells", ()):
        if _written_after(cells, fn.__code__, at_break, output.__dict__.get("break_cells")):
            retrace(output, key, "a closure variable of a non-reentrant checkpoint's function is written after the "
                                 "call (NOTE [Non-reentrant checkpoint over cells written later])")


def region_recall(gm, frame: tuple | None, number: int, inputs: list, first, replaced: dict) -> tuple:
    """(the Recall of checkpointed region `number`, or None, and the graph nodes its recipes hold): NOTE [Non-
    reentrant recomputation after a state change]; `inputs`: the region's inputs, `first`: its first node,
    `replaced`: the nodes of regions moved before it and what reads them now. RetraceWithBreak where it cannot be
    made."""
    made = frame[0].__dict__.get("nonreentrant_recalls", {}).get(number) if frame is not None else None
    if made is None:
        return None, []
    from .reentrant_recall import make_recall, retrace
    output = frame[0]
    items, got, key = made
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    held = []
    for value in got.nodes:
        node = replaced.get(value.node, value.node)
        if order.get(node, len(order)) >= order[first]:
            retrace(output, key, "a value its function is called with is not in the graph before the region")
        held.append(node)
    if got.lists and _lists_written(output, got, frame[3]):
        retrace(output, key, "a list made in the frame that its function reads may be written after the call")
    by_node = {getattr(inp.value, "node", None): inp.source for inp in output.inputs}
    watched = [by_node[n] for n in inputs if n in by_node]  # graph inputs the region reads: eager reads them again
    return make_recall(items, got, key, watched, *frame), held


def _lists_written(output, got, at_break: bool) -> bool:
    """Whether a list made in the frame that the recipes hold as it was at the call is written after it, or is
    left where code after the break, or the caller, can write it (NOTE [Non-reentrant recomputation after a state
    change])."""
    from .reentrant_reads import _reachable
    roots = output.__dict__.get("break_roots" if at_break else "hook_id_roots")
    if roots is None:  # not known
        return True
    written = {id(v) for v in output.side_effects.touched[got.touched:]}
    reached = {id(v) for v in _reachable(roots)}
    return any(id(v) in written or id(v) in reached for v in got.lists)


def note_break(tx) -> None:
    """Translator `tx` stopped at the break the graph ends at (nested_frames.stopped): note on its output what code
    after the break can reach, the values live there (`break_roots`: each active frame's stack, locals and cells, and
    the recorded effects) and the cells of the frames active there (`break_cells`), for `_lists_written` and
    reentrant_recall._written_after (NOTE [Cells written after the call])."""
    active = []
    while tx is not None:
        active.append(tx)
        tx = tx.parent
    output = active[0].output
    cells = [c for t in active for c in t.cells.values()]
    output.break_cells = {id(c) for c in cells}
    output.break_roots = [v for t in active for v in [*t.stack, *t.locals.values()]] + \
        [getattr(c, "contents", None) for c in cells] + output.side_effects.values()
