"""How each kind of locator is resolved in a new process (NOTE [Locators] in locators.py).

`locators.resolve` dispatches on a locator's first element through RESOLVERS; the NOTEs named beside each
kind are in locators.py, where the locator is made."""
from __future__ import annotations

import logging
import types

import torch

from .locators import (_MISSING, NotPersistable, _import, _imported, _in_cell, _interpreter_types, _live_mro,
                       _nested_code, _own_name, code_hash, resolve)


def _op(locator, fn):  # an overload, or its packet (None: NOTE [Op packets by name])
    packet = getattr(getattr(torch.ops, locator[1]), locator[2])
    return packet if locator[3] is None else getattr(packet, locator[3])


def _hashed(locator, fn):  # a code object no inlined function's hash covers: its own hash, checked
    code = resolve(locator[1], fn)
    if not isinstance(code, types.CodeType) or code_hash(code) != locator[2]:
        raise NotPersistable(f"the code of {getattr(code, 'co_qualname', code)} changed since it was cached")
    return code


def _classdict(locator, fn):  # NOTE [Class-dict descriptors by name]
    owner = _import(locator[1], locator[2])
    if not isinstance(owner, type) or locator[3] not in owner.__dict__:
        raise NotPersistable(f"{locator[1]}.{locator[2]} has no own attribute {locator[3]}")
    entry = owner.__dict__[locator[3]]
    return getattr(entry, locator[4]) if len(locator) > 4 else entry  # a classmethod's __func__


def _fcell(locator, fn):  # NOTE [Closure cells by path]
    owner = resolve(locator[1], fn)
    cells, names = getattr(owner, "__closure__", None) or (), getattr(getattr(owner, "__code__", None), "co_freevars", ())
    if locator[2] >= len(cells) or names[locator[2]] != locator[3]:
        raise NotPersistable(f"{getattr(owner, '__qualname__', owner)!r} has no free variable {locator[3]!r} there")
    return cells[locator[2]]


def _code_in(locator, fn):  # NOTE [Nested code by its enclosing function]
    found = _nested_code(resolve(locator[1], fn).__code__, locator[2])
    if found is None:
        raise NotPersistable(f"no code {locator[2]} in its enclosing function")
    return found


def _type_of(locator, fn):  # NOTE [Local classes by an instance]
    module = _imported(locator[1])
    if locator[2] not in module.__dict__:
        raise NotPersistable(f"{locator[1]} has no global {locator[2]}")
    return type(module.__dict__[locator[2]])


def _in_class(locator, fn):  # NOTE [Functions by the class that holds them]
    owner = resolve(locator[1], fn)
    if not isinstance(owner, type) or locator[2] not in owner.__dict__:
        raise NotPersistable(f"{getattr(owner, '__qualname__', owner)} has no own attribute {locator[2]}")
    return owner.__dict__[locator[2]]


def _nested_raw(locator, fn):  # NOTE [Nested breaks persisted]
    from .nested_persist import resolve_raw
    return resolve_raw(locator, fn)


def _itype(locator, fn):  # NOTE [Interpreter types by a sample]
    if locator[1] not in _interpreter_types():
        raise NotPersistable(f"no interpreter type {locator[1]}")
    return _interpreter_types()[locator[1]]


def _substitute(locator, fn):  # NOTE [Library substitutes by their original]
    from .library_substitutes import library_substitute
    found = library_substitute(resolve(locator[1], fn))
    if found is None:
        raise NotPersistable("the function has no traced substitute any more")
    return found


def _bound(locator, fn):  # NOTE [Objects by the global that binds them]
    module = _imported(locator[1])
    found = module.__dict__.get(locator[2], _MISSING)
    if type(found) is not resolve(locator[3], fn):
        raise NotPersistable(f"{locator[1]}.{locator[2]} is not a {locator[3][-1]} as cached")
    return found


def _imported_by_name(locator, fn):
    obj = _own_name(_import(locator[1], locator[2]), locator[1], locator[2])
    for attr in locator[3:]:  # a getter, a classmethod's function, a decorated function's __wrapped__
        obj = getattr(obj, attr)
    return obj


RESOLVERS = {
    "module": lambda loc, fn: _imported(loc[1]),
    "globals": lambda loc, fn: _imported(loc[1]).__dict__,
    "cell": lambda loc, fn: fn.__closure__[loc[1]],
    "dtype": lambda loc, fn: getattr(torch, loc[1]),
    "device": lambda loc, fn: torch.device(loc[1]),
    "logger": lambda loc, fn: logging.getLogger(loc[1]),
    "op": _op,
    "op_namespace": lambda loc, fn: getattr(torch.ops, loc[1]),  # NOTE [Op packets by name]
    "enum": lambda loc, fn: getattr(_import(loc[1], loc[2]), loc[3]),
    "value": lambda loc, fn: loc[1],
    "mro": lambda loc, fn: _live_mro(loc[1], fn),
    "hashed": _hashed,
    "code": lambda loc, fn: resolve(loc[1], fn).__code__,  # NOTE [Code replaced] in lookup.py
    "classdict": _classdict,
    "fcell": _fcell,
    "code_in": _code_in,
    "contents": lambda loc, fn: _in_cell(resolve(loc[1], fn), loc[2], fn),
    "type_of": _type_of,
    "in_class": _in_class,
    "tuple": lambda loc, fn: tuple(resolve(sub, fn) for sub in loc[1]),
    "marks": lambda loc, fn: frozenset(id(resolve(sub, fn)) for sub in loc[1]),  # NOTE [Persisted marks]
    "getattr": lambda loc, fn: getattr(resolve(loc[1], fn), loc[2]),
    "itype": _itype,
    "substitute": _substitute,
    "bound": _bound,
    "import": _imported_by_name,
    "nested_raw": _nested_raw,  # NOTE [Nested breaks persisted] in nested_persist.py
}
