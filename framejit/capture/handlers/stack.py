"""Stack, locals, globals, cells, constants, attributes and return."""
from __future__ import annotations

import types

from ..caller_frames import ResumeModuleCall
from ..carried_loops import carried_argument, opaque_method
from ..resume import cell_args
from ..emit import NULL_AFTER_CALLABLE
from ..values import NULL, CellValue, TensorValue, UserFunctionValue
from ..values.builder import wrap_unguarded
from . import op


@op("POP_TOP")
def pop_top(tx, inst):
    tx.pop()


@op("PUSH_NULL")
def push_null(tx, inst):
    tx.push(NULL)


@op("COPY")
def copy(tx, inst):
    tx.push(tx.peek(inst.arg))


@op("SWAP")
def swap(tx, inst):
    i = inst.arg
    tx.stack[-1], tx.stack[-i] = tx.stack[-i], tx.stack[-1]


@op("LOAD_CONST")
def load_const(tx, inst):
    if type(inst.arg) is ResumeModuleCall:  # NOTE [Nested breaks through module calls] in nested_breaks.py:
        tx.push(UserFunctionValue(inst.arg.hook))  # R(k-1)'s code calling a module-called Rk inlines Rk
        return
    tx.push(wrap_unguarded(inst.arg))


@op("LOAD_FAST")
def load_fast(tx, inst):
    carried = carried_argument(tx, inst)  # NOTE [Loops carried across breaks]
    tx.push(carried if carried is not None else tx.load_local(inst.arg))


@op("LOAD_FAST_AND_CLEAR")
def load_fast_and_clear(tx, inst):
    # 3.12 inlined comprehensions save the outer binding (or NULL when unbound) and restore it after.
    value = tx.locals.pop(inst.arg, None)
    tx.push(NULL if value is None else tx.load_local_value(inst.arg, value))


@op("STORE_FAST")
def store_fast(tx, inst):
    value = tx.pop()
    if value is NULL:
        tx.locals.pop(inst.arg, None)
    else:
        _name_node(value, inst.arg)
        tx.store_local(inst.arg, value)


def _name_node(value, name: str) -> None:
    """NOTE [Node names from locals]: the first local a tensor made by the graph is stored to names its
    node, as TorchDynamo names them (`y = x + 1` prints as `y = l_x_ + 1`), so printed graphs read like
    the user's code. Names only: FX keeps them unique; inputs and framejit's own `___` locals keep theirs."""
    node = getattr(value, "node", None)
    if isinstance(value, TensorValue) and node is not None and node.op in ("call_function", "call_method") \
            and not node.meta.get("named_from_local") and name.isidentifier() and not name.startswith("___"):
        node.meta["named_from_local"] = True
        node._rename(name)


@op("DELETE_FAST")
def delete_fast(tx, inst):
    tx.load_local(inst.arg)  # raises UnboundLocalError like CPython when unbound
    del tx.locals[inst.arg]


@op("LOAD_GLOBAL")
def load_global(tx, inst):
    push_null, name = inst.arg
    push_with_null(tx, tx.load_global(name), push_null)


def push_with_null(tx, value, null: bool = True) -> None:
    """Push a loaded callable, with the NULL of a call below (3.11, 3.12) or above it (3.13) when `null`
    (NOTE [Call layouts] in emit.py)."""
    if null and not NULL_AFTER_CALLABLE:
        tx.push(NULL)
    tx.push(value)
    if null and NULL_AFTER_CALLABLE:
        tx.push(NULL)


@op("MAKE_CELL")
def make_cell(tx, inst):
    name = inst.arg
    initial = tx.locals.pop(name, None)
    if tx.parent is None and name in cell_args(tx.code):  # NOTE [Cells passed to resume functions]
        _bind_cell_arg(tx, inst, name, initial)
        return
    tx.cells[name] = CellValue(initial)
    tx.cells[name].made_in = (tx.code, name)  # NOTE [Cells written after the call]


def _bind_cell_arg(tx, inst, name: str, initial) -> None:
    """The argument is the frame's real cell: model the variable as that cell, found through the argument,
    and skip the `LOAD_DEREF name; STORE_FAST name` that puts it into the slot."""
    from ..breaks import BreakKind, Unsupported
    from ..sources import LocalSource
    from ..translator import LazyArg, RealCell
    after = tx.program.insts[inst.index + 1:inst.index + 3]
    if not isinstance(initial, LazyArg) or not isinstance(initial.obj, types.CellType) or \
            [(i.name, i.arg) for i in after] != [("LOAD_DEREF", name), ("STORE_FAST", name)]:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"the cell of {name!r} passed to a resume function")
    tx.cells[name] = RealCell(initial.obj, name, LocalSource(name))
    from ..closure_cells import seen
    seen(tx.output, [tx.cells[name]])  # NOTE [Aliased cells are guarded]
    tx.pc = inst.index + 3


def guard_passed_cells(tx, cells) -> None:
    """A closure guarded by its code reads its cells through its source; in a resume function that got
    cells (NOTE [Cells passed to resume functions]) one of them may be a passed cell, which the trace's
    reads and stores treat as one cell (by identity). Whether it is, or is not, is guarded, so a later call
    with another closure object (sharing no cell, or another one) traces anew."""
    from ...guards import COST_ID
    from ..sources import LocalSource
    from ..translator import RealCell
    root = tx
    while root.parent is not None:
        root = root.parent
    passed = [c for n, c in root.cells.items() if isinstance(c, RealCell) and c.source == LocalSource(n)]
    names = tx.output.names
    for cell in cells:
        for other in passed:
            same = cell.cell is other.cell
            tx.output.add_guard("ALIAS", f"{cell.source.expr(names)} {'is' if same else 'is not'} "
                                f"{other.source.expr(names)}", cell.source, cost=COST_ID,
                                expected=f"{'the same cell as' if same else 'another cell than'} "
                                         f"{other.source.describe()}")


@op("COPY_FREE_VARS")
def copy_free_vars(tx, inst):
    pass  # free variables are bound when the translator is created


@op("LOAD_CLOSURE")
def load_closure(tx, inst):
    tx.push(tx.cells[inst.arg])


@op("LOAD_DEREF")
def load_deref(tx, inst):
    tx.push(tx.load_cell(inst.arg))


@op("STORE_DEREF")
def store_deref(tx, inst):
    tx.store_cell(inst.arg, tx.pop())


# NOTE [Deleting a closure variable]: `del v` of a cell variable (DELETE_DEREF) empties the cell; a closure
# sharing it then raises NameError on reading it, as in eager. A cell made while tracing (the frame's own, or
# an inlined callee's) is emptied in the trace (CellValue.deleted): a later break passes nothing for it (the
# resume function's MAKE_CELL makes it empty), a closure rebuilt over it gets an empty cell. A real cell (a
# free variable deleted through `nonlocal`, or a cell passed to a resume function: NOTE [Cells passed to
# resume functions]) is emptied by the break's step in plain Python (graph_break.BreakCodegen._emit_delete_cell),
# and the rest of the frame continues in a resume function.
@op("DELETE_DEREF")
def delete_deref(tx, inst):
    from ..breaks import BreakKind, Unsupported
    from ..translator import RealCell
    cell = tx.cells[inst.arg]
    if isinstance(cell, RealCell):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"deleting the closure variable {inst.arg!r} of a cell that "
                                                 f"exists outside the trace")
    tx.load_cell(inst.arg)  # raises CPython's UnboundLocalError / NameError when the cell is empty
    cell.contents = None
    cell.deleted = True
    tx.output.side_effects.bump(cell)  # NOTE [Cells generators close over] in generator_reach.py


@op("LOAD_ATTR")
def load_attr(tx, inst):
    tx.push(tx.getattr(tx.pop(), inst.arg))


@op("LOAD_METHOD")
def load_method(tx, inst):
    # Canonical form: the bound callable with a NULL; CALL treats it like any callable.
    obj = tx.pop()
    method = opaque_method(obj, inst.arg)  # NOTE [Methods of sequences of changing length]
    push_with_null(tx, method if method is not None else tx.getattr(obj, inst.arg))


@op("STORE_ATTR")
def store_attr(tx, inst):
    obj = tx.pop()
    value = tx.pop()
    tx.store_attr(obj, inst.arg, value)


@op("DELETE_ATTR")
def delete_attr(tx, inst):
    """`del obj.name`: recorded for an object from outside where it is a plain instance-dict delete (NOTE
    [Attribute deletes on objects from outside]); else it runs as plain Python at a graph break."""
    from ..breaks import BreakKind, Unsupported
    from ..values import ObjectValue
    if isinstance(tx.peek(), ObjectValue) and tx.peek().source is not None:
        from ..attribute_deletes import delete_outside_attr
        delete_outside_attr(tx, tx.peek(), inst.arg)
        tx.pop()
        return
    raise Unsupported(BreakKind.SIDE_EFFECT, f"deleting the attribute {inst.arg!r} of {tx.peek().describe()}")


@op("STORE_GLOBAL")
def store_global(tx, inst):
    tx.store_global(inst.arg, tx.pop())


@op("RETURN_VALUE")
def return_value(tx, inst):
    if tx.parent is None:  # NOTE [Generator managers entered and not exited] in generator_ctx.py
        from ..generator_ctx import check_no_entered_generator_cms
        check_no_entered_generator_cms(tx.output)
    tx.return_value = tx.pop()

