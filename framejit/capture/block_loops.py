"""Loops and comprehensions run as Python where they end torch state with-blocks: where the tail function's
trampoline goes (after the blocks' normal exits), and which locals the straight-line code up to there binds.

Split from python_loops.py (which re-exports what other modules use); see NOTE [Loops run as Python at the end of
a with-block], NOTE [Locals bound after a loop inside its with-block] and NOTE [Comprehensions ending a with-block].
The instructions here are canonical ones (normalize.py) of the frame's code; a "loop" is a FOR_ITER, or the CALL
that runs a comprehension or a generator expression's consumer (NOTE [Comprehensions over symbolic ranges]).
"""
from __future__ import annotations

from typing import Any



def natural_exit(loop: Any) -> int:
    """Where a loop run as Python leaves when it ends no with-block: after the call, or the exhausted edge."""
    return loop.index + 1 if loop.name == "CALL" else loop.arg


_READS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_DEREF", "LOAD_CLOSURE", "DELETE_FAST",
          "DELETE_DEREF")
_WRITES = ("STORE_FAST", "STORE_DEREF", "DELETE_FAST", "DELETE_DEREF")


# NOTE [Comprehensions ending a with-block]: `with torch.no_grad(): r = [f(x[i]) for i in range(x.size(0))]` (3.11's
# `<listcomp>` call) or `s = sum(x[i] for i in range(x.size(0)))` (every version: a generator expression's consumer)
# unrolled the range under the block: one trace per size, then the recompile limit (stock: the same). As a loop
# ending torch state blocks (NOTE [Loops run as Python at the end of a with-block]), the call runs as Python when
# straight-line code leads from it to the blocks' normal exits (`r = ...`: STORE_FAST, then the exit), the blocks
# are torch state blocks right under the comprehension's function (or the consumer), and no local first bound in
# that code is read after the blocks unless it is bound there on every path (NOTE [Locals bound after a loop
# inside its with-block]): the tail function makes the call, runs that code and the exits, and trampolines after
# the last exit with the stack below the blocks. A result stored right after the call is a changing result in
# the resume function there (NOTE [Comprehension results of changing length] in carried_loops.py).
def ends_torch_blocks(tx, inst: Any, call: Any, above: int) -> bool:
    """No handler covers the GET_ITER `inst` or the `call` that runs a comprehension, or only torch state blocks
    it ends (NOTE above); `above`: the stack slots over the blocks' `__exit__`s at the GET_ITER."""
    from .context import ExitValue
    from .normalize import normalize
    if inst.handler is None and call.handler is None:
        return True
    insts = normalize(tx.code).insts
    from .python_loops import body_binds_locals_read_after
    if inst.handler != call.handler or with_exit(insts, call) is None or \
            body_binds_locals_read_after(tx.code, call, tx.locals):
        return False
    depth = with_depth_exited(insts, call)
    return depth > 0 and len(tx.stack) >= above + depth and \
        all(isinstance(v, ExitValue) for v in tx.stack[-above - depth:-above])


def stored_result(insts: list, call: Any) -> str | None:
    """The local a comprehension's result is stored into right after its `call` (NOTE [Comprehensions ending a
    with-block]), or None."""
    after = insts[call.index + 1] if call.index + 1 < len(insts) else None
    return str(after.arg) if after is not None and after.name == "STORE_FAST" else None


# NOTE [Loops run as Python at the end of a with-block]: `with torch.no_grad(): for i in range(x.size(0)): ...`
# unrolled (a loop inside a with block did not run as Python: the trampoline at its exit would return from
# inside the block without exiting it), so the frame compiled per size until the recompile limit (stock: the
# same). When the loop's exhausted edge reaches the block's normal exit `LOAD_CONST None x3; CALL 2; POP_TOP`
# through straight-line code only (no jump, no return, no other block: `out = out * 2` after the loop inside the
# block), and from there the exits of the blocks around it in the same way (`with no_grad(): ... with
# enable_grad(): for ...`: the JUMP after an inner exit leads to the outer one), over torch state blocks only (the
# break re-enters them in the tail function's prologue, NOTE [Breaks inside with-blocks]), it runs as Python: the
# tail function runs the loop, the code after it (its calls routed like the body's: `hook_calls_after_loop`) and
# the blocks' exits, and the trampoline comes after the last exit, with the stack below the blocks. A local that
# code stores is one the body binds (NOTE [Locals first bound in a loop run as Python]:
# `body_binds_locals_read_after` covers everything up to that exit).
_WITH_EXIT = ["LOAD_CONST"] * 3 + ["CALL", "POP_TOP"]


def with_exit(insts: list, loop: Any) -> int | None:
    """The index after the normal exit of the outermost with-block around `loop` (a FOR_ITER), when straight-line
    code leads there from the loop's exhausted edge (NOTE above), or None."""
    found = _with_exit_path(insts, loop)
    return None if found is None else found[0]


def _with_exit_path(insts: list, loop: Any) -> tuple[int, list] | None:
    """(with_exit's index, the instructions of the straight-line code run from the loop's exit up to there)."""
    depth, k, handler = blocks_to_exit(insts, loop), natural_exit(loop), loop.handler
    path: list = []
    for level in range(depth or 0):
        while k < len(insts) and [i.name for i in insts[k:k + 5]] != _WITH_EXIT:
            inst = insts[k]
            arm_end = _raising_arm(insts, k, handler)  # NOTE [Raising arms before a with-block's exit]
            if arm_end is not None:
                path.append(inst)
                k = arm_end
                continue
            if inst.handler != handler or inst.name in _NOT_STRAIGHT or inst.instr is None or inst.instr.has_jump():
                return None
            path.append(inst)
            k += 1
        exit_seq, outer = insts[k:k + 5], insts[handler + 1].handler  # the block's cleanup: the next region
        outer = insts[outer].handler if outer is not None else None
        if len(exit_seq) < 5 or any(i.arg is not None for i in exit_seq[:3]) or exit_seq[3].arg != 2 or \
                any(i.handler != outer for i in exit_seq):
            return None
        k, handler = k + 5, outer
        if level + 1 < depth and k < len(insts) and insts[k].name == "JUMP":  # over this block's handler (3.11)
            if not isinstance(insts[k].arg, int) or insts[k].arg <= k:
                return None
            k = insts[k].arg
    return (k, path) if depth else None


# NOTE [Raising arms before a with-block's exit]: `if x.size(0) == 5: raise KeyError("five")` between the loop and
# the block's exit (review revB L2, d2.py w_nested_escape) is a conditional jump over code that only raises: the
# path to the exit is still straight on every path that reaches it, so the loop runs as Python there too. The
# raise happens in the tail function, inside the block, whose own handler exits the block (grad mode restored)
# and re-raises, as eager. What the arm stores is not on the path (it never reaches the exit).
_CONDITIONAL_JUMPS = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"})


def _raising_arm(insts: list, k: int, handler: Any) -> int | None:
    """When insts[k] is a forward conditional jump over straight-line code under `handler` that ends in a raise,
    the jump's target (NOTE above), else None."""
    inst = insts[k]
    if inst.name not in _CONDITIONAL_JUMPS or inst.handler != handler or not isinstance(inst.arg, int) or \
            isinstance(inst.arg, bool) or inst.arg <= k + 1 or inst.arg > len(insts):
        return None
    arm = insts[k + 1:inst.arg]
    if arm[-1].name != "RAISE_VARARGS" or arm[-1].handler != handler:
        return None
    for i in arm[:-1]:
        if i.handler != handler or i.name in _NOT_STRAIGHT or i.instr is None or i.instr.has_jump():
            return None
    return inst.arg


# NOTE [Locals bound after a loop inside its with-block]: `with torch.no_grad(): for i in range(x.size(0)): ...;
# y = out * 2` then `return y`: `y` is first bound after the loop, so it was one the body binds and read after it
# (NOTE [Locals first bound in a loop run as Python]) and the loop unrolled per size (review revB L2, hdyn6's open
# item 2). The straight-line code between the loop's exit and the blocks' exits runs on every path to the
# trampoline, so a fast local it stores (the code deleting it nowhere, and reading it nowhere from the loop's
# GET_ITER up to that store) is bound there: it is not counted. The tail function takes it (`Unbound` at the
# break, deleted by its prologue: NOTE [Unbound hidden from eager runs]), that code binds it, and the trampoline
# passes it on to the resume function after the blocks (GraphBreak._tail_names). (Liveness alone keeps such a
# local live at the loop: a block's handler could suppress an exception and skip the store; a torch state
# block, the only kind taken here, never does.)
def bound_after_loop(insts: list, loop: Any) -> frozenset[str]:
    """The fast locals (their safe names) that the straight-line code after `loop` inside its with-blocks stores,
    last written by a store there, and that the code deletes nowhere and does not read before (NOTE above)."""
    from .sources import safe_local
    found = _with_exit_path(insts, loop) if loop.name in ("FOR_ITER", "CALL") and loop.handler is not None else None
    if found is None:
        return frozenset()
    last: dict[str, str] = {}
    first_store: dict[str, int] = {}
    for inst in found[1]:
        if inst.name in _WRITES:
            last[str(inst.arg)] = inst.name
            if inst.name == "STORE_FAST":
                first_store.setdefault(str(inst.arg), inst.index)
    gone = {str(i.arg) for i in insts if i.name in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR")}
    read_before = {str(i.arg) for i in insts if i.name in _READS and str(i.arg) in first_store and
                   loop.index - 1 <= i.index < first_store[str(i.arg)]}
    return frozenset(safe_local(n) for n, how in last.items() if how == "STORE_FAST" and n not in gone and
                     n not in read_before)


_NOT_STRAIGHT = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "YIELD_VALUE", "GET_ITER",
                           "FOR_ITER", "BEFORE_WITH", "SETUP_WITH", "PUSH_EXC_INFO", "SEND", "GET_AWAITABLE"})


def with_depth_exited(insts: list, loop: Any) -> int:
    """How many with-blocks a loop run as Python at their end exits (NOTE above): 0 for a plain loop."""
    return (blocks_to_exit(insts, loop) or 0) if loop.name in ("FOR_ITER", "CALL") and loop.handler is not None \
        else 0


# NOTE [With-blocks inside a try body]: `try: with torch.no_grad(): for i in range(x.size(0)): ...` then
# `except KeyError: ...` unrolled per size (with_depth refuses any try: hdyn7's open item 1, /tmp/hdyn8/t1.py;
# stock: the same, 8 traces and the recompile limit). The with-blocks right around the loop, up to the body of
# a try (try/except or try/finally) around them, are the blocks it ends: the trampoline comes after their exits,
# still inside the try body, and the resume function there holds its own copy of the try's handlers (as at a
# break inside a try block: NOTE [Breaks inside try blocks]), so an exception of the code after the blocks is
# handled there once. An exception of the loop, its body or the code up to the exits is handled by the tail
# function's copy of the frame's handlers: its except (or finally) body and the rest of the frame run there as
# plain Python, uncaptured, as any code after an exception in a tail function. Refused (None, unrolled as
# before): a with-block further out than the try (its `__exit__` would stay on the stack under the trampoline),
# a handler of another shape (an except or finally body's cleanup: the exception is on the stack).
def blocks_to_exit(insts: list, loop: Any) -> int | None:
    """with_depth of `loop`, except that the handlers may end in try bodies with no with-block around them:
    then the with-blocks inside the innermost one (NOTE above)."""
    handler, depth, in_try = loop.handler, 0, False
    while handler is not None:
        names = [i.name for i in insts[handler:handler + 2]]
        with_block = names == ["PUSH_EXC_INFO", "WITH_EXCEPT_START"]
        if names[:1] != ["PUSH_EXC_INFO"] or with_block and in_try:
            return None
        cleanup = insts[handler + 1 if with_block else handler].handler
        if cleanup is None or [i.name for i in insts[cleanup:cleanup + 3]] != ["COPY", "POP_EXCEPT", "RERAISE"]:
            return None
        handler, depth, in_try = insts[cleanup].handler, depth + with_block, in_try or not with_block
    return depth


def loop_handlers_allowed(tx, insts: list, inst: Any, loop: Any) -> bool:
    """No handler covers the loop, or only with-blocks it ends, over torch state blocks (NOTE above)."""
    from .context import ExitValue
    if inst.handler is None and loop.handler is None:
        return True
    # NOTE [Loops run as Python at the end of a with-block]: only a torch state block (its `__exit__` an
    # ExitValue under the range) is re-entered by the tail function; any other manager (a contextlib or
    # user class, sdpa_kernel) is refused here, when the loop is chosen, so the range unrolls as before
    # instead of the break failing in code generation and the frame running eagerly.
    depth = with_depth_exited(insts, loop)  # each block's `__exit__` is a slot: those right under the range
    return inst.handler == loop.handler and with_exit(insts, loop) is not None and len(tx.stack) > depth and \
        all(isinstance(v, ExitValue) for v in tx.stack[-1 - depth:-1])


# NOTE [Locals a loop run as Python may leave unbound]: `for k in d: ...` over a dict of changing size, then
# `return out, k` (or `del k`, or the loop variable of a range read after the loop) stepped or unrolled per size
# (a local first bound in the body and read after it: NOTE [Locals first bound in a loop run as Python]; hdyn6's
# f6.py y_read_after_*, revB's y_del_after: 16-32 traces and the recompile limit). Such a fast local (stored in
# the body only by STORE_FAST, deleted nowhere in it, a cell nowhere, not surely bound where the loop starts)
# is now one the tail function takes (`Unbound` at the break, deleted by its prologue) and passes on: at the
# loop's exit its trampoline checks it, and calls the resume function after the loop with it where the loop
# bound it; where it did not (no step ran), the tail function goes on in its own copy of the frame's code after
# the loop as plain Python (uncaptured, as eager: reading the local raises UnboundLocalError there). Only a local
# live where control leaves the loop (a dead one passed on would be guarded by value for nothing). Not for
# comprehensions (theirs are their own frame's or restored by their epilogue) or a code whose locals a frame
# reader lists (local_liveness has no facts for it).
def unbound_after_loop(code: Any, loop: Any) -> frozenset[str]:
    """The fast locals (their safe names) that a loop run as Python at `loop` (a canonical FOR_ITER of `code`)
    may leave unbound and the code after it reads (NOTE above)."""
    from . import inlined_comprehensions, local_liveness
    from .normalize import normalize
    from .python_loops import loop_exit
    from .sources import safe_local
    facts = local_liveness._facts(code)
    if loop.name != "FOR_ITER" or facts is None or inlined_comprehensions.at_loop(code, loop.index) is not None:
        return frozenset()
    insts = normalize(code).insts
    end = loop_exit(loop, insts)
    inside = insts[loop.index + 1:end]
    stored = {str(i.arg) for i in inside if i.name == "STORE_FAST"}
    stored -= {str(i.arg) for i in inside if i.name in _WRITES and i.name != "STORE_FAST"}
    stored -= set(code.co_cellvars) | set(code.co_freevars) | set(facts[2][loop.index])
    live = local_liveness.live_after(code, loop.index, end) or frozenset()  # passed on only where read after
    return frozenset(safe_local(n) for n in stored & live)
