"""Real cells in a trace: where the root frame's free variables are read from, and which cells are one cell.

NOTE [Cells read through the function called]: a frame hook shared by the closures of one code
(closure_hooks.py, NOTE [Closures made per call share a hook through their cells]) traces one object and
serves the others, so its root frame's free variables cannot be the traced object's cells (constants of the
entry). While such a hook traces, `root_cells` names each cell as `<the function called now>.__closure__[i]`,
where "the function called now" is the attribute `fn` of the hook's thread-local `current`: guards read the
cell contents of the object being called, the transformed function reloads them from it and replays stores
into its cells. Everywhere else the root cells are the function's own cells (constants), as before.

NOTE [Aliased cells are guarded]: the trace models a cell by the cell object it found (reads after a store
see the stored value, keyed by the cell's identity). A cell found through a source (a closure guarded by its
code, a cell passed to a resume function, a root cell read through the function called) may be another cell
on a later call, and two sources that named one cell at trace time may name two (or the reverse). That
matters only when the trace writes one of them: so each cell the trace writes is guarded `is` / `is not`
every other real cell the trace has seen, whichever comes first (the store, or the other cell's first
appearance). Program (red team of the shared hook): `reader` calls `setter`, both over `t`; an object of
`reader`'s code built over another `setter` cell must not take the entry that read `t` after `setter`'s store.

NOTE [Aliased root cells persisted]: the cells of a function traced through its own hook (per object) are
constants, fixed for that object, and the pair was not guarded; but its entries are persisted, and another object
of the same code (`types.FunctionType(code, g, name, None, (c, c))`) loads them with its own cells, found by
their index in its `__closure__` (review revG G5: `nonlocal t; t = a * 2; return u` with t and u one cell: eager
returns the value just stored, framejit the cell's old content). Two distinct constant cells are guarded `is
not` by their names, which the loading object resolves to its own cells (NOTE [Distinct objects stay distinct]
in frame_cache.py refuses two names found as one cell too); one cell standing for two variables has one name
and one locator, so such an entry is kept in memory only.
"""
from __future__ import annotations

import threading
import types
from typing import Any

from ..guards import COST_ID
from .sources import AttrSource, ItemSource, ObjectSource, Ref

_TRACING = threading.local()  # .root: (function, base source) while a shared closure hook traces it


class Current(threading.local):
    """The function object a shared closure hook is running now, per thread (`fn`; None outside a call)."""

    fn: Any = None


class tracing_through:
    """Context: the root cells of `fn` are read through `current.fn` while it is traced. A class of its own (a
    class made per call is a reference cycle: it kept the traced closure and its cells alive until the cyclic
    collector ran, NOTE [The shared hook keeps no cells] in closure_hooks.py)."""

    def __init__(self, fn: types.FunctionType, current: Current) -> None:
        self.fn, self.current = fn, current

    def __enter__(self):
        self.previous = getattr(_TRACING, "root", None)
        _TRACING.root = (self.fn, AttrSource(ObjectSource(Ref(self.current, "closure_call")), "fn"))

    def __exit__(self, *exc):
        _TRACING.root = self.previous


def root_cells(fn: types.FunctionType, real_cell: type) -> dict[str, Any]:
    """The RealCells of a root frame's free variables (NOTE [Cells read through the function called])."""
    code, closure = fn.__code__, fn.__closure__ or ()
    root = getattr(_TRACING, "root", None)
    if root is None or root[0] is not fn:
        return {name: real_cell(cell, name) for name, cell in zip(code.co_freevars, closure)}
    base = AttrSource(root[1], "__closure__")
    return {name: real_cell(cell, name, ItemSource(base, i)) for i, (name, cell) in
            enumerate(zip(code.co_freevars, closure))}


def _expr(output, cell) -> str:
    if cell.source is not None:
        return cell.source.expr(output.names)
    return output.names.name_for(cell.cell, "cell_" + cell.name)


def _guard_pair(output, written, other) -> None:
    if written.source is None and other.source is None and written.cell is other.cell:
        # NOTE [Aliased root cells persisted]: one name, one locator: the entry cannot say which other index
        output.__dict__.setdefault("process_local", "the trace writes a closure cell that is also another "
                                   "variable's cell")
        return
    a, b = _expr(output, written), _expr(output, other)
    if a == b:
        return
    done = output.__dict__.setdefault("_cell_alias_pairs", set())
    if (a, b) in done or (b, a) in done:
        return
    done.add((a, b))
    same = written.cell is other.cell
    described = other.source.describe() if other.source is not None else f"the cell of {other.name!r}"
    output.add_guard("ALIAS", f"{a} {'is' if same else 'is not'} {b}", written.source or other.source,
                     cost=COST_ID, expected=f"{'the same cell as' if same else 'another cell than'} {described}")


def seen(output, cells) -> None:
    """Real cells that appear in the trace (NOTE [Aliased cells are guarded])."""
    known = output.__dict__.setdefault("_real_cells", [])
    written = output.__dict__.setdefault("_written_cells", [])
    for cell in cells:
        for other in written:
            _guard_pair(output, other, cell)
        known.append(cell)


def stored(output, cell) -> None:
    """The trace writes real cell `cell` (NOTE [Aliased cells are guarded])."""
    written = output.__dict__.setdefault("_written_cells", [])
    if any(c is cell for c in written):
        return
    written.append(cell)
    for other in output.__dict__.setdefault("_real_cells", []):
        if other is not cell:
            _guard_pair(output, cell, other)
