"""`os.environ` reads answered at trace time, guarded per key.

NOTE [Environment reads]: library code consults environment variables on the hot path
(`os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0")`). `os.environ` is a MutableMapping whose Python
methods catch KeyError internally, which tracing does not model; so reads of one constant key
(`get`, `[]`, `in`, `os.getenv`) are answered with the real value and guarded by re-reading that key
(`environ.get(key) == value`), so changing the variable recompiles. Writes are not modelled (a break).
"""
from __future__ import annotations

import collections.abc
import os
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .values import BoundMethodValue, ConstantValue, ObjectValue, UserFunctionValue, Value

_READS = {collections.abc.Mapping.get: "get", type(os.environ).__getitem__: "getitem",
          collections.abc.Mapping.__contains__: "contains"}


def is_environ_read(fn: Value) -> bool:
    return (isinstance(fn, BoundMethodValue) and isinstance(fn.self_value, ObjectValue)
            and fn.self_value.obj is os.environ and isinstance(fn.func, UserFunctionValue))


def call_environ(tx, fn: BoundMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    kind = _READS.get(fn.func.fn)
    if kind is None or kwargs or not args or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"os.environ.{fn.func.fn.__name__} with these arguments")
    key = args[0].as_constant()
    value = os.environ.get(key)
    _guard(tx, key, value)
    if kind == "contains":
        return ConstantValue(value is not None)
    if value is None:
        if kind == "getitem":
            raise UserException(KeyError(key))
        return args[1] if len(args) > 1 else ConstantValue(None)
    return ConstantValue(value)


def _guard(tx, key: str, value: Any) -> None:
    environ = tx.output.name_of(os.environ, "environ")
    expr = f"{environ}.get({key!r}) is None" if value is None else f"{environ}.get({key!r}) == {value!r}"
    tx.output.add_guard("ENVIRON", expr, None, expected=f"${key} = {value!r}", actual=f"{environ}.get({key!r})")
