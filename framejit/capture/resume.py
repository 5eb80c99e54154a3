"""Resume functions: the rest of a code object after a graph break, as a new function.

`resume_function(code, index, stack_layout, live_locals, ...)` returns a FrameHook for a function whose
code is the original code object with a prologue: it pushes the live stack values (its first arguments;
NULLs are re-pushed in place) and jumps to the instruction at `index`. Its remaining arguments are the
live locals. Because it enters through a FrameHook, the rest of the function is captured and guarded
like any frame, and may break again.

NOTE [Resume of a resume]: a resume function's code is a copy of the original code. A break inside it is
mapped back to the original code and instruction (`origin`), so loops that break on every iteration
reuse one resume function per (instruction, stack layout, live locals) instead of growing a chain.
"""
from __future__ import annotations

import dis
import types
from typing import Any

import bytecode
import torch
from bytecode import CellVar, Instr, Label, TryBegin, TryEnd

from . import emit, inlined_comprehensions
from .normalize import normalize
from .sources import safe_local  # NOTE [Locals that are not identifiers]

# resume code object -> (original code, number of canonical instructions in its prologue)
_ORIGIN: dict[types.CodeType, tuple[types.CodeType, int]] = {}
STACK_PREFIX = "___stack"


def origin(code: types.CodeType, index: int) -> tuple[types.CodeType, int]:
    """The original code object and instruction index that (code, index) stands for."""
    if code in _ORIGIN:
        original, shift = _ORIGIN[code]
        call = _PROLOGUE_CALLS.get(code)  # NOTE [Nested graph breaks]: the prologue's call stands for the
        if call is not None and index in (call[0], call[0] + 1):  # original call, the jump after it for
            return original, call[1] - shift - (index == call[0])  # the instruction after that call
        return original, index - shift
    return code, index


# nested resume code -> (canonical index of its prologue's call of the inner frames' function, of the
# resume point): NOTE [Nested graph breaks] in nested_breaks.py
_PROLOGUE_CALLS: dict[types.CodeType, tuple[int, int]] = {}


def make_resume_code(code: types.CodeType, index: int, layout: tuple[str, ...],
                     live_locals: tuple[str, ...], successors: tuple = (),
                     python_loop: tuple | None = None, cells: tuple[str, ...] = (),
                     route: Any = None) -> types.CodeType:
    """Code for `code` resumed at canonical instruction `index` with the given stack and locals.

    `layout` describes the stack, bottom first: "null" (re-pushed as NULL), "value" (an argument), "iter"
    (an argument holding the remaining items of a for-loop's iterator as a list, turned back into an iterator
    by GET_ITER, so the resumed trace can keep unrolling the loop; from a trampoline the iterator itself),
    "carried" (an iterator no value models; both passed unread: NOTE [Iterators passed unread]), or "block"
    (an argument holding a with-block's block object, entered by BEFORE_WITH, which leaves its `__exit__` in
    the slot; a last argument then holds the grad mode to set after entering the blocks: NOTE [Breaks inside
    with-blocks] in graph_break.py).

    `successors` (tail functions only, NOTE [Breaks inside try blocks] in graph_break.py): for each way
    control leaves the instruction at `index`, ("next" or "jump", hook, stack layout there); that edge
    then goes to a trampoline, outside every exception region, which calls the hooked resume function
    with the stack and the live locals and returns its result.

    `python_loop` (tail functions only, NOTE [Loops run as Python] in python_loops.py): (index of a
    FOR_ITER, call helper, hook after the loop, stack layout there): the loop's calls go through the
    helper, and its exhausted edge through a trampoline to that hook.

    `cells`: live cell variables of `code`, passed as the cell itself (NOTE [Cells passed to resume functions]).

    `route` (tail functions other than loops'): every call in the code calls `route(callable)`'s answer,
    the call helper of loops (NOTE [Caller-naming calls in tail functions] in caller_frames.py).
    """
    target = normalize(code).insts[index]
    if target.part:
        raise ValueError("cannot resume inside a split superinstruction")
    items = list(bytecode.Bytecode.from_code(code))
    _rename_locals(items)
    live_locals = tuple(map(safe_local, live_locals))
    body, stack_args = _resume_body(code, items, target, layout, live_locals, successors, python_loop, cells, route)
    bc = bytecode.Bytecode.from_code(code)
    bc.clear()
    bc.extend(emit.unpaired_locals(body))  # NOTE [Paired locals in copied code]
    _set_resume_signature(bc, code, index, layout, stack_args, live_locals)
    # NOTE [Exception tables of resume code]: the prologue jumps into the middle of the code, so a try
    # region that encloses the resume point is entered without passing its TryBegin, and the `bytecode`
    # library's flow analysis (which starts at the entry) would leave its handler depth unset and
    # undercount the stack. The stack at every instruction from the resume point on is the original's,
    # so the original exception table's depths and the original stack size are the right ones.
    _copy_handler_depths(code, items)
    calls = max((len(after) + len(live_locals) for _, _, after in successors), default=0)
    if python_loop or route is not None:  # a rewritten call holds its helper and keyword names too
        calls = max(calls, len(python_loop[3]) + len(live_locals) + 1 if python_loop else 0, code.co_stacksize + 3)
    new_code = bc.to_code(stacksize=max(code.co_stacksize, len(layout) + 4, calls + 4),
                          compute_exception_stack_depths=False)
    # the canonical index of the resume point in the new code, minus the original's: the instructions the
    # prologue adds, counted as normalisation counts them (its JUMP, the first, goes to the resume point)
    jump = next(i for i in normalize(new_code).insts if i.name == "JUMP")
    _ORIGIN[new_code] = (code, jump.arg - index)
    if cells:
        _CELL_ARGS[new_code] = frozenset(cells)
    _VALUE_ARGS[new_code] = frozenset(f"{STACK_PREFIX}{i}" for i, kind in enumerate(layout) if kind == "value")
    from .local_liveness import maybe_unbound
    _DEAD_ARGS[new_code] = maybe_unbound(code, index, live_locals)
    return new_code


# resume code -> its stack arguments of kind "value" (not a loop's iterator: NOTE [Sequences of changing length
# carried across breaks] in carried_loops.py)
_VALUE_ARGS: dict[types.CodeType, frozenset[str]] = {}


def value_stack_args(code: types.CodeType) -> frozenset[str]:
    return _VALUE_ARGS.get(code, frozenset())


# resume code -> its locals that may hold local_liveness.Unbound (NOTE [Resume functions take the same locals
# on every pass])
_DEAD_ARGS: dict[types.CodeType, frozenset[str]] = {}


def maybe_unbound(code: types.CodeType) -> frozenset[str]:
    """The locals of a resume function's code that are dead at its entry (they may hold `Unbound`)."""
    return _DEAD_ARGS.get(code, frozenset())


# NOTE [Unbound hidden from eager runs]: a resume function gets `local_liveness.Unbound` for a dead local that is
# not bound at the break (NOTE [Resume functions take the same locals on every pass]). Traced, nothing reads
# it; but when the resume function runs as Python (its frame runs eagerly: a frame reader reached where a
# local may hold Unbound, the recompile limit, a graph that raised), a frame reader called there
# (`sys._getframe(1).f_locals`, `locals()`) listed the marker as a local where eager's frame has none (review
# revG G1: `for i in range(3): y = opaque(x + i); out.append(peek()); z = y * 2` showed z =
# `<class Unbound>` on the first pass). Such a hook runs `eager_function(fn)` instead: the same code with a
# first block that deletes each slot holding the marker (`if z is Unbound: del z`), and deletes the stack
# arguments (`___stack0`) once the prologue has pushed them, so the frame has eager's locals. It is never
# traced (the trace does not read dead locals); a tail function (no hook of its own) loads its locals to pass
# them on and keeps the marker; but a loop run as Python (a tail function, NOTE [Loops run as Python]), whose
# frame readers called in its body see, deletes them in its prologue too, and its exit trampoline passes each
# one on as `local_or_unbound(name)` (its value, or Unbound where the loop never bound it).
def eager_function(fn: types.FunctionType) -> types.FunctionType:
    """`fn` (a resume function), or the same code deleting its slots that hold `Unbound` first (NOTE
    [Unbound hidden from eager runs])."""
    names = maybe_unbound(fn.__code__)
    stack_args = [n for n in fn.__code__.co_varnames[:fn.__code__.co_argcount] if n.startswith(STACK_PREFIX)]
    if not names and not stack_args:
        return fn
    bc = bytecode.Bytecode.from_code(fn.__code__)
    items = list(bc)
    _copy_handler_depths(fn.__code__, items)  # NOTE [Exception tables of resume code]: the table's own depths
    line = next((i.lineno for i in items if isinstance(i, Instr) and isinstance(i.lineno, int)),
                fn.__code__.co_firstlineno)
    block = _unbound_deleted(names, fn.__code__)
    _set_line(block, line)
    start = _prologue_position(items)
    # the prologue has pushed the stack arguments when it jumps to the resume point: out of the frame then
    jump = next((k for k in range(start, len(items)) if isinstance(items[k], Instr) and items[k].name == "JUMP_FORWARD"),
                None)
    if jump is None:  # not a prologue of make_resume_code: leave the function as it is
        return fn
    gone = [Instr("DELETE_FAST", name, lineno=items[jump].lineno) for name in stack_args]
    bc.clear()
    bc.extend(items[:start] + block + items[start:jump] + gone + items[jump:])
    code = bc.to_code(stacksize=max(fn.__code__.co_stacksize, 2), compute_exception_stack_depths=False)
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _unbound_deleted(names, code: types.CodeType) -> list:
    """`if name is Unbound: del name` for each of `names` (NOTE [Unbound hidden from eager runs])."""
    from .local_liveness import Unbound
    block: list = []
    for name in sorted(names, key=lambda n: code.co_varnames.index(n) if n in code.co_varnames else -1):
        skip = Label()
        block += [Instr("LOAD_FAST", name), Instr("LOAD_CONST", Unbound), Instr("IS_OP", 0),
                  *emit.conditional_jump("POP_JUMP_IF_FALSE", skip), Instr("DELETE_FAST", name), skip]
    return block


def local_or_unbound(name: str) -> Any:
    """The caller's local `name`, or `Unbound` where it is not bound (a loop run as Python passing on a local
    it deleted: NOTE [Unbound hidden from eager runs])."""
    import sys
    from .local_liveness import Unbound
    return sys._getframe(1).f_locals.get(name, Unbound)


def _resume_body(code, items, target, layout, live_locals, successors, python_loop, cells, route):
    """The resume function's instructions: the original's (`items`, locals renamed) with a label at the
    resume point, the prologue that rebuilds the stack and jumps there, and the tail's trampolines; and
    the names of the prologue's stack arguments."""
    label = Label()
    prologue, stack_args = _prologue(layout, label)
    hidden: frozenset[str] = frozenset()
    if python_loop:  # NOTE [Callees routed in loops run as Python]: the loop's frame holds the user's locals only
        prologue[-1:-1] = [Instr("DELETE_FAST", name) for name in stack_args]
        from .local_liveness import maybe_unbound as unbound_at
        hidden = unbound_at(code, target.index, live_locals)  # NOTE [Unbound hidden from eager runs]
        from .block_loops import bound_after_loop, unbound_after_loop  # NOTE [Locals bound after a loop inside its
        loop = normalize(code).insts[python_loop[0]]  # with-block], [Locals a loop run as Python may leave unbound]
        hidden |= frozenset(live_locals) & (bound_after_loop(normalize(code).insts, loop) | unbound_after_loop(code, loop))
        prologue[:0] = _unbound_deleted(hidden, code)
    prologue[-1:-1] = emit.truth_test_prefix(target)  # 3.13: the value a truth test reads is a bool
    first = _safe_leading(code)
    if first and first not in live_locals:  # NOTE [The instance comes first]: unbound at the break
        prologue[-1:-1] = [Instr("DELETE_DEREF", CellVar(first)) if first in code.co_cellvars
                           else Instr("DELETE_FAST", first)]
    line = _line_of(items, target.position, code)
    _set_line(prologue, line)
    start_at = target.start  # a call starts at its KW_NAMES, a truth test at its TO_BOOL, ... (normalize.py)
    trampolines: list = []
    if successors:
        trampolines = _trampolines(items, target.position, successors, live_locals, set(code.co_cellvars), cells,
                                   _safe_leading(code))
        _set_line(trampolines, line)
    items.insert(start_at, label)
    if python_loop:
        trampolines = _loop_trampoline(items, start_at, python_loop, code, live_locals, cells, hidden)
    elif route is not None:
        from . import python_loops
        python_loops.route_calls(items, route)
    body = items + trampolines
    start = _prologue_position(body)
    body = body[:start] + prologue + body[start:]
    _bind_cells(body, cells)  # NOTE [Cells passed to resume functions]
    return body, stack_args


def _set_resume_signature(bc, code, index, layout, stack_args, live_locals) -> None:
    """Arguments: the frame's first local where zero-argument super() reads it (NOTE [The instance comes
    first]), the stack's values, then the other live locals (a with-block's grad mode last); names."""
    first = _safe_leading(code)
    rest = [name for name in live_locals if name != first]
    bc.argnames = ([first] if first else []) + (stack_args[:-1] + rest + stack_args[-1:] if "block" in layout
                                                else stack_args + rest)
    bc.argcount = len(bc.argnames)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.flags = bc.flags & ~(bytecode.CompilerFlags.VARARGS | bytecode.CompilerFlags.VARKEYWORDS)
    # NOTE [Resume function names]: co_name stays the original's, as CPython names the frame in tracebacks
    # and logging records' funcName (eager shows `f`, not a generated name); co_qualname says which
    # resume function it is (`f.<resume at 18>`: dumps, eager-frame reasons, the frame cache)
    bc.name = code.co_name
    if hasattr(bc, "qualname"):
        bc.qualname = f"{getattr(code, 'co_qualname', code.co_name)}.<resume at {index}>"


# NOTE [The instance comes first]: zero-argument `super()` takes the instance from the frame's first local slot
# (and the class from the `__class__` cell): always on 3.11, and on 3.12+ wherever LOAD_SUPER_ATTR is not
# specialised (its first runs) or the compiler emits a plain `super()` call. A resume function whose first
# argument was `___stack0` or another local made `print("hi"); return super().forward(x)` in an nn.Linear
# subclass raise AttributeError ("'super' object has no attribute 'forward'") where eager returns (review revG
# G2), so such frames ran eagerly on 3.11 (c0a428f), and on 3.12+ a resume function run as Python (past its
# recompile limit, a tail function) read the wrong instance too. Now a resume function of a code that has a
# `__class__` cell and positional parameters takes the original's first local as its own first argument, under
# its own name, before the stack; every caller (graph_break.BreakCodegen._resume, the trampolines below) passes
# it first. The slot is the variable itself, so `self = other` before super() gives eager's instance, and a
# first local unbound at the break (`del self`) is passed as None and deleted by the prologue, so super()
# raises as in eager. The resume function gets the original's closure (Hooks.resume), so `__class__` is the
# frame's own cell. A code without positional parameters (`def f(*args)`: eager's super() raises "no
# arguments") runs eagerly when it may call super() after its break, and so does a frame whose break is the
# super() call itself (NOTE [Zero-argument super() at breaks] in break_sites.py). Measured: the frames of
# tests/capture/test_super_after_break.py (nn.Linear subclasses, a nested class, a classmethod, loops, try and
# with blocks around the break) ran wholly eagerly on 3.11 and now make graphs on both sides of the break.
def leading_local(code: types.CodeType) -> str | None:
    """The name a resume function of `code` takes first (NOTE [The instance comes first]), or None."""
    if code.co_argcount and "__class__" in code.co_freevars:
        return code.co_varnames[0]
    return None


def _safe_leading(code: types.CodeType) -> str | None:
    first = leading_local(code)
    return first and safe_local(first)


def leading_first(code: types.CodeType, names: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """(the local passed before the stack, or None; the other `names` in order) for a resume function of
    `code` (NOTE [The instance comes first]). The first is passed as None when it is not among `names`."""
    first = leading_local(code)
    return first, tuple(name for name in names if name != first)


# NOTE [Cells passed to resume functions]: a closure made before a break reads the frame's cell (`one`, `c`),
# and the frame may assign the variable again after the break (`one = lambda ...`), or the closure may assign
# it (`nonlocal`). In eager both sides use one cell. A resume function that got the cell's contents would
# make a new cell of its own (MAKE_CELL) that the closure never sees, so such a variable is passed as the
# cell object itself (graph_break.py decides which: break_callees.shared_cells). The resume code keeps the
# variable as a cell variable and argument; right after its MAKE_CELL (which wraps the argument, the real
# cell, in a new cell) `LOAD_DEREF v; STORE_FAST v` puts the real cell into the variable's slot, so every
# LOAD_DEREF/STORE_DEREF/LOAD_CLOSURE after it uses the frame's own cell; `locals()` and `f_locals` show its
# contents (MAKE_CELL ran), and a closure made after the break closes over the same cell. The trace skips
# the pair: its MAKE_CELL models the variable as that real cell, found through the argument
# (`RealCell(cell, v, L['v'])`: reads guard `L['v'].cell_contents`, stores are replayed into it:
# handlers/stack.py make_cell), and a later break passes it on as itself. A resume function's tail and loop
# trampolines pass it as the cell (LOAD_CLOSURE) too.
_CELL_ARGS: dict[types.CodeType, frozenset[str]] = {}


def cell_args(code: types.CodeType) -> frozenset[str]:
    """The cell variables a resume function's code gets as cells (NOTE [Cells passed to resume functions])."""
    return _CELL_ARGS.get(code, frozenset())


def _bind_cells(items: list, cells: tuple[str, ...]) -> None:
    """After each named variable's MAKE_CELL, put the argument (a cell) into its slot."""
    for name in cells:
        at = next((k for k, item in enumerate(items) if isinstance(item, Instr) and item.name == "MAKE_CELL"
                   and getattr(item.arg, "name", item.arg) == name), None)
        if at is None or any(isinstance(item, Instr) and item.name == "RESUME" for item in items[:at]):
            raise ValueError(f"no MAKE_CELL of {name!r} before the code starts")
        lineno = items[at].lineno
        items[at + 1:at + 1] = [Instr("LOAD_DEREF", CellVar(name), lineno=lineno),
                                Instr("STORE_FAST", name, lineno=lineno)]


def _rename_locals(items: list) -> None:
    for item in items:
        if isinstance(item, Instr) and "_FAST" in item.name:
            arg = item.arg
            if isinstance(arg, str) and safe_local(arg) != arg:
                item.arg = safe_local(arg)
            elif isinstance(arg, tuple) and any(isinstance(a, str) and safe_local(a) != a for a in arg):
                item.arg = tuple(safe_local(a) if isinstance(a, str) else a for a in arg)


def _prologue(layout: tuple[str, ...], label: Label) -> tuple[list, list[str]]:
    """The instructions that rebuild the stack described by `layout` and jump to `label`, and the names
    of the arguments they read (see make_resume_code)."""
    stack_args = [f"{STACK_PREFIX}{i}" for i, kind in enumerate(layout) if kind != "null"]
    prologue = []
    arg_iter = iter(stack_args)
    for kind in layout:
        if kind == "null":
            prologue.append(Instr("PUSH_NULL"))
        else:
            prologue.append(Instr("LOAD_FAST", next(arg_iter)))
            if kind in ITERATOR_KINDS:
                prologue.append(Instr("GET_ITER"))
            elif kind == "block":
                prologue += [Instr("BEFORE_WITH"), Instr("POP_TOP")]
    if "block" in layout:
        grad_arg = f"{STACK_PREFIX}grad"
        stack_args.append(grad_arg)
        prologue += emit.call_const(torch.set_grad_enabled, [Instr("LOAD_FAST", grad_arg)]) + [Instr("POP_TOP")]
    prologue.append(emit.jump_forward(label))
    return prologue, stack_args


def _loop_trampoline(items: list, label_at: int, python_loop: tuple, code: types.CodeType,
                     live_locals: tuple[str, ...], cells: tuple[str, ...] = (), hidden: frozenset = frozenset()) -> list:
    """NOTE [Loops run as Python]: rewrite the loop's calls and point its exit at a trampoline (returned)."""
    from . import block_loops, python_loops
    loop_index, helper, hook, after = python_loop
    position = normalize(code).insts[loop_index].position
    position += position >= label_at  # the resume label was inserted before it
    comp = inlined_comprehensions.at_loop(code, loop_index)
    last = None
    if comp is not None:  # NOTE [Breaks inside inlined comprehensions]: the trampoline follows the epilogue
        last_at = normalize(code).insts[comp.after - 1].position
        last = items[last_at + (last_at >= label_at)]
        live_locals = inlined_comprehensions.after_loop(code, comp, (), live_locals)[2]
        hidden = hidden | frozenset(inlined_comprehensions.walrus_targets(code, comp))  # may stay unbound
    insts = normalize(code).insts
    called = insts[loop_index].name == "CALL"  # NOTE [Comprehensions over symbolic ranges]
    after_block = python_loops.loop_exit(insts[loop_index], insts) != block_loops.natural_exit(insts[loop_index])
    if after_block:  # NOTE [Loops run as Python at the end of a with-block]: after the block's exit
        last_at = insts[python_loops.loop_exit(insts[loop_index], insts) - 1].position
        last = items[last_at + (last_at >= label_at)]  # found before the calls' rewrite moves positions
    elif called:
        last = items[position]
    outside = _calls_outside(items, items[min(position, label_at)], items[position].arg if last is None else last)
    if after_block:
        python_loops.hook_calls_after_loop(items, position, last, helper)
        if called:  # NOTE [Comprehensions ending a with-block]
            python_loops.route_comprehension_calls(items, label_at, helper)
        else:
            python_loops.hook_loop_calls(items, position, helper)
    elif called:
        python_loops.route_comprehension_calls(items, label_at, helper)  # NOTE [Comprehension bodies routed]
    else:
        python_loops.hook_loop_calls(items, position, helper)
    if comp is not None or called or after_block:
        entry = [Label()]
        at = next(k for k, item in enumerate(items) if item is last)
        items.insert(at + 1, emit.jump_forward(entry[0]))
        items[at + 1].lineno = last.lineno
        items.insert(at + 2, Label())
        after_exit = items[at + 2]
    else:
        after_exit = _after_exhausted(items, items[position].arg)
        entry = python_loops.exit_trampoline_entry(items, position)
    unbound = frozenset(live_locals) & block_loops.unbound_after_loop(code, insts[loop_index]) if comp is None else ()
    entry += _unbound_goes_on(sorted(unbound), after_exit)  # NOTE [Locals a loop run as Python may leave unbound]
    depth = sum(1 if isinstance(i, TryBegin) else -1 if isinstance(i, TryEnd) else 0 for i in items)
    if depth:
        raise ValueError("the code ends inside an exception region: no place for trampolines")
    out = entry + _trampoline_call(hook, after, live_locals, set(code.co_cellvars), cells, _safe_leading(code), hidden)
    _set_line(out, items[position].lineno if isinstance(items[position].lineno, int) else code.co_firstlineno)
    python_loops.route_calls(items, helper, calls=outside)  # NOTE [Calls of a tail function outside its loop]
    return out


# NOTE [Calls of a tail function outside its loop]: a tail function runs the loop, then the code up to its trampoline
# (NOTE [Loops run as Python]); other code of the frame runs there only after an exception of the loop caught by a
# try around it (NOTE [With-blocks inside a try body]: the except or finally body, then the rest of the frame), where
# the loop left a local unbound (NOTE [Locals a loop run as Python may leave unbound]) or through an outer loop's
# back edge. Its calls were plain: an nn.Module or a helper called in the except body or after the try was never
# compiled, however often that path ran (review revL H1: /tmp/revL/h1_min.py, 50 ops run inside graphs over 10
# calls where the parent, which unrolled the loop, had 190). They are routed too, as every call of a tail function
# of another break is (NOTE [Caller-naming calls in tail functions] in caller_frames.py): the calls found before
# the loop's own are rewritten (last: rewriting moves positions), so the helper calls those insert are not routed
# again.
def _calls_outside(items: list, first: Any, last: Any) -> list:
    """The calls of `items` before the item `first` or after the item `last` (NOTE above)."""
    lo = next(k for k, item in enumerate(items) if item is first)
    hi = next(k for k, item in enumerate(items) if item is last)
    return [item for k, item in enumerate(items)
            if (k < lo or k > hi) and isinstance(item, Instr) and item.name in ("CALL", "CALL_KW")]


def _after_exhausted(items: list, target: Label) -> Label:
    """A new label where the code goes on after a FOR_ITER whose exhausted edge is `target` (after what CPython
    skips there: emit.skipped_by_exhausted_for_iter)."""
    skip = len(emit.skipped_by_exhausted_for_iter())
    if not skip:
        return target
    at = next(k for k, item in enumerate(items) if item is target)
    while skip:
        at += 1
        skip -= isinstance(items[at], Instr)
    label = Label()
    items.insert(at + 1, label)
    return label


def _unbound_goes_on(names: list[str], after_exit: Label) -> list:
    """For each of `names`: where the loop left it unbound, jump back to `after_exit` (NOTE [Locals a loop run as
    Python may leave unbound])."""
    from .local_liveness import Unbound
    out: list = []
    for name in names:
        bound = Label()
        out += emit.call_const(local_or_unbound, [Instr("LOAD_CONST", name)]) + [
            Instr("LOAD_CONST", Unbound), Instr("IS_OP", 1), *emit.conditional_jump("POP_JUMP_IF_TRUE", bound),
            Instr("JUMP_BACKWARD", after_exit), bound]
    return out


def _trampoline_call(hook: Any, after: tuple, live_locals: tuple[str, ...], cellvars: set[str],
                     cells: tuple[str, ...] = (), first: str | None = None, hidden: frozenset = frozenset()) -> list:
    """Store the stack `after` into temporaries and return hook(*stack, *live locals); the locals named
    in `cells` as their cells (NOTE [Cells passed to resume functions]); `first` (NOTE [The instance comes
    first]) before the stack, None when it is not live; those in `hidden`, which may be unbound, as
    `Unbound` then (NOTE [Unbound hidden from eager runs])."""
    temps = [f"___tramp{k}" for k in range(len(after))]
    out: list = [Instr("STORE_FAST", t) for t in reversed(temps)]
    args = []
    for temp, kind in zip(temps, after):
        if kind == "null":  # a NULL stored into its temporary (as CPython's own restores store one)
            continue
        args.append(Instr("LOAD_FAST", temp))  # an iterator too, unread (NOTE [Iterators passed unread])
    loads = {name: emit.load_closure(name) if name in cells else
             Instr("LOAD_DEREF", CellVar(name)) if name in cellvars else
             emit.call_const(local_or_unbound, [Instr("LOAD_CONST", name)]) if name in hidden else
             Instr("LOAD_FAST", name)
             for name in live_locals}
    lead = [loads.pop(first, Instr("LOAD_CONST", None))] if first else []
    rest = [i for load in loads.values() for i in (load if isinstance(load, list) else [load])]
    out += emit.null_before_callable() + [Instr("LOAD_CONST", hook)] + lead + args + rest
    count = sum(kind != "null" for kind in after)
    return out + emit.call(count + len(lead) + len(loads)) + [Instr("RETURN_VALUE")]


def _trampolines(items: list, position: int, successors: tuple, live_locals: tuple[str, ...],
                 cellvars: set[str], cells: tuple[str, ...] = (), first: str | None = None) -> list:
    """Redirect the edges out of the instruction at `items[position]` to trampolines (appended after
    every exception region: a resumed function's own exceptions must not reach this frame's handlers
    a second time) that call the successors' hooked resume functions."""
    depth = sum(1 if isinstance(i, TryBegin) else -1 if isinstance(i, TryEnd) else 0 for i in items)
    if depth:
        raise ValueError("the code ends inside an exception region: no place for trampolines")
    instr = items[position]
    out: list = []
    for edge, hook, after in successors:
        entry = Label()
        if edge == "jump":
            items[position] = emit.retargeted_forward(instr, entry)  # the trampoline lies ahead
        else:
            items.insert(position + 1, emit.jump_forward(entry))
            items[position + 1].lineno = instr.lineno
        out.append(entry)
        out += _trampoline_call(hook, after, live_locals, cellvars, cells, first)
    return out


# NOTE [Iterators passed unread]: a stack slot holding an iterator that no value models (a
# CarriedIteratorValue: a generator, a user class's iterator whose `__iter__` returns self, iter(callable,
# sentinel), a dict's or an OrderedDict's iterator passed in or made by Python at an earlier break) has kind
# "carried": a trampoline passes the object itself, never `list(it)`. Drained into a list at the first step
# of a loop whose body holds a tail function (a loop run as Python, a try block), every later `__next__` ran
# at once: items the body added to a work queue were never seen, the caller's iterator was exhausted after a
# `break`, an infinite stream hung, and a pending call argument reached the callee as a list ("'list' object
# is not an iterator", review revE HIGH-1/HIGH-2). The resume function's prologue applies GET_ITER to it as
# to an "iter" slot (the identity on an iterator; a carried list argument gets its iterator there).
# An "iter" slot (an iterator a value models) is passed unread by trampolines as well: made by the trace,
# it may still be the program's own object (`it = iter(d)` then a loop over `it` or `f(it, [... .item()
# ...])` on 3.12+): as `list(it)` the local was exhausted after a `break` (StopIteration at the next
# `next(it)`) and a callee got a list ("'list' object is not an iterator"; /tmp/hfixE/adv4.py).
ITERATOR_KINDS = ("iter", "carried")


def layout_key(layout: tuple[str, ...]) -> tuple[str, ...]:
    """A resume function's stack layout as its cache key: "carried" and "iter" slots have the same prologue
    (a loop's first step reads its iterator, later steps carry it unread: one resume function serves both)."""
    return tuple("iter" if kind == "carried" else kind for kind in layout)


# NOTE [Resume code has line numbers]: the instructions a resume function adds (prologue, trampolines)
# carry the line of the instruction it resumes at. Without one, a frame stopped there (a trampoline's
# call of the next resume function that raises) has line None, and formatting the user's traceback fails
# (measured: pytest's INTERNALERROR on 3.12; `linecache` compares None with an int).
def _line_of(items: list, position: int, code: types.CodeType) -> int:
    for item in reversed(items[: position + 1]):
        if isinstance(item, Instr) and isinstance(item.lineno, int) and item.lineno > 0:
            return item.lineno
    return code.co_firstlineno


def _set_line(instrs: list, line: int) -> None:
    for item in instrs:
        if isinstance(item, Instr):
            item.lineno = line


def _copy_handler_depths(code: types.CodeType, items: list) -> None:
    """Set each TryBegin's depth and lasti from the code's exception table (same order: by start)."""
    entries = sorted(dis.Bytecode(code).exception_entries, key=lambda e: (e.start, e.end))
    begins = [item for item in items if isinstance(item, TryBegin)]
    if len(entries) != len(begins):
        raise ValueError("exception table and TryBegin markers do not correspond")
    for begin, entry in zip(begins, entries):
        begin.stack_depth = entry.depth
        begin.push_lasti = entry.lasti


def _prologue_position(items: list) -> int:
    """Insert the prologue right after the first RESUME (after COPY_FREE_VARS/MAKE_CELL set-up)."""
    for i, item in enumerate(items):
        if isinstance(item, Instr) and item.name == "RESUME":
            return i + 1
    return 0

