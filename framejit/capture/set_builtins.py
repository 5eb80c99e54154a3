"""set() and frozenset() called in a traced frame (split from builtins.py, which registers these handlers at its
end).

Their arguments are checked as CPython's constructors check them: keyword arguments and a second positional
argument raise the same TypeError (review revBS H3: `frozenset(iterable=s)` gave an empty frozenset)."""
from __future__ import annotations

from .breaks import UserException
from .values import ConstantValue, SetValue


def _check_arguments(name: str, args, kwargs) -> None:
    if kwargs:
        raise UserException(TypeError(f"{name}() takes no keyword arguments"))
    if len(args) > 1:
        raise UserException(TypeError(f"{name} expected at most 1 argument, got {len(args)}"))


def _set(tx, args, kwargs):
    from .identity_keys import set_operand  # imported when called: they import builtins
    _check_arguments("set", args, kwargs)
    return SetValue(set(set_operand(tx, args[0])) if args else set(), exact=True)  # NOTE [Set order]


def _frozenset(tx, args, kwargs):
    from .container_methods import frozen_set_value
    from .identity_keys import set_operand
    _check_arguments("frozenset", args, kwargs)
    if args and ((isinstance(args[0], SetValue) and args[0].cls is frozenset) or
                 (isinstance(args[0], ConstantValue) and type(args[0].value) is frozenset)):
        return args[0]  # CPython returns an exact frozenset itself (revBO HIGH-2)
    return frozen_set_value(frozenset(set_operand(tx, args[0])) if args else frozenset())


def register(handlers: dict) -> None:
    handlers[set] = _set
    handlers[frozenset] = _frozenset
