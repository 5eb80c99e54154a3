"""Checks that raise on tensor data, speculated to pass: `if not torch._is_all_true(valid): raise ValueError(...)`.

NOTE [Speculated checks]: argument and sample validation (torch.distributions with `validate_args`, on by
default in eager; many libraries' `if (x < 0).any(): raise`) branches on one tensor element, and one side of
the branch only raises. Breaking there cut every distribution's constructor and `log_prob` into pieces (a
Normal + Categorical + Independent log-likelihood: 11 graphs where torch.compile, which turns validation
off, makes 3). Instead the trace assumes the side that does not raise and records `torch._assert_async(c)`
(`c` the condition, or its negation) in the graph, which raises when the assumption is wrong. The graph then
raises at run time, and NOTE [Graph failures rerun eagerly] reruns the whole call eagerly, where the frame's
own code raises (or handles) the real exception with its message. That rerun is only exact when the graph
has not drawn random numbers or written an input; so a check is speculated only in a graph without such
ops so far, and once one is, the first random op or input write after it is a graph break instead (the
graph before it still holds the checks).

Only a one-element tensor whose branch has exactly one side reaching `RAISE_VARARGS` straight away (no jump,
return, store outside the frame or loop first) is speculated; anything else stays a data-dependent break.
"""
from __future__ import annotations

from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .values import TensorValue

_LOOKAHEAD = 60
_ENDS = ("JUMP", "POP_JUMP", "RETURN", "FOR_ITER", "YIELD", "SEND", "STORE_GLOBAL", "STORE_ATTR", "STORE_SUBSCR",
         "DELETE", "JUMP_IF")


def _raises_straight_away(insts: list, start: int) -> bool:
    for inst in insts[start:start + _LOOKAHEAD]:
        name = getattr(inst, "name", "")
        if name == "RAISE_VARARGS":
            return True
        if name.startswith(_ENDS):
            return False
    return False


def _plain(v: Any) -> Any:
    from .values import Value
    return v.as_constant() if isinstance(v, Value) and v.is_constant() else v


def _random(target: Any, args: tuple = (), kwargs: dict | None = None) -> bool:
    """As NOTE [Graph failures rerun eagerly] judges it (requests.draws_random): the two must agree."""
    from .requests import draws_random
    return draws_random(target, tuple(_plain(a) for a in args), {k: _plain(v) for k, v in (kwargs or {}).items()})


def rerun_would_be_exact(out) -> bool:
    """No op of the graph so far draws random numbers or writes an input (NOTE [Speculated checks])."""
    if out.mutated_inputs:
        return False
    return not any(node.op in ("call_function", "call_method") and _random(node.target, node.args, node.kwargs)
                   for node in out.graph.nodes)


def user_check(out, args: tuple, kwargs: dict) -> Any:
    """The user's own `torch._assert_async(c[, msg])`: kept in the graph as a speculated check is (before,
    the call returns None, so the trace dropped it and a failing check passed silently); a graph break where a
    rerun after it fails would not be exact (NOTE [Speculated checks])."""
    from .values import ConstantValue
    cond = args[0] if args else None
    rest = [_plain(v) for v in [*args[1:], *kwargs.values()]]
    if not isinstance(cond, TensorValue) or not all(isinstance(v, str) for v in rest) or not rerun_would_be_exact(out):
        raise Unsupported(BreakKind.DATA_DEPENDENT, "torch._assert_async where the graph could not be rerun "
                          "exactly after it fails (NOTE [Speculated checks])")
    out.record_effect(torch._assert_async, (cond.node, *rest))
    out.speculated_checks = getattr(out, "speculated_checks", 0) + 1
    return ConstantValue(None)


def check_after_speculation(out, kind: str, target: Any, args: tuple, kwargs: dict) -> None:
    """A random op after a speculated check would make the rerun inexact: a graph break before it."""
    if getattr(out, "speculated_checks", 0) and _random(target, args, kwargs):
        raise Unsupported(BreakKind.DATA_DEPENDENT, f"{getattr(target, '__name__', target)} draws random numbers "
                          "after a speculated check (NOTE [Speculated checks])")


def assumed_truth(tx, value: Any, target: int, jumps_if: bool) -> bool | None:
    """The truth of `value` to assume at a conditional jump to `target` taken when the truth is `jumps_if`,
    with the check recorded in the graph; None when the branch is not such a check."""
    if not isinstance(value, TensorValue) or value.known_data() is not None:
        return None
    numel = value.fake.numel()
    if isinstance(numel, torch.SymInt) or numel != 1:
        return None
    insts = tx.program.insts
    target_raises, next_raises = _raises_straight_away(insts, target), _raises_straight_away(insts, tx.pc)
    if target_raises == next_raises or not rerun_would_be_exact(tx.output):
        return None
    assume = not jumps_if if target_raises else jumps_if  # the truth that leads to the side that does not raise
    cond = value if assume else tx.output.call("call_function", torch.logical_not, (value,), {})
    tx.output.record_effect(torch._assert_async, (cond.node,))
    tx.output.speculated_checks = getattr(tx.output, "speculated_checks", 0) + 1
    return assume
