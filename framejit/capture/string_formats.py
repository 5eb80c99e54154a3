"""`str.format_map(mapping)` of a constant template, answered at trace time field by field.

NOTE [format_map through the mapping's protocol]: `"{a}-{b}".format_map(d)` with `d` a defaultdict, a dict
subclass with `__missing__`, or any object with `__getitem__` (a config, a ChainMap) reads each field as
CPython's `get_field_object` does: `mapping[name]` (so a defaultdict's factory runs and the key is inserted,
a recorded mutation replayed after the graph as eager leaves it), then the field's `.attr` / `[key]` parts,
then the `!s`/`!r`/`!a` conversion, then `format(value, spec)` (a spec with nested fields is formatted
first, two levels at most as CPython allows). The template is parsed by CPython's own parser
(`_string.formatter_parser`), so malformed templates raise its ValueError. Positional fields (`{}`, `{0}`)
raise "Format string contains positional fields" as format_map does. A field whose formatted text is not a
constant (a tensor, a symbolic int) leaves the call a graph break, as before.
"""
from __future__ import annotations

import _string

from .breaks import BreakKind, Unsupported, UserException
from .builtins import BUILTIN_HANDLERS
from .values import BuiltinValue, ConstantValue, Value

_CONVERSIONS = {"s": str, "r": repr, "a": ascii}


def _parsed(template: str) -> list:
    try:
        return list(_string.formatter_parser(template))
    except ValueError as e:
        raise UserException(e) from None


def _field_value(tx, field: str, mapping: Value) -> Value:
    from .protocol import getitem
    first, rest = _string.formatter_field_name_split(field)
    if first == "" or isinstance(first, int):
        raise UserException(ValueError("Format string contains positional fields"))
    value = getitem(tx, mapping, ConstantValue(first))
    for is_attr, key in rest:
        value = tx.getattr(value, key) if is_attr else getitem(tx, value, ConstantValue(key))
    return value


def _constant_text(value: Value) -> str:
    if not value.is_constant() or type(value.as_constant()) is not str:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "str.format_map of a field that is not a constant string")
    return value.as_constant()


def formatted(tx, template: str, mapping: Value, depth: int = 2) -> str:
    if depth < 0:
        raise UserException(ValueError("Max string recursion exceeded"))
    out = []
    for literal, field, spec, conversion in _parsed(template):
        out.append(literal)
        if field is None:
            continue
        value = _field_value(tx, field, mapping)
        if conversion is not None:
            if conversion not in _CONVERSIONS:
                raise UserException(ValueError(f"Unknown conversion specifier {conversion}"))
            value = tx.call(BuiltinValue(_CONVERSIONS[conversion]), [value], {})
        if spec and "{" in spec:
            spec = formatted(tx, spec, mapping, depth - 1)
        out.append(_constant_text(tx.call(BuiltinValue(format), [value, ConstantValue(spec or "")], {})))
    return "".join(out)


def _format_map(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 2 or kwargs or not args[0].is_constant() or type(args[0].as_constant()) is not str:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "str.format_map of a template that is not a constant string")
    return ConstantValue(formatted(tx, args[0].as_constant(), args[1]))


def bound_str_method(fn) -> object:
    """The handler of `"...".format_map` (a builtin method bound to its constant string), or None."""
    if type(getattr(fn, "__self__", None)) is str and getattr(fn, "__name__", None) == "format_map":
        template = fn.__self__
        return lambda tx, args, kwargs: _format_map(tx, [ConstantValue(template), *args], kwargs)
    return None


BUILTIN_HANDLERS[str.format_map] = _format_map
