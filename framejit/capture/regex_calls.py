"""Calls of a compiled pattern's `finditer`, and `sub`/`subn` with a function as the replacement, on constant
strings (issue 11).

NOTE [Regular expressions with Python callbacks]: NOTE [Regular expressions on constants] folds the pure
pattern methods when every argument is a constant. Two common forms were still a break per call:
- `pattern.finditer(s)` (and `re.finditer`, inlined down to it): its result is a stateful iterator, so it is
  not folded (one shared object would be drained by the first call). With a constant pattern and string, the
  matches are facts of the constants: the call is a fresh iterator of the trace over the Match objects the
  real call yields now (immutable constants), answering `type()` as `callable_iterator` and rebuilt as one
  over what it has left when it outlives the graph (codegen_runtime.callable_iterator_of). A loop over it
  unrolls; each compiled call starts again from the first match, as each eager call does.
- `pattern.sub(fn, s)` / `subn` with a Python function (a lambda of the trace, a function from outside) as
  the replacement: the real call with a recording callback finds the matches sub uses (its own rules for
  empty matches and `count`); the callback `fn(match)` is then traced once per match, in order, and the
  pieces joined as CPython's `pattern_subx` does (a None result adds nothing; the join raises CPython's
  TypeError for a result of another type). A result that is not a constant (made from tensor data) is a
  graph break.
The pattern is a constant already (a literal, or a compiled pattern from outside pinned by identity); a
string or count that is not a constant, or re.DEBUG, leaves the call as it was (a break).
"""
from __future__ import annotations

import re
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, IteratorValue, TupleValue, Value

CALLABLE_ITERATOR = type(iter(lambda: None, None))


def regex_call(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`fn(*args, **kwargs)` for `fn` a bound method of a compiled pattern, or None when not handled here."""
    pattern = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", None)
    if not isinstance(pattern, re.Pattern) or pattern.flags & re.DEBUG or name not in ("finditer", "sub", "subn"):
        return None
    if name == "finditer":
        if not all(a.is_constant() for a in (*args, *kwargs.values())):
            return None
        from .changing_strings import changes_often  # NOTE [Regular expressions over strings that change often]
        if any(changes_often(a) for a in (*args, *kwargs.values())):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "finditer over a string that changes between calls: it "
                              "runs as Python (the matches are carried into the loop)")
        matches = _real(fn, [a.as_constant() for a in args], {k: v.as_constant() for k, v in kwargs.items()})
        iterator = IteratorValue([ConstantValue(m) for m in matches])
        iterator.iter_type = CALLABLE_ITERATOR
        return iterator
    rest = [*args[1:], *kwargs.values()]
    if not args or args[0].is_constant() or not all(a.is_constant() for a in rest):
        return None
    return _sub_traced(tx, fn, args[0], [a.as_constant() for a in args[1:]],
                       {k: v.as_constant() for k, v in kwargs.items()}, with_count=name == "subn")


def _real(fn, args: list, kwargs: dict):
    try:
        result = fn(*args, **kwargs)
        return list(result) if fn.__name__ == "finditer" else result
    except Exception as e:  # noqa: BLE001 - the call's own error (a bad argument), as eager raises it
        raise UserException(e) from None


def _sub_traced(tx, fn, repl: Value, args: list, kwargs: dict, with_count: bool) -> Value:
    matches: list[re.Match] = []
    string = args[0] if args else kwargs.get("string")

    def record(match):
        matches.append(match)
        return match.string[:0]  # "" or b"": what the pattern's kind of string joins

    _real(fn, [record, *args], kwargs)
    if not isinstance(string, (str, bytes)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"re {fn.__name__} over a {type(string).__name__}")
    pieces, position = [], 0
    for match in matches:
        if position < match.start():
            pieces.append(string[position:match.start()])
        item = tx.call(repl, [ConstantValue(match)], {})
        if not item.is_constant():
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"re {fn.__name__} whose replacement function returned "
                                                          f"{item.describe()}")
        if item.as_constant() is not None:
            pieces.append(item.as_constant())
        position = match.end()
    if position < len(string):
        pieces.append(string[position:])
    try:
        joined = string[:0].join(pieces)
    except TypeError as e:
        raise UserException(e) from None
    return TupleValue([ConstantValue(joined), ConstantValue(len(matches))]) if with_count else ConstantValue(joined)


def module_regex_call(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`re.sub(pattern, repl, string, count=0, flags=0)`, `re.subn(...)`, `re.finditer(pattern, string,
    flags=0)`: with a constant pattern and flags, the pattern is compiled now (what re's cache gives the eager
    call) and the call is the pattern's method; anything else is inlined as before (None). re.sub/subn come
    here only with a non-constant argument (all constants fold: NOTE [Regular expressions on constants])."""
    import inspect
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None  # inlined: eager's own TypeError
    values = dict(bound.arguments)
    pattern, flags = values.pop("pattern"), values.pop("flags", ConstantValue(0))
    if not (pattern.is_constant() and flags.is_constant()) or \
            not isinstance(pattern.as_constant(), (str, bytes, re.Pattern)):
        return None
    if int(flags.as_constant()) & re.DEBUG:
        return None
    try:
        compiled = re.compile(pattern.as_constant(), flags.as_constant())
    except Exception as e:  # noqa: BLE001 - a bad pattern or flags: eager's re.error / ValueError
        raise UserException(e) from None
    method = getattr(compiled, fn.__name__)
    return regex_call(tx, method, list(values.values()), {})

