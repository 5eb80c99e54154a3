"""Graph ops inside the traced code's own handlers, in graphs that cannot rerun eagerly.

NOTE [Failing graphs inside handlers]: the trace models the frame's try/except, try/finally and with-blocks
for the exceptions it sees while tracing; an exception the graph raises at run time (an index out of range,
a singular matrix) reaches the user's handler only through NOTE [Graph failures rerun eagerly], which reruns
the frame as plain Python. That rerun is refused for a graph that draws random numbers (dropout), writes an
input or enters inference mode (requests.rerun_state): its exception then left the transformed code past
the handler (eager: "caught"; framejit: IndexError), and a with-block's `__exit__` or a finally block did
not run. So one graph never holds both an op recorded under such a handler (in any frame of the trace) and
an op that makes the rerun inexact: whichever of the two comes second is a graph break before it. The graph
before the break then either reruns exactly or has no op under a handler; the instruction at the break runs
as plain Python (NOTE [Breaks inside try blocks]), where a real handler catches the real exception. With-
blocks of torch's own state managers (grad mode, autocast, device: context.ExitValue) never suppress an
exception and their state is put back as for any failing graph, so they do not count as handlers.
"""
from __future__ import annotations

from typing import Any

import torch

from .breaks import BreakKind, Unsupported


def _under_handler(tx) -> bool:
    """The instruction `tx` is at lies in a try block or a with-block whose exit is not a torch state block."""
    from .context import ExitValue
    from .normalize import is_user_handler
    inst = tx.current
    if inst is None:
        return False
    insts = tx.program.insts
    handler, depth = inst.handler, inst.handler_depth
    for _ in range(64):  # outward through the handlers around a with-block's own handler
        if handler is None:
            return False
        if is_user_handler(insts, handler):
            exit_fn = tx.stack[depth - 1] if depth is not None and 0 < depth <= len(tx.stack) else None
            if insts[handler + 1].name == "WITH_EXCEPT_START":
                if not isinstance(exit_fn, ExitValue) and not _never_suppresses(exit_fn):
                    return True
            elif _catches(insts, handler):
                return True
        handler, depth = insts[handler].handler, insts[handler].handler_depth
    return True


def _never_suppresses(exit_fn) -> bool:
    from .graph_break import _never_suppresses as never
    from .values import BoundMethodValue, UserFunctionValue
    return isinstance(exit_fn, BoundMethodValue) and isinstance(exit_fn.func, UserFunctionValue) and never(exit_fn)


def _catches(insts: list, handler: int) -> bool:
    """A try's handler that may stop the exception: an except clause, or a finally block that leaves the
    handler other than by re-raising (return, break, a jump out). The handler's code runs up to its cleanup
    block (the handler of PUSH_EXC_INFO itself); a plain finally block leaves it only by RERAISE."""
    cleanup = insts[handler].handler
    if insts[handler + 1].name == "POP_TOP" or cleanup is None or cleanup <= handler:
        return True  # a bare `except:` drops the exception at once
    for inst in insts[handler + 1:cleanup]:
        name = inst.name
        if name in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH", "POP_EXCEPT") or name.startswith(("RETURN", "YIELD", "SEND")):
            return True
        if ("JUMP" in name or name == "FOR_ITER") and not (isinstance(inst.arg, int) and handler < inst.arg < cleanup):
            return True
    return False


def under_handler(out) -> bool:
    """Some frame of the trace is at an instruction inside one of its own handlers' blocks."""
    return any(_under_handler(tx) for tx in out.tx_stack)


def _break(what: str) -> Unsupported:
    return Unsupported(BreakKind.SIDE_EFFECT, f"{what} in a graph that also has an op inside a try or with-block: "
                       "the graph could not rerun eagerly for the handler (NOTE [Failing graphs inside handlers])")


def check_call(out, kind: str, target: Any, args: tuple, kwargs: dict) -> None:
    """Before recording `target(*args, **kwargs)`: a break where it would make the graph hold both kinds of op."""
    from .requests import draws_random
    from .speculated_checks import _random
    under = under_handler(out)
    # by name first: reading the arguments as constants (a dropout's `training`) may specialise them
    random = draws_random(target) and _random(target, args, kwargs)
    inexact = random or out.mutated_inputs or out.__dict__.get("inexact_rerun", False)
    if inexact and (under or out.__dict__.get("op_in_handler", False)):
        raise _break(f"{getattr(target, '__name__', target)} (under a handler: {under}, draws random numbers: "
                     f"{random})")
    if under:
        out.op_in_handler = True
    if random:
        out.inexact_rerun = True


def check_input_write(out, target: Any) -> None:
    """An op (already counted by check_call) writes an input: a break if the graph has an op under a handler."""
    if out.__dict__.get("op_in_handler", False):
        raise _break(f"in-place {getattr(target, '__name__', target)} writes an input")


def check_effect(out, target: Any) -> None:
    """Entering inference mode makes a rerun inexact (requests.rerun_state)."""
    if target is torch.autograd.grad_mode._enter_inference_mode:
        if out.__dict__.get("op_in_handler", False):
            raise _break("entering inference mode")
        out.inexact_rerun = True
