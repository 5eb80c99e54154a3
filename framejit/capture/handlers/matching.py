"""Structural pattern matching (`match` statements): MATCH_MAPPING, MATCH_SEQUENCE, MATCH_KEYS, MATCH_CLASS
and GET_LEN, with CPython's semantics (Python/ceval.c `match_keys`, `match_class`).

NOTE [Match statements]: the compiler lowers a `match` into these five instructions plus ordinary loads,
comparisons, unpacking and jumps, so only they need handlers. Each is answered through the same machinery
as the Python it stands for, so every fact is guarded as that Python would guard it:
- MATCH_MAPPING / MATCH_SEQUENCE test the subject's type flags (Py_TPFLAGS_MAPPING / _SEQUENCE: dict and
  list/tuple and classes registered with collections.abc, never str/bytes); the subject's type is a fact
  its value already guards.
- MATCH_KEYS looks up `subject.get` once and calls it with a private default per key, as `match_keys`
  does (so a mapping class's own `get` runs); a duplicate key raises ValueError as CPython does.
- MATCH_CLASS is `isinstance(subject, cls)`, then `cls.__match_args__` for positional sub-patterns (the
  subject itself for bool, int, str, ... with one positional), then `getattr` per attribute; a missing
  attribute fails the match (None), a wrong `__match_args__` or a repeated attribute raises TypeError.
- GET_LEN is `len(subject)`.
"""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported, UserException
from ..values import BuiltinValue, ClassValue, ConstantValue, TupleValue, Value
from . import op

_MAPPING = 1 << 6   # Py_TPFLAGS_MAPPING
_SEQUENCE = 1 << 5  # Py_TPFLAGS_SEQUENCE
_MATCH_SELF = 1 << 22  # _Py_TPFLAGS_MATCH_SELF


_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE


def _flag(tx, value: Value, bit: int) -> bool:
    """The subject type's flag; a mutable class (a Python class) gains MAPPING/SEQUENCE when registered with
    collections.abc after the trace (`Mapping.register(C)`), so its bit is guarded on the class."""
    try:
        cls = value.python_type()
    except Exception:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a match subject of unknown type: {value.describe()}") from None
    answer = bool(cls.__flags__ & bit)
    if not cls.__flags__ & _IMMUTABLE:
        out = tx.output
        out.add_guard("TYPE_FLAGS", f"bool({out.name_of(cls, cls.__name__)}.__flags__ & {bit}) is {answer}", None,
                      expected=f"{cls.__qualname__} {'is' if answer else 'is not'} a mapping/sequence for match")
    return answer


@op("MATCH_MAPPING")
def match_mapping(tx, inst):
    tx.push(ConstantValue(_flag(tx, tx.peek(), _MAPPING)))


@op("MATCH_SEQUENCE")
def match_sequence(tx, inst):
    tx.push(ConstantValue(_flag(tx, tx.peek(), _SEQUENCE)))


@op("GET_LEN")
def get_len(tx, inst):
    tx.push(tx.call(BuiltinValue(len), [tx.peek()], {}))


def _constants(value: Value, what: str) -> tuple:
    if not value.is_constant() or not isinstance(value.as_constant(), tuple):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{what} of a match pattern that is not constant")
    return value.as_constant()


class _Missing(ConstantValue):
    """The private default MATCH_KEYS passes to `subject.get`: identity tells a missing key."""

    def __init__(self) -> None:
        super().__init__(object())


@op("MATCH_KEYS")
def match_keys(tx, inst):
    subject, keys = tx.peek(2), tx.peek(1)
    names = _constants(keys, "the keys")
    if not names:
        tx.push(TupleValue([]))
        return
    seen: list = []
    get = tx.getattr(subject, "get")
    values = []
    for key in names:
        if any(key == other for other in seen):
            raise UserException(ValueError(f"mapping pattern checks duplicate key ({key!r})"))
        seen.append(key)
        missing = _Missing()
        found = tx.call(get, [ConstantValue(key), missing], {})
        if found is missing:
            tx.push(ConstantValue(None))
            return
        if isinstance(found, _Missing):
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "a mapping's get() returned another default")
        values.append(found)
    tx.push(TupleValue(values))


def _truth(tx, value: Value) -> bool:
    if not value.is_constant():
        raise Unsupported(BreakKind.DATA_DEPENDENT, "a class pattern whose isinstance() is not known")
    return bool(value.as_constant())


def _attribute(tx, subject: Value, name: str) -> Value | None:
    try:
        return tx.getattr(subject, name)
    except UserException as e:
        if isinstance(e.exc, AttributeError):
            return None
        raise


@op("MATCH_CLASS")
def match_class(tx, inst):
    names_value, cls, subject = tx.pop(), tx.pop(), tx.pop()
    names = _constants(names_value, "the keyword attributes")
    if not isinstance(cls, ClassValue) or not isinstance(cls.obj, type):
        raise UserException(TypeError("called match pattern must be a class"))
    if not _truth(tx, tx.call(BuiltinValue(isinstance), [subject, cls], {})):
        tx.push(ConstantValue(None))
        return
    klass = cls.obj
    attrs: list[Value] = []
    seen: list[str] = []
    positional: tuple = ()
    if inst.arg:
        match_args = _attribute(tx, cls, "__match_args__")
        match_self = match_args is None and bool(klass.__flags__ & _MATCH_SELF)
        if match_args is not None:
            positional = _constants_or_error(match_args, klass)
        allowed = 1 if match_self else len(positional)
        if allowed < inst.arg:
            plural = "" if allowed == 1 else "s"
            raise UserException(TypeError(f"{klass.__name__}() accepts {allowed} positional sub-pattern{plural} "
                                          f"({inst.arg} given)"))
        if match_self:
            attrs.append(subject)
        positional = positional[:inst.arg] if not match_self else ()
    for name in (*positional, *names):
        if not isinstance(name, str):
            raise UserException(TypeError(f"__match_args__ elements must be strings (got {type(name).__name__})"))
        if name in seen:
            raise UserException(TypeError(f"{klass.__name__}() got multiple sub-patterns for attribute {name!r}"))
        seen.append(name)
        attr = _attribute(tx, subject, name)
        if attr is None:
            tx.push(ConstantValue(None))
            return
        attrs.append(attr)
    tx.push(TupleValue(attrs))


def _constants_or_error(match_args: Value, klass: type) -> tuple:
    if not match_args.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{klass.__name__}.__match_args__ is not a constant")
    value = match_args.as_constant()
    if not isinstance(value, tuple):
        raise UserException(TypeError(f"{klass.__name__}.__match_args__ must be a tuple (got {type(value).__name__})"))
    return value
