"""Breaks inside comprehensions that CPython 3.12+ inlines into the frame (PEP 709).

NOTE [Breaks inside inlined comprehensions]: on 3.11 a list, dict or set comprehension is a function of its
own (`<listcomp>`); a break inside it surfaces at the call of that function in the frame, which runs it as
Python through its hook. 3.12+ inline it: its loop lies inside a cleanup region of the frame (which restores
the iteration variables it shadows), with the saved variables (or NULL) and the container under the iterator
on the stack. A break in its body (`[print(i) or x * i for i in range(3)]`, `[log(x * i) for i in ...]`)
then took the plain tail form (NOTE [Breaks inside try blocks]) without trampolines (a NULL was on the
stack): the rest of the frame, code after the comprehension included, ran as uncaptured Python.
Stock torch.compile (2.14, comprehension_graph_break.py) runs such a comprehension as one Python call and
captures the code after it again. framejit does the same with its loops run as Python (NOTE [Loops run as
Python] in python_loops.py): the break moves to the comprehension's GET_ITER, and from there a tail function
runs the comprehension (calls of user functions in its body go through their frame hooks: NOTE [Loops run
as Python]), with a trampoline placed right after the comprehension's epilogue (the stores that restore the
iteration variables and bind or keep its result) that calls the hooked resume function there, with the stack
then (the result when it stays on the stack; a NULL under it, of a call the comprehension is an argument of,
is stored into a temporary and pushed again by the resume function's prologue) and the live locals plus the
variable the result went to. 3.12/3.13 now give the graphs 3.11 and stock give (`stored`: 2 over 3 calls).
Not taken (the break stays where it was) when the body deletes a local or binds a cell that was unbound at the
break, when the epilogue is not the plain shape below, or where the epilogue's last store is merged with the
next instruction (3.13's STORE_FAST_LOAD_FAST).

NOTE [Walrus targets of comprehensions run as Python]: `ys = [(last := i * 2) for i in range(x.size(0))]`
binds `last` in the frame. Such a comprehension was not run as Python (the trampoline after it could not
pass a local first bound in its body), so over a symbolic range it unrolled and the frame compiled once per
size until the recompile limit ran it eagerly (3.13: 8 traces and an eager frame over 10 sizes; stock the
same). The trampoline now passes each plain-local walrus target too, as `local_or_unbound(name)` (NOTE
[Unbound hidden from eager runs] in resume.py): its value, or `Unbound` when the range was empty, which the
resume function reads as an unbound local (UnboundLocalError where eager raises it).
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

from .normalize import PY312, normalize

_BUILDS = ("BUILD_LIST", "BUILD_MAP", "BUILD_SET")
_STORES = ("STORE_FAST", "STORE_DEREF", "DELETE_FAST", "DELETE_DEREF")


@dataclasses.dataclass(frozen=True)
class Comprehension:
    """An inlined comprehension: its GET_ITER, FOR_ITER and exit (canonical indices), the variables it
    saves, the first instruction after its epilogue, the local its result is stored to (or None), and
    whether the result stays on the stack there."""
    get_iter: int
    loop: int
    exit: int
    saved: tuple[str, ...]
    after: int
    result_var: str | None
    result_on_stack: bool


def comprehensions(code: types.CodeType) -> list[Comprehension]:
    """Every inlined comprehension of `code` whose shape is understood, outermost first."""
    if not PY312:
        return []
    insts = normalize(code).insts
    found = []
    for inst in insts:
        if inst.name == "FOR_ITER" and isinstance(inst.arg, int):
            comp = _at_loop(insts, inst.index)
            if comp is not None:
                found.append(comp)
    return sorted(found, key=lambda c: c.get_iter)


def _at_loop(insts: list, loop: int) -> Comprehension | None:
    """The comprehension whose loop is the FOR_ITER at `loop`: GET_ITER, (LOAD_FAST_AND_CLEAR | MAKE_CELL)*,
    SWAP, BUILD_*, SWAP, FOR_ITER."""
    if loop < 5 or insts[loop - 1].name != "SWAP" or insts[loop - 2].name not in _BUILDS or \
            insts[loop - 2].arg != 0 or insts[loop - 3].name != "SWAP":
        return None
    k = loop - 4
    saved = []
    while k >= 0 and insts[k].name in ("LOAD_FAST_AND_CLEAR", "MAKE_CELL"):
        if insts[k].name == "LOAD_FAST_AND_CLEAR":
            saved.insert(0, str(insts[k].arg))
        k -= 1
    if k < 0 or insts[k].name != "GET_ITER" or not saved:
        return None
    return _epilogue(insts, k, loop, tuple(saved))


def _epilogue(insts: list, get_iter: int, loop: int, saved: tuple[str, ...]) -> Comprehension | None:
    """Read the stores after the loop: the stack there is [..., *saved, result]; each saved variable is
    stored back, the result stored to a local, popped or kept."""
    exit_index = insts[loop].arg
    stack: list[Any] = [("saved", name) for name in saved] + [("result", None)]
    result_var = None
    k = exit_index
    while any(item[0] == "saved" for item in stack):
        if k >= len(insts):
            return None
        inst = insts[k]
        if inst.name == "SWAP" and isinstance(inst.arg, int) and inst.arg <= len(stack):
            stack[-1], stack[-inst.arg] = stack[-inst.arg], stack[-1]
        elif inst.name in ("STORE_FAST", "STORE_DEREF") and stack:
            kind, name = stack.pop()
            if kind == "saved" and str(inst.arg) not in saved or kind == "result" and result_var is not None:
                return None  # (the prologue's SWAP leaves the saved values in an order of its own)
            if kind == "result":
                result_var = str(inst.arg)
        elif inst.name == "POP_TOP" and stack and stack[-1][0] == "result":
            stack.pop()
        else:
            return None
        k += 1
    if k >= len(insts) or insts[k].part or insts[k].position == insts[k - 1].position:
        return None  # the last store is merged with the next instruction (NOTE above)
    on_stack = bool(stack)
    if on_stack and stack != [("result", None)]:
        return None
    return Comprehension(get_iter, loop, exit_index, saved, k, result_var, on_stack)


def containing(code: types.CodeType, index: int) -> Comprehension | None:
    """The outermost inlined comprehension whose loop holds instruction `index`."""
    for comp in comprehensions(code):
        if comp.loop < index < comp.exit:
            return comp
    return None


def at_loop(code: types.CodeType, loop_index: int) -> Comprehension | None:
    """The inlined comprehension whose FOR_ITER is at `loop_index`, or None."""
    return next((c for c in comprehensions(code) if c.loop == loop_index), None)


def moved_break(code: types.CodeType, exc: Any) -> Any:
    """The break `exc` moved to the GET_ITER of the inlined comprehension it happened in, with that
    comprehension's loop run as Python (NOTE above), or None."""
    from .breaks import Unsupported
    from .resume import _ORIGIN
    if not isinstance(exc, Unsupported) or exc.root_index is None or getattr(exc, "python_loop", None) is not None \
            or getattr(exc, "comprehension_tried", False):
        return None
    exc.comprehension_tried = True
    comp = containing(code, exc.root_index)
    if comp is None:
        return None
    if code in _ORIGIN:  # a resume function that starts inside the comprehension never reaches its GET_ITER
        point = next(i for i in normalize(code).insts if i.name == "JUMP").arg
        if comp.get_iter < point < comp.after:
            return None
    moved = Unsupported(exc.kind, exc.graph_break.explanation, exc.graph_break.user_stack)
    moved.graph_break = exc.graph_break
    moved.root_index, moved.python_loop, moved.moved_from = comp.get_iter, comp.loop, exc
    moved.comprehension = comp
    return moved


def body_binds_unbound(code: types.CodeType, comp: Comprehension, bound: Any) -> bool:
    """The comprehension's body stores a cell other than its own variables that is not in `bound`, or
    deletes a local: the trampoline after it could not pass it (NOTE [Walrus targets of comprehensions run
    as Python])."""
    insts = normalize(code).insts
    for inst in insts[comp.loop + 1:comp.exit]:
        if inst.name in _STORES and str(inst.arg) not in comp.saved and \
                (inst.name != "STORE_FAST" and str(inst.arg) not in bound or inst.name.startswith("DELETE")):
            return True
    return False


def after_loop(code: types.CodeType, comp: Comprehension, below: tuple[str, ...],
               names: tuple[str, ...]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """(canonical index after the epilogue, stack layout there, live locals there) for a comprehension
    whose GET_ITER had the stack `below` (layout) under its iterable and the live locals `names`."""
    layout = below + (("value",) if comp.result_on_stack else ())
    after_names = names + tuple(n for n in walrus_targets(code, comp) if n not in names)
    if comp.result_var is not None and comp.result_var not in names:
        after_names = after_names + (comp.result_var,)
    return comp.after, layout, after_names


def walrus_targets(code: types.CodeType, comp: Comprehension) -> tuple[str, ...]:
    """The plain locals the comprehension's body binds other than its own variables, in order (NOTE [Walrus
    targets of comprehensions run as Python])."""
    insts = normalize(code).insts
    found = [str(i.arg) for i in insts[comp.loop + 1:comp.exit] if i.name == "STORE_FAST" and str(i.arg) not in comp.saved]
    return tuple(dict.fromkeys(found))
