"""Calls of `functools.lru_cache` / `functools.cache` wrappers while tracing.

NOTE [Cached functions]: library code memoises helpers (`is_torch_distributed_available()`,
generation-config lookups) with `functools.lru_cache`. The wrapper is a C object whose call cannot be
traced. A call with constant arguments whose answer is an immutable constant (None, bool, int, float,
str, tuples of those) is answered by calling the real wrapper at trace time: exactly what the eager call
returns now (the cached value, or the value computed and cached now, as eager's first call would), and
what later eager calls return for as long as the cache is not cleared. Any other call with constant
arguments inlines `__wrapped__` (guarded by identity through the wrapper's source); a call with
non-constant arguments (tensors) is a graph break, since eager would hash them into the cache. An
argument that is an object from outside hashed by identity (object's own __hash__ and __eq__, e.g. a
logging.Logger) counts as a constant: it is guarded by identity and the real object goes into the real
call. This is how transformers' `logger.warning_once(msg)` (an lru_cache function stored on
logging.Logger, read as a bound method) runs: the first call warns at trace time, during the call that
eager would warn in, and later calls find the cache filled, as eager does.

The answer is guarded by calling the wrapper again in the guard function (`_still_answers`): a cleared
cache (`fn.cache_clear()`) recomputes there, as the eager call would, and a different answer recompiles
(the entry's constant was the answer before the clear; red team, test_redteam2.py).

NOTE [Cached calls counted as eager counts them]: the wrapper's statistics (`fn.cache_info()`: hits, misses)
are observable, so framejit calls the real wrapper exactly as often as eager does (red team h12red3:
`x + k(3) + k.cache_info().hits` gave one hit more than eager, `k(3) + k(3)` one hit per call less):
- the traces of one conversion (a frame with a break is traced again up to the break, convert._break_entry)
  share a memo (`conversion()`): the n-th call of `fn(args)` in a later trace reuses the n-th answer of an
  earlier trace instead of calling the wrapper again;
- the guard makes the entry's calls on every later call: the n-th call of the same `fn(args)` in one trace
  is its own guard line (an occurrence number in the expression, which guards would otherwise merge), so a
  frame calling `k(3)` twice calls it twice per call, as eager does. (The first call runs no guard: the
  trace made those calls.)
`cache_info()`, `cache_clear()` and `cache_parameters()` themselves are calls of C methods: graph breaks that
run for real and read the real counters.
"""
from __future__ import annotations

import contextlib
import functools
import threading

from ..guards.guard import COST_CONTAINER
from .breaks import BreakKind, Unsupported, UserException
from .graph_calls import short_text  # NOTE [Guard texts run no user code]
from .sources import AttrSource
from .values import ConstantValue, ObjectValue, Value
from .values.builder import wrap

_LRU_TYPE = functools._lru_cache_wrapper
_IMMUTABLE = (type(None), bool, int, float, str, bytes)


def is_cached_function(fn: Value) -> bool:
    return isinstance(fn, ObjectValue) and isinstance(fn.obj, _LRU_TYPE)


def _immutable(value) -> bool:
    if isinstance(value, tuple) and type(value) is tuple:
        return all(_immutable(v) for v in value)
    return type(value) in _IMMUTABLE


def _identity_hashed(tx, value: Value) -> bool:
    """An object from outside that the cache keys by identity: guarded by identity, passed as itself."""
    if not (isinstance(value, ObjectValue) and value.source is not None):
        return False
    cls = type(value.obj)
    if cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
        return False
    if any(key[0] == id(value.obj) for key in tx.output.side_effects.attrs):
        return False  # the real call would see it without the trace's pending stores
    tx.output.guard_id(value.source, value.obj)
    return True


def _key_part(tx, value: Value):
    if value.is_constant():
        return value.as_constant()
    if _identity_hashed(tx, value):
        return value.obj
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an lru_cache function called with non-constant arguments")


_CONVERSIONS = threading.local()


@contextlib.contextmanager
def conversion():
    """NOTE [Cached calls counted as eager counts them]: the traces of one frame conversion share answers."""
    outer = getattr(_CONVERSIONS, "memo", None)
    _CONVERSIONS.memo = {}
    try:
        yield
    finally:
        _CONVERSIONS.memo = outer


def _counted_call(tx, fn: ObjectValue, args: list, kwargs: dict):
    """Call the wrapper once per eager call (NOTE [Cached calls counted as eager counts them]); returns the
    answer and which call of `fn(args)` this is in the trace (0 for the first)."""
    counts = tx.output.__dict__.setdefault("cached_call_counts", {})
    try:
        key = (id(fn.obj), tuple(args), tuple(sorted(kwargs.items())))
        hash(key)
    except Exception:  # noqa: BLE001 - unhashable: the real call raises TypeError as eager's does
        key = None
    nth = counts[key] = counts.get(key, -1) + 1
    memo = getattr(_CONVERSIONS, "memo", None)
    if key is not None and memo is not None and (key, nth) in memo:
        kind, value = memo[(key, nth)][1:]
    else:
        try:
            kind, value = "ok", fn.obj(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the call raised: eager raises the same (nothing is cached)
            kind, value = "raise", e
        if key is not None and memo is not None:
            memo[(key, nth)] = (fn.obj, kind, value)  # holds the wrapper: its id stays its own
    if kind == "raise":  # NOTE [Cached calls that raised]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a cached call that raised {type(value).__name__} while "
                          "tracing (nothing is cached: every call runs the function)")
    return value, nth


# NOTE [Cached calls that raised]: an exception is never cached, so every eager call of the wrapper runs the
# function again, and a later call may answer (after `cache_clear()` and a change of what it reads). The trace
# raised the exception with no guard on the call, so the entry kept answering "it raised" (review revT HIGH:
# /tmp/revT/t/a4_lru_raise.py, eager 7.0 where framejit 0.0). Such a call is a break: it runs in Python.


def call_cached(tx, fn: ObjectValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if fn.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an lru_cache function without a source")
    real_args = [_key_part(tx, a) for a in args]
    real_kwargs = {k: _key_part(tx, v) for k, v in kwargs.items()}
    wrapped = wrap(tx.output, fn.obj.__wrapped__, AttrSource(fn.source, "__wrapped__"))
    result, nth = _counted_call(tx, fn, real_args, real_kwargs)
    if _immutable(result):
        _guard_answer(tx, fn, real_args, real_kwargs, result, nth=nth)
        return ConstantValue(result)
    cached = _cached_object(tx, fn, real_args, real_kwargs, result, nth)
    if cached is not None:
        return cached
    return tx.call(wrapped, args, kwargs)


# NOTE [Cached mutable answers]: a cached function returning a list, dict or object (`@lru_cache def
# layer_sizes(n): return [...]`, a cached module or table factory) returns the SAME object on every eager
# call, so a caller that appends to it sees its earlier appends the next time. Inlining `__wrapped__` made a
# new object per compiled call: `l = sizes(1); l.append(0)` returned [1, 2, 0] on every call where eager
# grows [1, 2, 0, 0], ... The answer is now the real cached object, named directly (an object from outside:
# its contents guarded, mutations replayed onto it), and guarded to still be what the cache answers
# (`_answers_object`, checked last like `_still_answers`). An answer the values cannot model inlines as before.
def _cached_object(tx, fn: ObjectValue, args: list, kwargs: dict, result, nth: int = 0) -> Value | None:
    from .sources import ObjectSource, Ref
    try:
        value = wrap(tx.output, result, ObjectSource(Ref(result, "cached_answer")))
    except Unsupported:
        return None
    _guard_answer(tx, fn, args, kwargs, result, same=_answers_object, nth=nth)
    return value


def _answers_object(fn, args, kwargs, obj, nth=0) -> bool:
    try:
        return fn(*args, **kwargs) is obj
    except Exception:  # noqa: BLE001 - raises now: recompile, the trace raises it as eager does
        return False


def _same_constant(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(_same_constant(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return repr(a) == repr(b)  # bitwise enough: -0.0 and nan spelled apart
    return a == b


def _still_answers(fn, args, kwargs, value, nth=0) -> bool:
    try:
        return _same_constant(fn(*args, **kwargs), value)
    except Exception:  # noqa: BLE001 - raises now: recompile, the trace raises it as eager does
        return False


def _guard_answer(tx, fn: ObjectValue, args: list, kwargs: dict, result, same=None, nth: int = 0) -> None:
    out = tx.output
    part = lambda v: repr(v) if _literal(v) else out.name_of(v, "arg")  # noqa: E731
    call_args = "(" + "".join(f"{part(a)}, " for a in args) + ")"
    call_kwargs = "{" + ", ".join(f"{k!r}: {part(v)}" for k, v in kwargs.items()) + "}"
    check = out.name_of(same or _still_answers, (same or _still_answers).__name__.strip("_"))
    occurrence = f", {nth}" if nth else ""  # NOTE [Cached calls counted as eager counts them]: one line per call
    expr = f"{check}({fn.source.expr(out.names)}, {call_args}, {call_kwargs}, {part(result)}{occurrence})"
    # NOTE [Cached calls checked last]: the check calls the user's function, so it comes after every other
    # guard, the shape env's too: an int argument made symbolic keeps its value as a SHAPE_ENV guard (cost
    # COST_TENSOR + 1), and the call checked before it looked up `h(2)` on a call with `k == 3`, a lookup
    # eager never makes (with a bounded cache it ran `h` again and reordered the cache).
    out.add_guard("CACHED_CALL", expr, fn.source, expected=f"the cached answer {short_text(result)}", actual=expr,
                  cost=COST_CONTAINER + 1)


def _literal(value) -> bool:
    if type(value) is tuple:
        return all(_literal(v) for v in value)
    if type(value) is float:
        return value == value and value not in (float("inf"), float("-inf"))
    return type(value) in _IMMUTABLE


# NOTE [singledispatch answered at trace time]: a `functools.singledispatch` function is a wrapper that calls
# `dispatch(args[0].__class__)`, a closure over the registry, a WeakKeyDictionary cache keyed by classes and an
# ABC cache token; traced, the cache lookup broke (a dict with class keys), in the wrapper and again in each
# resume: 3 breaks per call. `dispatch(cls)` of a class known at trace time is answered by calling the real
# `dispatch` now (eager makes the same call; filling its cache is what eager's first call does), and guarded
# by calling it again in the guard function and comparing identity with the implementation found
# (`_dispatches_to`, checked last like a cached call). A `register()` (which clears the cache), an ABC
# registration that changes the answer, or a new implementation for the class thus recompiles. The
# implementation is then called like any function. `singledispatchmethod` goes through the same `dispatch`.
_DISPATCH_CODE = functools.singledispatch(lambda arg: arg).dispatch.__code__


def is_singledispatch_dispatch(fn) -> bool:
    return getattr(fn, "__code__", None) is _DISPATCH_CODE


def call_dispatch(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`dispatch(cls)` of a singledispatch function read from outside (fn: its UserFunctionValue), or None
    when it is not answered here (then it is inlined as before)."""
    from .sources import ObjectSource, Ref
    from .values import ClassValue
    if fn.source is None or kwargs or len(args) != 1 or not isinstance(args[0], ClassValue):
        return None
    cls = args[0].obj
    try:
        impl = fn.fn(cls)
    except Exception as e:  # noqa: BLE001 - eager's dispatch raises the same (no implementation, bad MRO)
        raise UserException(e) from None
    out = tx.output
    expr = f"{out.name_of(_dispatches_to, 'dispatches_to')}({fn.source.expr(out.names)}, " \
           f"{out.name_of(cls, getattr(cls, '__name__', 'cls'))}, {out.name_of(impl, 'impl')})"
    out.add_guard("CACHED_CALL", expr, fn.source, expected=f"dispatch to {getattr(impl, '__qualname__', impl)!r}",
                  actual=expr, cost=COST_CONTAINER + 1)
    return wrap(out, impl, ObjectSource(Ref(impl, "dispatched")))


def _dispatches_to(dispatch, cls, impl) -> bool:
    try:
        return dispatch(cls) is impl
    except Exception:  # noqa: BLE001 - raises now: recompile, the trace raises it as eager does
        return False
