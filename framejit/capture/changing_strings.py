"""Strings that changed between calls, read without their value pinning the trace.

NOTE [Strings that change between calls]: a str read from a source (an item of a list argument: the
rows of a csv file parsed by the caller, `for name, val in rows: out = out + float(val) * x`; a value of a
config dict) is guarded by value like any constant, so every new value made a new trace until the
recompile limit ran the frame eagerly (8 traces, then eager; stock torch.compile the same). When a call
misses because such a string changed (a CONSTANT_MATCH on a str failed), the hook marks its source with
the frame's dynamic floats (hook._mark_dynamic_float; NOTE [Dynamic floats] in values/scalars.py), and
later traces wrap it as a ChangingStringValue: a ConstantValue guarded by type only, whose value is
guarded (CONSTANT_MATCH, as before) the moment anything reads it (`value`, `as_constant()`: a comparison
`if name == "relu"`, a dict key, formatting, a regex, returning it). So a string that steers Python
control flow stays guarded and recompiles per value, as before; only these uses do not read it:
- `float(s)` is a graph input whose source is `float(<source>)` (NOTE [Dynamic floats]: its arithmetic
  with tensors and floats is graph nodes; any use that needs the number specialises it, guarding
  `float(<source>) == value`, not the string);
- `int(s)` (one argument) is a symbolic int input whose source is `int(<source>)` (NOTE [Dynamic ints]).
Each is guarded by `type(float(<source>)) is float` (`int`): a string that no longer parses fails the
guard (a guard that raises fails, guards/codegen.py), and the frame is traced again, where `float(s)` of
that string raises as eager does. A string that does not parse when traced is read (guarded) as before.
Strings carried into resume functions have their own rule (NOTE [Strings carried across breaks] in
carried_loops.py), which the builder applies first.
"""
from __future__ import annotations

from typing import Any

from .sources import CallSource, Ref, Source
from .values import ConstantValue, Value

_CONVERSIONS = {float: Ref(float, "float"), int: Ref(int, "int")}


class ChangingStringValue(ConstantValue):
    """A str from `source` whose value changed between calls (NOTE above): guarded by type; its value is
    guarded where it is read."""

    def __init__(self, out, obj: str, source: Source) -> None:  # not ConstantValue.__init__: `value` is a property
        self.out = out
        self.raw = obj
        self.source = source
        self.read = False

    @property
    def value(self) -> Any:
        if not self.read:
            self.read = True
            self.out.guard_constant(self.source, self.raw)
        return self.raw

    @value.setter
    def value(self, obj: Any) -> None:
        self.raw, self.read = obj, True

    def python_type(self) -> type:
        return str

    def describe(self) -> str:
        return f"str({self.source.describe()})"


def changing_string(out, obj: str, source: Source) -> Value:
    """The str `obj` at `source`, which changed between calls: opaque where it was carried into a resume function
    (NOTE [Strings carried across breaks] in carried_loops.py), else read where it is used (NOTE above)."""
    if out.dynamic_ints and source.describe() in out.dynamic_ints:
        from .carried_loops import opaque_string
        return opaque_string(out, obj, source)
    out.guard_type(source, str)
    return ChangingStringValue(out, obj, source)


def converted(tx, kind: type, value: Value) -> Value | None:
    """`kind(value)` (float or int of one argument) of an unread changing string: a graph input (NOTE
    above); None where the string is read instead (it was read already, or it does not parse)."""
    if type(value) is not ChangingStringValue or value.read or kind not in _CONVERSIONS:
        return None
    try:
        number = kind(value.raw)
    except (ValueError, TypeError):
        return None  # the caller reads it (guarded) and raises eager's error
    source = CallSource(_CONVERSIONS[kind], value.source)
    out = tx.output
    if kind is float:
        return out.add_float_input(number, source)
    return out.add_int_input(number, source)


__all__ = ["ChangingStringValue", "changing_string", "converted"]
