"""Calls of `functools.lru_cache` / `functools.cache` wrappers while tracing.

NOTE [Cached functions]: library code memoises helpers (`is_torch_distributed_available()`,
generation-config lookups) with `functools.lru_cache`. The wrapper is a C object whose call cannot be
traced. A call with constant arguments whose answer is an immutable constant (None, bool, int, float,
str, tuples of those) is answered by calling the real wrapper at trace time: exactly what the eager call
returns now (the cached value, or the value computed and cached now, as eager's first call would), and
what later eager calls return for as long as the cache is not cleared. Any other call with constant
arguments inlines `__wrapped__` (guarded by identity through the wrapper's source); a call with
non-constant arguments (tensors) is a graph break, since eager would hash them into the cache.
"""
from __future__ import annotations

import functools

from .breaks import BreakKind, Unsupported, UserException
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


def call_cached(tx, fn: ObjectValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an lru_cache function called with non-constant arguments")
    if fn.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an lru_cache function without a source")
    wrapped = wrap(tx.output, fn.obj.__wrapped__, AttrSource(fn.source, "__wrapped__"))
    try:
        result = fn.obj(*(a.as_constant() for a in args), **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - the call raised: eager raises the same (nothing is cached)
        raise UserException(e) from None
    if _immutable(result):
        return ConstantValue(result)
    return tx.call(wrapped, args, kwargs)
