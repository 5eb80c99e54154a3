"""How emitted code keys its constants (NOTE below): installed into the `bytecode` library on import."""
from __future__ import annotations

import types
from typing import Any

import bytecode

# NOTE [Constants kept apart by type]: the `bytecode` library shares one co_consts slot between constants whose
# marshal.dumps bytes are equal (bytecode.instr.const_key). marshal writes any object with the buffer protocol
# as its raw bytes, so NumPy scalars equal in bytes but not in type or value shared a slot: a function returning
# `(y / 3, y // 3)` for y = np.int64(0) got (np.float64(0.0), np.float64(0.0)) where eager returns (np.float64(0.0),
# np.int64(0)); np.False_ and np.uint8(0) alike, and a NumPy array with b"\0" * 8 (review of hnp, /tmp/hnp/p7.py).
# Constants are keyed by their bytes only when marshal writes them by type (None, bool, int, float, complex, str,
# bytes, Ellipsis, code, and tuples/frozensets of those); any other object by its identity.
_BY_TYPE = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), types.CodeType)
_LIBRARY_CONST_KEY = bytecode.concrete.const_key


def _marshalled_by_type(obj: Any) -> bool:
    if type(obj) in (tuple, frozenset):
        return all(_marshalled_by_type(item) for item in obj)
    return type(obj) in _BY_TYPE


def _const_key(obj: Any) -> Any:
    return _LIBRARY_CONST_KEY(obj) if _marshalled_by_type(obj) else (type(obj), id(obj))


bytecode.concrete.const_key = _const_key
