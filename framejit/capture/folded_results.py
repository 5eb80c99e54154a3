"""Calls evaluated at trace time (constant folding) whose results or arguments are mutable containers.

A folded call runs on real Python objects: `as_constant()` of a list, dict or set value is a new copy, and
the result becomes part of the trace. Two things must hold for the compiled code to act as eager does:
the result must not be one object shared by every call (NOTE [Mutable results of folded calls]), and the
call must not have changed, or handed back a part of, a copy the program never sees (NOTE [Folded calls
on containers]). Containers that keep their identity in the trace are also kept by position, not
copied, when a method reorders them (`permuted_like`).
"""
from __future__ import annotations

import collections
import operator
from typing import Any, Callable

from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, DictValue, ListValue, SequenceValue, SetValue, TupleValue, Value

# NOTE [Mutable results of folded calls]: a call folded at trace time (`s.split(",")`, `str.maketrans(...)`,
# `divmod`, a set method) may return a new list, dict or set. As a ConstantValue it was one object, loaded by
# every call of the compiled code (LOAD_CONST) and mutated in place by the trace itself:
# `l = s.split(","); l.append("z"); return l` returned ['a', 'b', 'z', 'z'] on the first call (the trace's
# append, then the replayed one) and kept growing, and a caller that changed a returned list changed what
# the next call returned. A fresh list or dict is a container value of constants, like one the frame builds
# (its nested lists and dicts too, and a tuple holding any); a fresh set is an exact SetValue (the same
# CPython operations on the same elements lay it out as the program's, NOTE [Set order]). Mutable results
# the values cannot model (a bytearray, a dict keyed or a set holding other than plain constants, a deque
# or other container subclass) are a graph break: the call runs as Python.
_KEY_TYPES = (str, int, bool, float, complex, bytes, type(None))
_MUTABLE = (list, dict, set, bytearray, collections.deque)


def _plain_key(key: Any) -> bool:
    if type(key) in (tuple, frozenset):
        return all(_plain_key(k) for k in key)
    return type(key) in _KEY_TYPES


def folded_value(result: Any) -> Value:
    """The value of `result`, a new object a folded call returned."""
    kind = type(result)
    if kind is list:
        return ListValue([folded_value(v) for v in result])
    if kind is tuple:
        items = [folded_value(v) for v in result]
        if any(not isinstance(v, ConstantValue) for v in items):
            return TupleValue(items)
        return ConstantValue(result)
    if kind is dict and all(_plain_key(k) for k in result):
        return DictValue({k: folded_value(v) for k, v in result.items()})
    if kind is set and all(_plain_key(k) for k in result):
        return SetValue(result, cls=set, exact=True)
    if isinstance(result, _MUTABLE):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a call folded at trace time returned a new mutable "
                                                      f"{kind.__name__} the trace cannot model")
    return ConstantValue(result)


# NOTE [Folded calls on containers]: a pure library function (calls._is_pure: math, operator, methods of
# str/tuple/...) folded on constant values gets copies of the list, dict and set values among its arguments.
# A call that changes one of them, or returns (a part of) one, would change or hand back an object the
# program never sees: the change was lost (`operator.setitem(d, "a", 1)` left `d` empty in the compiled code)
# or the returned list was detached from the one the program holds. Such a call is a graph break (it runs
# as Python on the real objects), found by comparing the copies after the call with fresh ones and by
# identity of the result's parts; the operator functions that are statements (`operator.setitem`,
# `delitem`, `is_`, `is_not`) are traced as their statements instead (builtins.py).
def _containers(values: list[Value]) -> list[Value]:
    return [v for v in values if isinstance(v, (SequenceValue, DictValue, SetValue)) and not isinstance(v, TupleValue)
            or isinstance(v, TupleValue) and not all(isinstance(i, ConstantValue) for i in v.items)]


def _parts(obj: Any, seen: set[int]) -> None:
    """The ids of the mutable objects reachable from `obj` through lists, tuples, dicts and sets."""
    if isinstance(obj, _MUTABLE) and id(obj) not in seen:
        seen.add(id(obj))
    elif not isinstance(obj, tuple):
        return
    for item in (obj.values() if isinstance(obj, dict) else obj):
        _parts(item, seen)


# NOTE [Math functions of symbolic ints]: `math.gcd(n, 6)`, `math.factorial(n)`, `math.comb(n + 2, 2)`,
# `math.isqrt(n)` of a symbolic int (a size, an int argument that changed) have no symbolic form (the ones that
# do are kept symbolic: NOTE [Math functions of sizes] in sym_arith.py). Folding read n's value, which pinned
# the entry to it: one compilation per value, then the recompile limit ran the frame eagerly (hhuntD MED-6;
# stock torch.compile breaks the graph there: 3-4 graphs). The call is a graph break instead: it runs as Python
# on the real int, and the resume function takes its result as an int argument, dynamic once it changes.
# With fullgraph=True (no break by choice) it is folded, its operands specialised, as before. math.log/exp and
# the other float functions still specialise, as in stock torch.compile.
_INT_MATH = frozenset(("gcd", "lcm", "factorial", "comb", "perm", "isqrt", "isclose", "copysign"))
# isclose (a bool) of a symbolic int or of a dynamic float breaks too; copysign of a dynamic float is a float node
# (NOTE [More builtins of dynamic numbers] in float_calls.py), of symbolic ints only a break.


def _breaks_for_symbolic_ints(out, fn: Callable, args: list[Value], kwargs: dict[str, Value]) -> None:
    import math
    from .sym_arith import is_sym
    if getattr(fn, "__self__", None) is not math or fn.__name__ not in _INT_MATH or getattr(out, "fullgraph", False):
        return
    from .values import SymFloatValue
    if any(is_sym(v) or fn.__name__ == "isclose" and isinstance(v, SymFloatValue) for v in (*args, *kwargs.values())):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"math.{fn.__name__}() of a symbolic int: called as "
                                                      "Python, so the int stays symbolic")


def index_of(value: Any) -> Any:
    """`operator.index(value)` with eager's TypeError raised as the user's: enumerate's start (review revK MED-2:
    `enumerate(xs, 0.5)` counted 0.5, 1.5 where eager raises TypeError)."""
    try:
        return operator.index(value)
    except TypeError as e:
        raise UserException(e) from None


_SMALL_EXPONENT = 64


def modular_pow(tx, base: Value, exponent: Value, modulus: Value) -> Value | None:
    """`pow(n, 2, 7)` of a symbolic int n: `n ** 2 % 7`, the same int for a constant exponent >= 0 and a nonzero
    constant modulus (Python's % takes the modulus's sign, as pow does); another call with a symbolic operand is
    a graph break (NOTE [Math functions of symbolic ints]); None: fold it."""
    import torch
    from .protocol import binary
    from .sym_arith import is_sym
    if not any(is_sym(v) for v in (base, exponent, modulus)):
        return None

    def constant_int(v: Value) -> bool:
        return isinstance(v, ConstantValue) and type(v.value) is int
    # a small exponent only (review revK HIGH-1): `n ** e % m` makes the full power first, so the modular
    # inverse idiom `pow(n, MOD - 2, MOD)` (MOD = 10**9 + 7) built a billion-bit int on every call (hung);
    # pow itself reduces as it goes. Larger exponents take the break below, n stays symbolic.
    if is_sym(base) and isinstance(base.sym, torch.SymInt) and constant_int(exponent) \
            and 0 <= exponent.value <= _SMALL_EXPONENT and constant_int(modulus) and modulus.value != 0:
        return binary(tx, operator.mod, binary(tx, operator.pow, base, exponent), modulus)
    if getattr(tx.output, "fullgraph", False):
        return None
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "pow() with a modulus of symbolic ints: called as Python, so they "
                                                  "stay symbolic (NOTE [Math functions of symbolic ints])")


def fold_call(fn: Callable, args: list[Value], kwargs: dict[str, Value], out=None) -> Value:
    """`fn(*args, **kwargs)` evaluated on the constants `args` stand for (NOTE [Folded calls on containers]);
    `out`: the OutputGraph, when a math function of a symbolic int may break (NOTE [Math functions of symbolic
    ints])."""
    from .hash_order import note_fold
    from .protocol import constant_fold
    _breaks_for_symbolic_ints(out, fn, args, kwargs)
    from .float_calls import float_call  # math.exp/log/... of a dynamic float: NOTE [Builtins of dynamic floats]
    kept = float_call(out, fn, args, kwargs) if out is not None else None
    if kept is not None:
        return kept
    consts = [a.as_constant() for a in args]
    kwconsts = {k: v.as_constant() for k, v in kwargs.items()}
    if not _containers([*args, *kwargs.values()]):
        return constant_fold(fn, *consts, **kwconsts)
    note_fold(fn, (*consts, *kwconsts.values()))  # NOTE [Hash-seeded facts]
    given = [*consts, *kwconsts.values()]
    fresh = [v.as_constant() for v in (*args, *kwargs.values())]
    try:
        result = fn(*consts, **kwconsts)
    except Exception as e:
        raise UserException(e) from None
    if given != fresh:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{getattr(fn, '__name__', fn)!s}() changed a container it was "
                                                 "given (folded on copies): it runs as Python")
    inputs: set[int] = set()
    for c in given:
        _parts(c, inputs)
    returned: set[int] = set()
    _parts(result, returned)
    if inputs & returned:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(fn, '__name__', fn)!s}() returned a container it "
                                                      "was given (folded on copies): it runs as Python")
    return folded_value(result)


# NOTE [Strings joined from generators]: `", ".join(f"{k}={v}" for k, v in cfg.items())` (extra_repr, log lines,
# cache keys) passes a generator, which is no constant, so the fold did not apply and the call was a break.
# CPython's join first draws its argument into a list (PySequence_Fast), then checks the items: the trace
# draws it the same way (the generator runs inlined, in order) and folds the join over that list; items that
# are not constants (a symbolic int's string) leave the call a break, as before.
_JOINS = ("str.join", "bytes.join")


def joined_items(tx, fn: Callable, args: list[Value], kwargs: dict[str, Value]) -> list[Value]:
    """The arguments of `fn`, with a `sep.join(iterable)`'s iterable drawn into a list value."""
    if len(args) != 1 or kwargs or args[0].is_constant() or getattr(fn, "__qualname__", None) not in _JOINS \
            or type(getattr(fn, "__self__", None)) not in (str, bytes):
        return args
    from .protocol import iterate
    return [ListValue(iterate(tx, args[0]))]


def permuted_like(items: list[Value], before: list, after: list) -> list[Value]:
    """`items` (standing for the constants `before`) rearranged as a method left `before` when it became
    `after` (sort, remove, rotate, reverse on the constants): each item kept by the identity of its constant,
    so list values inside keep their identity and stay values of this trace, not shared constants."""
    positions: dict[int, collections.deque] = {}
    for i, v in enumerate(before):
        positions.setdefault(id(v), collections.deque()).append(i)
    return [items[positions[id(v)].popleft()] for v in after]


__all__ = ["fold_call", "folded_value", "joined_items", "permuted_like"]
