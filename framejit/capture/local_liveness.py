"""Which locals a resume function takes: liveness of a code object's fast locals.

NOTE [Resume functions take the same locals on every pass]: a resume function is keyed by (code, index, stack
layout, locals passed), and the locals passed were every local bound at the break. A break inside a loop's body
then made two resume functions for one instruction: on the first pass the locals assigned later in the body
(`gh, gw = grid(sizes[i])`, a loop's `current_pos = 0`) are unbound, on later passes they are bound from the
pass before. Each was traced, so the same code was traced twice (LLaVA-NeXT's pack_image_features: the
part after get_anyres_image_grid_shape; Qwen2-VL's get_rope_index: every resume function of its batch loop).
Now the locals passed at a break at canonical instruction `index` are, in the original code's
`co_varnames` order:
- the bound locals that are live there (some path reads them before writing them; a `del`, a 3.12
  LOAD_FAST_AND_CLEAR and an exception handler's reads count as reads), as before;
- every local that is dead there but may be bound (the set depends on the index alone): its value when it is
  bound, else the class `Unbound`. A dead local is never read by the resume function before it is written,
  so its trace never reads it (no guard) and every pass reuses one entry; it is still passed, so its object
  lives as long as in eager (no earlier finalizer) and a resume function that breaks again passes it on.
One resume function then serves the first pass and the later ones, which had two functions before, each
with its own recompile limit: a resume function whose entry lies in a loop may have twice the limit's entries
(`FrameHook.entry_budget`), so a loop that compiled within the two budgets (a with-block's `as` value, a
branch on the loop index and an int argument: test_enter_breaks) does not run eagerly now.
A tail function (NOTE [Breaks inside try blocks], [Loops run as Python]) also takes the dead locals that the
resume functions it trampolines to take, so those keep the same locals too; not a local the code deletes
anywhere (a trampoline loads each one, and a `del` could have unbound it by then). A resume function running
as Python holds `Unbound` in such a slot where eager has none: only a frame reader could see it (its `f_locals`
lists it; it lists the resume function's `___stack` arguments already), and a frame reader reached in a
resume function's trace makes that frame run eagerly when a local it would list may hold `Unbound`
(frame_locals.emit_user_frame_call). Codes that read their locals by
name (`LOAD_NAME`, `LOAD_LOCALS`, `locals()`/`vars()`/`dir()`/`eval`/`exec` named) keep every local live;
so does a code with `__class__` for its first argument (zero-argument `super()` reads it from the frame's first
slot: NOTE [The instance comes first] in resume.py).
"""
from __future__ import annotations

import types

from .normalize import normalize
from .sources import safe_local


class Unbound:
    """What a resume function gets for a dead local that is not bound at the break (NOTE [Resume functions
    take the same locals on every pass]). Never read: the local is written before any read."""

    def __init__(self) -> None:
        raise TypeError("Unbound is a marker class")


_READS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST"})
_BY_NAME = frozenset({"LOAD_NAME", "STORE_NAME", "DELETE_NAME", "LOAD_LOCALS", "IMPORT_STAR",
                      "LOAD_FROM_DICT_OR_GLOBALS", "LOAD_FROM_DICT_OR_DEREF"})
_FRAME_READERS = frozenset({"locals", "vars", "dir", "eval", "exec"})
_ENDS = frozenset({"RETURN_VALUE", "RAISE_VARARGS", "RERAISE"})

# code -> (live-in sets, maybe-bound sets, surely-bound sets) per canonical instruction; None when every
# local stays live
_CACHE: dict[types.CodeType, tuple[list[frozenset[str]], list[frozenset[str]]] | None] = {}


def _name(arg) -> str | None:
    return arg if isinstance(arg, str) else None


def _successors(insts, inst) -> list[int]:
    out = [] if inst.name in _ENDS else [inst.index + 1]
    instr = inst.instr
    if isinstance(inst.arg, int) and instr is not None and instr.has_jump() and inst.part == 0 \
            and not isinstance(inst.arg, bool):
        if instr.is_uncond_jump():
            out = []
        out.append(inst.arg)
    if inst.handler is not None:
        out.append(inst.handler)
    return [i for i in out if 0 <= i < len(insts)]


def _analyse(code: types.CodeType):
    insts = normalize(code).insts
    for inst in insts:
        if inst.name in _BY_NAME or inst.name in ("LOAD_GLOBAL", "LOAD_NAME") and \
                _global_name(inst.arg) in _FRAME_READERS:
            return None
    cells = set(code.co_cellvars) | set(code.co_freevars)
    succ = [_successors(insts, inst) for inst in insts]
    reads = [{_name(i.arg)} - {None} - cells if i.name in _READS else set() for i in insts]
    writes = [{_name(i.arg)} - {None} - cells if i.name == "STORE_FAST" else set() for i in insts]
    live: list[frozenset[str]] = [frozenset()] * len(insts)
    changed = True
    while changed:  # backward: live_in = reads | (live_out - writes)
        changed = False
        for k in range(len(insts) - 1, -1, -1):
            out = frozenset().union(*(live[s] for s in succ[k]))
            new = frozenset(reads[k] | (out - writes[k]))
            if new != live[k]:
                live[k], changed = new, True
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    entry = frozenset(code.co_varnames[:nargs]) - cells
    clears = [{_name(i.arg)} - {None} if i.name in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR") else set() for i in insts]
    maybe = _forward(insts, succ, entry, lambda k, s: (s | writes[k]) - clears[k], frozenset.union)
    must = _forward(insts, succ, entry, lambda k, s: (s | writes[k]) - clears[k], frozenset.intersection)
    if "__class__" in code.co_freevars and code.co_varnames[:1]:  # 3.11's super() reads the first argument
        first = code.co_varnames[0]
        live = [s | {first} for s in live]
    return live, maybe, must


def _forward(insts, succ, entry, transfer, join) -> list[frozenset[str]]:
    """A forward dataflow from the entry: the set at each instruction (an exception handler gets the set
    before the instruction that raised, which is the smaller one for `must` and within `maybe`'s after)."""
    state: list[frozenset[str] | None] = [None] * len(insts)
    if insts:
        state[0] = entry
    work = [0]
    while work:
        k = work.pop()
        after = transfer(k, state[k])
        handler = insts[k].handler
        for s in succ[k]:
            flowing = state[k] if s == handler and join is frozenset.intersection and s != k + 1 else after
            new = flowing if state[s] is None else join(state[s], flowing)
            if new != state[s]:
                state[s] = new
                work.append(s)
    return [b if b is not None else frozenset() for b in state]


def _global_name(arg) -> str | None:
    return arg[1] if isinstance(arg, tuple) and len(arg) == 2 else _name(arg)


def _facts(code: types.CodeType):
    if code not in _CACHE:
        _CACHE[code] = _analyse(code)
    return _CACHE[code]


def _raw_names(code: types.CodeType) -> dict[str, str]:
    """Each local's name as a frame's locals may spell it (the code's own name, or its safe name in a resume
    function: NOTE [Locals that are not identifiers]) -> the code's own name."""
    return {**{safe_local(n): n for n in code.co_varnames}, **{n: n for n in code.co_varnames}}


def resume_locals(code: types.CodeType, index: int, bound: list[str]) -> tuple[list[str], frozenset[str]] | None:
    """For a break whose resume function starts at canonical instruction `index` of `code` (an original code,
    not a resume function's) with the fast locals `bound` (as the frame spells them): (the locals to pass, any
    unknown name first, then in `co_varnames` order, a bound one as the frame spells it, an unbound one by its
    safe name; those that are dead at `index` and not bound), or None when every bound local is passed as
    before."""
    facts = _facts(code)
    if facts is None or not 0 <= index < len(facts[0]):
        return None
    live, maybe = facts[0][index], facts[1][index]
    raw = _raw_names(code)
    spelled = {raw[n]: n for n in bound if n in raw}
    cells = set(code.co_cellvars) | set(code.co_freevars)
    # not one the code deletes: a trampoline of a tail function loads each local it passes on, and a `del`
    # could have unbound it by then (bound, such a local is passed as before)
    gone = {raw[n] for n in deleted(code)}
    dead = {n for n in code.co_varnames if n not in live and n in maybe and n not in cells and n not in gone}
    wanted = dead | {n for n in spelled if n in live or n in cells}
    names = [n for n in bound if n not in raw]
    names += [spelled.get(n, safe_local(n)) for n in code.co_varnames if n in wanted]
    names += [spelled[n] for n in code.co_varnames if n in spelled and n not in wanted]  # bound, not maybe-bound
    return names, frozenset(safe_local(n) for n in dead if n not in spelled)


def live_after(code: types.CodeType, first: int, end: int) -> frozenset[str] | None:
    """The fast locals live where control leaves canonical instructions `first`..`end`-1 of `code` (a loop:
    NOTE [Locals first bound in a loop run as Python] in python_loops.py), or None when every local stays live."""
    facts = _facts(code)
    if facts is None:
        return None
    insts = normalize(code).insts
    exits = {s for inst in insts[first:end] for s in _successors(insts, inst) if not first <= s < end}
    return frozenset().union(*(facts[0][s] for s in exits))


def in_loop(code: types.CodeType, index: int) -> bool:
    """Canonical instruction `index` of `code` lies in a loop (a backward jump's range covers it)."""
    for inst in normalize(code).insts:
        instr = inst.instr
        if isinstance(inst.arg, int) and instr is not None and instr.has_jump() and inst.arg <= index < inst.index:
            return True
    return False


def deleted(code: types.CodeType) -> frozenset[str]:
    """The locals (safe names) that `code` deletes or clears somewhere (`del x`; 3.12's LOAD_FAST_AND_CLEAR)."""
    return frozenset(safe_local(i.arg) for i in normalize(code).insts
                     if i.name in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR") and isinstance(i.arg, str))


def in_order(code: types.CodeType, names) -> list[str]:
    """`names` (as a frame spells them) in `co_varnames` order, any unknown name first in its order."""
    raw = _raw_names(code)
    order = {n: k for k, n in enumerate(code.co_varnames)}
    return [n for n in names if n not in raw] + sorted((n for n in names if n in raw), key=lambda n: order[raw[n]])


def dead_arguments(code: types.CodeType, index: int, names) -> frozenset[str]:
    """The names among `names` that are dead at `index`: a resume function there may get `Unbound` for them."""
    facts = _facts(code)
    if facts is None or not 0 <= index < len(facts[0]):
        return frozenset()
    raw = _raw_names(code)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    gone = deleted(code)
    return frozenset(n for n in names if n in raw and raw[n] not in facts[0][index] and raw[n] not in cells
                     and safe_local(raw[n]) not in gone)


def maybe_unbound(code: types.CodeType, index: int, names) -> frozenset[str]:
    """The names among a resume function's locals `names` that may hold `Unbound`: dead at `index` and not
    bound there on every path."""
    facts = _facts(code)
    if facts is None or not 0 <= index < len(facts[0]):
        return frozenset()
    raw = _raw_names(code)
    return frozenset(n for n in dead_arguments(code, index, names) if raw[n] not in facts[2][index])


__all__ = ["Unbound", "dead_arguments", "deleted", "in_loop", "in_order", "live_after", "maybe_unbound",
           "resume_locals"]
