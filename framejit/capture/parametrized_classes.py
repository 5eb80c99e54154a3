"""The classes torch.nn.utils.parametrize makes, one per parametrized module, matched by their structure.

NOTE [Parametrized classes alike]: `register_parametrization` (and so `weight_norm`, `spectral_norm`,
`orthogonal`) gives every module it touches a class of its own: `type(f"Parametrized{cls.__name__}",
(cls,), {"__getstate__": getstate, ...})`, then a `property(get_parametrized, set_original)` per tensor
name, each made by a new closure. A trace pins the type of every object it reads (TYPE_MATCH), so a frame
that reads `self.conv` of many weight-normed convs (Encodec's and Mimi's padded convs: the frames resumed
inside `EncodecConv1d.forward` after a break hold `self.conv` on their stack) needed one entry per conv and
ran eagerly from the 9th on (the recompile limit), though every conv ran the very same code.

The TYPE_MATCH of such a class `R` (the class the trace saw) now also accepts a class `C` that is alike:
`___type(o) is R or ___alike_class(___type(o), R, flag)`. Alike means that every attribute lookup on `C`
resolves to an entry that behaves as `R`'s does, for every name, so every guard the trace made on `R`
(its dict, its entries pinned by identity, the contents of their closure cells) holds for `C` exactly when
it holds for `R`:
- both are parametrize's classes (the `__getstate__` of `_inject_new_class`), of metaclass `type`, with
  the same `__name__`, `__qualname__`, `__bases__` and MRO after themselves (element by element);
- their own dicts have the same keys in the same order, and each pair of entries is the same object, an
  equal scalar (`__module__`, `__doc__`), an equal list or tuple of scalars (`__slotnames__`, which
  `copy.deepcopy` caches on each class it copies an instance of), or equivalent functions or properties:
  functions with the same code, globals, defaults, keyword defaults, name, qualname, doc, annotations and
  function dict, whose closure cells hold the same object, equal scalars, or equivalent functions;
  properties (exactly `property`) whose fget, fset and fdel are equivalent and whose docs are equal;
- one difference is allowed, and only while parametrize's cache is off (`_cache_enabled` falsy, read at
  guard time): the `module` cell of `get_cached_parametrization`, which holds each class's own module.
  That function is called by `get_parametrized` only while the cache is on (a trace reading the property
  guards `_cache_enabled`), and then the classes must be identical.

Identity is still what a trace relies on when it takes one of these classes, or a function of its dict, as
a value (`type(m)`, `m.__class__`, a global or attribute holding the class, `m.__getstate__`,
`type(m).weight`): identities can be compared, hashed, returned, and `isinstance(a, type(b))` is folded
from the pinned types, which alike matching would change when `a` and `b` are called with one object of
`b`'s class. Operator dispatch between two objects also asks whether their classes are one (the reflected
method is tried only when they differ), and an ABC registry (`A.register(C)`) names one class. Such a read
sets the trace's one `flag` (`rely_on_identity`: in `type()`, in the wrap of a class read through a source,
in a pin of a class-dict entry that is not a property, in user_operators' dispatch between two objects, in
an isinstance/issubclass answered by an ABC), and a set flag makes
`___alike_class` answer False for every class of that entry: all its types match by identity, as before.
Reading the parametrized property of an instance (`m.weight`) runs its fget, which needs only its code and
cells.
"""
from __future__ import annotations

import sys
import types
from typing import Any

_MODULE = "torch.nn.utils.parametrize"
_SCALARS = (str, int, bool, float, type(None))
_CODES: dict[str, types.CodeType] = {}


def _codes() -> dict[str, types.CodeType]:
    """Code objects of the functions parametrize makes per class (its nested functions' constants)."""
    if not _CODES:
        parametrize = sys.modules.get(_MODULE)
        if parametrize is None:
            return _CODES
        for maker in (parametrize._inject_new_class, parametrize._inject_property):
            for const in maker.__code__.co_consts:
                if isinstance(const, types.CodeType):
                    _CODES[const.co_name] = const
    return _CODES


def is_parametrized_class(cls: Any) -> bool:
    """A class `_inject_new_class` made (its own `__getstate__` is parametrize's)."""
    if type(cls) is not type or cls.__dict__.get("__module__") != _MODULE:
        return False
    getstate = cls.__dict__.get("__getstate__")
    code = _codes().get("getstate")
    return code is not None and getattr(getstate, "__code__", None) is code


def alike_class(cls: Any, seen: type, flag: list) -> bool:
    """The guard helper: `cls` behaves as `seen` for every lookup (NOTE [Parametrized classes alike])."""
    if flag[0] or type(cls) is not type or not is_parametrized_class(cls):
        return False
    if cls.__name__ != seen.__name__ or cls.__qualname__ != seen.__qualname__:
        return False
    if not _same_items(cls.__bases__, seen.__bases__) or not _same_items(cls.__mro__[1:], seen.__mro__[1:]):
        return False
    mine, theirs = cls.__dict__, seen.__dict__
    if list(mine) != list(theirs):
        return False
    return all(_equivalent(mine[name], theirs[name]) for name in theirs)


def _same_items(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):  # `__slotnames__`, the list copy.deepcopy caches on each class
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return type(a) in _SCALARS and a == b and a == a


def _equivalent(a: Any, b: Any, depth: int = 0) -> bool:
    if _same_value(a, b):
        return True
    if type(a) is not type(b) or depth > 3:
        return False
    if type(a) is property:
        return all(_optional_functions(getattr(a, part), getattr(b, part), depth)
                   for part in ("fget", "fset", "fdel")) and _same_value(a.__doc__, b.__doc__)
    if type(a) is types.FunctionType:
        return _functions_alike(a, b, depth)
    return False


def _optional_functions(a: Any, b: Any, depth: int) -> bool:
    return (a is None and b is None) or (type(a) is types.FunctionType and type(b) is types.FunctionType
                                         and _functions_alike(a, b, depth + 1))


def _functions_alike(f: types.FunctionType, g: types.FunctionType, depth: int) -> bool:
    if f.__code__ is not g.__code__ or f.__globals__ is not g.__globals__:
        return False
    if not (_same_tuple(f.__defaults__, g.__defaults__) and _same_mapping(f.__kwdefaults__, g.__kwdefaults__)
            and _same_mapping(f.__dict__, g.__dict__) and _same_mapping(f.__annotations__, g.__annotations__)):
        return False
    names = ("__name__", "__qualname__", "__doc__", "__module__")
    if not all(_same_value(getattr(f, a), getattr(g, a)) for a in names):
        return False
    if getattr(f, "__type_params__", ()) or getattr(g, "__type_params__", ()):
        return False
    cells_f, cells_g = f.__closure__ or (), g.__closure__ or ()
    for name, a, b in zip(f.__code__.co_freevars, cells_f, cells_g):
        try:
            x, y = a.cell_contents, b.cell_contents
        except ValueError:  # an empty cell: alike only if both are
            if _empty(a) and _empty(b):
                continue
            return False
        if _module_cell(f, name):
            continue
        if not _equivalent(x, y, depth + 1):
            return False
    return len(cells_f) == len(cells_g)


def _module_cell(f: types.FunctionType, name: str) -> bool:
    """The `module` cell of `get_cached_parametrization`, skipped only while parametrize's cache is off."""
    if name != "module" or f.__code__ is not _codes().get("get_cached_parametrization"):
        return False
    return not sys.modules[_MODULE]._cache_enabled


def _empty(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


def _same_tuple(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))


def _same_mapping(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is b
    return list(a) == list(b) and all(_same_value(a[k], b[k]) for k in a)


def _flag(out) -> list:
    """The trace's flag: set when it relies on the identity of any of parametrize's classes."""
    return out.__dict__.setdefault("_parametrized_identity", [False])


def type_check(out, expr: str, cls: type) -> str:
    """The TYPE_MATCH expression for an object of a parametrized class `cls`, `expr` its type."""
    return (f"({expr} is {out.name_of(cls, cls.__name__)} or {out.name_of(alike_class, 'alike_class')}"
            f"({expr}, {out.name_of(cls, cls.__name__)}, {out.name_of(_flag(out), 'identity_flag')}))")


def rely_on_identity(out, cls: Any) -> None:
    """The trace took `cls` (or an entry of its dict) as a value: the entry's types match by identity."""
    if is_parametrized_class(cls):
        _flag(out)[0] = True
