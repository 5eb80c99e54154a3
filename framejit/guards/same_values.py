"""Equality of constants as a guard needs it: `==` with float zeros told apart by their sign.

NOTE [Float guards are bitwise] (capture/graph_calls.py) pins a float read by a trace bit for bit, since
`-0.0 == 0.0` yet `math.copysign`, `1 / x` and `str` tell them apart. Constants compared as a whole with `==`
lost that: `{-0.0: "a"}` hit the entry made for `{0.0: "a"}` (so did a set or frozenset of floats, a
`complex(-0.0, 0.0)` or `numpy.float64(-0.0)` argument), and the trace answered the other zero
(/tmp/hadv/p16.py, p17.py: `str(next(iter(d)))` was "-0.0" where eager had "0.0"). These helpers compare
item by item, a zero only with a zero of its sign (also inside tuples, complex numbers and the fields of a
frozen dataclass used as a key); they are used
only where `has_zero` says a zero is there, so other guards keep their plain `==`. NaN never reaches them
(such keys are not constants; a NaN float argument has its own check).
"""
from __future__ import annotations

import math
from typing import Any


def _inexact(value: Any, kinds: str) -> bool:
    """A numpy scalar of one of these dtype kinds ("f" float, "c" complex); numpy is never imported here."""
    return type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "kind", None) in kinds


def _is_complex(value: Any) -> bool:
    return isinstance(value, complex) or _inexact(value, "c")


def _fields(value: Any) -> Any:
    """The field values of a dataclass instance (a frozen one is a dict key compared by its fields), else None."""
    if getattr(type(value), "__dataclass_fields__", None) is None or isinstance(value, type):
        return None
    return getattr(value, "__dict__", {}).values()


def has_zero(value: Any) -> bool:
    """Whether a float zero is in `value` (a float or numpy float, a complex part, in a tuple, list or set, or a
    field of a dataclass instance)."""
    if type(value) in (tuple, list, set, frozenset):
        return any(map(has_zero, value))
    if (fields := _fields(value)) is not None:
        return any(map(has_zero, fields))
    if _is_complex(value):
        return has_zero(value.real) or has_zero(value.imag)
    return (isinstance(value, float) or _inexact(value, "f")) and value == 0.0


def same_constant(expected: Any, value: Any) -> bool:
    """`value == expected`, where a float zero of `expected` (alone, a part of a complex number, an item of a
    tuple) equals only a zero of the same sign."""
    if type(expected) is tuple:
        return type(value) is tuple and len(value) == len(expected) and all(map(same_constant, expected, value))
    if not has_zero(expected):
        return value == expected
    if (fields := _fields(expected)) is not None:
        return value == expected and type(value) is type(expected) and all(map(same_constant, fields, _fields(value)))
    if _is_complex(expected):
        return value == expected and same_constant(expected.real, value.real) and \
            same_constant(expected.imag, value.imag)
    return value == 0.0 and math.copysign(1.0, expected) == math.copysign(1.0, value)


def same_items(items: Any, expected: list) -> bool:
    """The iteration of `items` (a set, a dict) is `expected`, item by item (same_constant)."""
    got = list(items)
    return len(got) == len(expected) and all(map(same_constant, expected, got))


def typed_items(value: Any) -> bool:
    """A tuple whose items `==` may match across types (1 == 1.0 == True): one that is not a str."""
    return isinstance(value, tuple) and any(type(v) is not str for v in value)


def exact_key(key: Any) -> bool:
    """The keys guard compares `key` by `same_key` (NOTE [Exact keys decided when the guard is built])."""
    return has_zero(key) or typed_items(key)


def same_key(expected: Any, value: Any) -> bool:
    """`same_constant`, where the items of a tuple (nested too) also keep their types."""
    if type(value) is not type(expected):
        return False
    if isinstance(expected, tuple):
        return len(value) == len(expected) and (type(expected) is tuple or value == expected) and \
            all(map(same_key, expected, value))
    return same_constant(expected, value)


def same_keys(d: dict, expected: tuple, types: tuple) -> bool:
    """The keys of `d`, in order, are of `types` and equal `expected`, but for its tensor keys (`...` in
    `expected`), whose identity the guards of their own sources pin (NOTE [Keys by their source], sources.py)."""
    return len(d) == len(expected) and all(
        type(a) is t and (b is ... or a == b) for a, b, t in zip(d, expected, types))


# NOTE [Exact keys decided when the guard is built]: a key holding a float zero needs `same_constant`
# (NOTE [Float guards are bitwise]), and a tuple key the types of its items: `{(1,): 0}`, `{(True,): 0}` and
# `{(1.0,): 0}` hit one entry (`==` and hash agree), whose trace read the other key (`repr` "(True,)" for
# "(1,)", `torch.full((2,), k[0])` int64 where eager is float32). Calling such a comparison for every key of
# every dict on every guard check made the keys guard of an ordinary dict (string keys) 5x slower (1.3 us ->
# 6.5 us), but which keys need it is known when the guard is built (values/builder._keys_check, `exact_key`):
# only a dict with such a key gets `same_exact_keys` and its per-key flags; the others keep `same_keys` and
# its plain `==`.
def same_exact_keys(d: dict, expected: tuple, types: tuple, exact: tuple) -> bool:
    """`same_keys`, where a key flagged in `exact` is compared by `same_key`."""
    return len(d) == len(expected) and all(type(a) is t and (
        b is ... or (same_key(b, a) if x else a == b)) for a, b, t, x in zip(d, expected, types, exact))
