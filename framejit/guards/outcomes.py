"""Explaining a miss without running user code the guard function did not run.

NOTE [Explanations run each check once]: a miss is explained by evaluating guards one by one
(GuardFunction.first_failure, all_failures). A failing check was evaluated again to find its failing part,
again for its actual value (`___len(l)`, `v`) and once more to see whether it raised: up to four
evaluations of a check that may call the user's code (a `list` subclass's `__len__`, an `__eq__`, an
lru_cache wrapper whose hit counter eager's program reads: hunt hhuntG2 MED-1, LOW-2). Each check is now
evaluated once: a combined guard part by part (its expression is the conjunction of its parts, so the
same reads in the same order), and when the actual value is the leftmost operand of the check's
comparison (`___len(l) == 2`, `(___len(l) > 0) is True`, `v == 3`), that operand is evaluated first (as
the comparison evaluates it first) and the rest of the check is evaluated on its value.
"""
from __future__ import annotations

import ast
import functools
from typing import Any

from .guard import Guard

ACTUAL = "___actual"  # the name the rest of a split check reads its leftmost operand from
NONE = object()


@functools.lru_cache(maxsize=8192)
def compiled(expr: str) -> Any:
    """NOTE [Compiled guard expressions] in codegen.py."""
    return compile(expr.lstrip(" \t"), "<string>", "eval")


@functools.lru_cache(maxsize=8192)
def split(expr: str, actual: str | None) -> Any:
    """The code of `expr` with its leftmost comparison operand `actual` read from ACTUAL, or None when
    `actual` is not that operand."""
    if actual is None:
        return None
    try:
        tree, want = ast.parse(expr.strip(), mode="eval"), ast.dump(ast.parse(actual.strip(), mode="eval").body)
    except SyntaxError:
        return None
    node = tree.body
    while type(node) is ast.Compare:  # `A op B` evaluates A first, before anything else of the check
        if ast.dump(node.left) == want:
            node.left = ast.Name(ACTUAL, ast.Load())
            return compile(ast.fix_missing_locations(tree), "<string>", "eval")
        node = node.left
    return None


def _reraise(e: Exception) -> None:
    from .codegen import _reraise_from_signal_handler
    _reraise_from_signal_handler(e)


class Outcome:
    """One evaluation of a check: whether it held, its actual value (NONE: not known) or exception
    (`in_actual`: raised while computing the actual value itself)."""
    __slots__ = ("held", "actual", "error", "in_actual")

    def __init__(self, held: bool, actual: Any = NONE, error: Exception | None = None, in_actual: bool = False):
        self.held, self.actual, self.error, self.in_actual = held, actual, error, in_actual


def evaluate(guard: Guard, namespace: dict, frame_locals: dict) -> Outcome:
    """Evaluate `guard`'s own expression once (not its parts)."""
    local = dict(frame_locals)
    code = split(guard.expr, guard.actual)
    actual = NONE
    try:
        if code is not None:
            actual = eval(compiled(guard.actual), namespace, local)
            local[ACTUAL] = actual
            return Outcome(bool(eval(code, namespace, local)), actual)
        value = eval(compiled(guard.expr), namespace, local)
        return Outcome(bool(value), value if guard.actual == guard.expr else NONE)
    except Exception as e:
        _reraise(e)
        return Outcome(False, actual, e, in_actual=code is not None and actual is NONE or guard.actual == guard.expr)


def check(guard: Guard, namespace: dict, frame_locals: dict) -> tuple[Guard, Outcome]:
    """(the failing part, or the guard, and its outcome): a combined guard is evaluated part by part."""
    for part in guard.parts:
        outcome = evaluate(part, namespace, frame_locals)
        if not outcome.held:
            return part, outcome
    if guard.parts:
        return guard, Outcome(True)
    return guard, evaluate(guard, namespace, frame_locals)


def described(guard: Guard, outcome: Outcome, namespace: dict, frame_locals: dict) -> str:
    """The actual value of a failed check, and what it raised (NOTE [Short values in recompile logs])."""
    from .codegen import short_repr
    if guard.actual is None:
        text = "a different value"
    elif outcome.actual is not NONE:
        text = short_repr(outcome.actual)
    elif outcome.in_actual:  # computing the value raised: the check raised that
        text = f"<{type(outcome.error).__name__}: {outcome.error}>"
    else:  # a value the check did not compute itself: read it (as before)
        try:
            text = short_repr(eval(compiled(guard.actual), namespace, dict(frame_locals)))
        except Exception as e:
            _reraise(e)
            text = f"<{type(e).__name__}: {e}>"
    if outcome.error is not None:  # a raising check counts as a miss: say why
        text += f" (the check raised {type(outcome.error).__name__}: {str(outcome.error)[:120]})"
    return text


# NOTE [No user code past a failed pin]: explaining a miss goes on past the first failing guard
# (all_failures), and it skipped only the guards reading an attribute or item THROUGH an object whose pin
# (`___type(P) is K`, `P is obj`) failed. A guard passing that object to a call or comparing it was still
# evaluated: with `l` now a `list` subclass, `___len(l) == 2` ran its `__len__`; with `v` now an object of
# the user's class, `v == 3` ran its `__eq__`: calls the guard function never made (it stops at the failed
# pin), on every miss (hunt hhuntG2 MED-1). Such a guard is now skipped too, unless the object's type now is
# one whose operations run no user code: a builtin scalar (`v` went from 3 to 2.5: `v == 3` says so), or a
# builtin container whose length is all the guard reads (`___len(t) == 2` of a list that became a tuple;
# comparing containers compares their items, which may be anything). The type is the one the failed
# `___type(P)` check computed (NOTE [Explanations run each check once]), not read again.
_SCALARS = frozenset({int, float, complex, bool, str, bytes, type(None)})
_CONTAINERS = frozenset({tuple, list, dict, set, frozenset})


def type_now(failed: Guard, outcome: Outcome) -> type | None:
    """The type of the object of a failed pin, as the pin's own evaluation found it (None: not known)."""
    if outcome.actual is NONE:
        return None
    if failed.expr.startswith("___type(") and failed.actual is not None and failed.actual.startswith("___type("):
        return outcome.actual if isinstance(outcome.actual, type) else None
    return type(outcome.actual)


def mentions_safe(expr: str, unsafe: dict[str, type | None]) -> bool:
    """Whether `expr` reads no object in `unsafe` except in ways that run no user code for its type now."""
    anywhere, only_length = _mentions(expr)
    for name in anywhere & unsafe.keys():
        kind = unsafe[name]
        if kind not in _SCALARS and not (kind in _CONTAINERS and name in only_length):
            return False
    return True


@functools.lru_cache(maxsize=8192)
def _mentions(expr: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every rooted chain `expr` reads, those it reads only as the argument of `___len`)."""
    from .codegen import _chain_text
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return frozenset(), frozenset()
    texts: dict[int, str | None] = {}
    chains: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        text = _chain_text(node, texts)
        if text is not None:
            chains.setdefault(text, []).append(node)
    length_args = {id(n.args[0]) for n in ast.walk(tree) if type(n) is ast.Call and type(n.func) is ast.Name
                   and n.func.id == "___len" and len(n.args) == 1 and not n.keywords}
    only = frozenset(t for t, nodes in chains.items() if all(id(n) in length_args for n in nodes))
    return frozenset(chains), only


# NOTE [Cached calls explained without calling them]: a CACHED_CALL line calls the user's lru_cache wrapper
# (counting a hit, or running the function after a cache_clear). The check function made that call; each
# explanation of the miss made it again (all_failures, first_failure for automatic dynamic and for the log):
# after `helper.cache_clear()` eager counted hits=0, framejit hits=9 (hunt hhuntG2 LOW-2). The check function
# now records the index of the last cached line it reached (`___reach(___reached, k) or CHECK`, a call only
# on cached lines, which call a function anyway); as they come last (NOTE [Cached calls checked last] in
# capture/cached_calls.py), a line before it held and that line failed (or raised). A miss's explanations
# (miss_failure, miss_failures) read that record instead of calling again; first_failure and all_failures
# (the reference evaluator) still evaluate.
NOT_RECORDED = (None,)


def reach(record: list, index: int) -> bool:
    record[0] = index
    return False
