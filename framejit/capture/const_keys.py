"""How emitted code keys its constants (NOTE below): installed into the `bytecode` library on import."""
from __future__ import annotations

import sys
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


# NOTE [Frozensets kept apart]: marshal writes a frozenset's elements sorted, so two equal frozensets that iterate
# in other orders (`a = frozenset([n, n + 8]); b = frozenset([n + 8, n])`, colliding in an 8-slot table) had equal
# bytes and shared one slot: the frame returned `a` twice (`list(b)` in a's order, `a is b` True; revBK HIGH-1). A
# frozenset, or a tuple holding one, is keyed by its identity.
def _marshalled_by_type(obj: Any) -> bool:
    if type(obj) is tuple:
        return all(_marshalled_by_type(item) for item in obj)
    return type(obj) in _BY_TYPE


def _const_key(obj: Any) -> Any:
    return _LIBRARY_CONST_KEY(obj) if _marshalled_by_type(obj) else (type(obj), id(obj))


bytecode.concrete.const_key = _const_key


def strings_interned(const: Any) -> bool:
    """Whether the code constructor keeps the frozenset or tuple constant `const` as it is (NOTE [Set templates
    as code constants]): it interns each str inside (tuples, frozensets), and where an equal string is interned
    already and is another object, it rebuilds the frozenset in a new table whose order may differ (hhuntG8
    HIGH-4: a returned `frozenset(genexpr)` of 20 strings iterated otherwise than eager in 6 of 8 calls). A
    string with no interned twin is interned here, as the constructor would, so it is kept."""
    for item in const:
        if type(item) is str and sys.intern(item) is not item:
            return False
        if type(item) in (tuple, frozenset) and not strings_interned(item):
            return False
    return True
