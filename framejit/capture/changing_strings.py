"""Strings that changed between calls, read without their value pinning the trace.

NOTE [Strings that change between calls]: a str read from a source (an item of a list argument: the
rows of a csv file parsed by the caller, `for name, val in rows: out = out + float(val) * x`; a value of a
config dict) is guarded by value like any constant, so every new value made a new trace until the
recompile limit ran the frame eagerly (8 traces, then eager; stock torch.compile the same). When a call
misses because such a string changed (a CONSTANT_MATCH on a str failed), the hook marks its source with
the frame's dynamic floats (hook._mark_dynamic_float, string_changed; NOTE [Dynamic floats] in values/scalars.py), and
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
carried_loops.py), which the builder applies first. A regex over one that changes often breaks (NOTE [Regular
expressions over strings that change often]), and a re.Match from a source is read the same way (NOTE [Matches
read where they are used]).
"""
from __future__ import annotations

import itertools
import re
from typing import Any

from .. import logs
from .sources import CallSource, ItemSource, Ref, Source
from .values import ConstantValue, Value

_CONVERSIONS = {float: Ref(float, "float"), int: Ref(int, "int")}


class _GuardedWhereRead(ConstantValue):
    """A constant from `source` guarded by type only; `_guard` pins it the first time anything reads `value`."""

    def __init__(self, out, obj: Any, source: Source) -> None:  # not ConstantValue.__init__: `value` is a property
        self.out = out
        self.raw = obj
        self.source = source
        self.read = False

    def _guard(self) -> None:
        raise NotImplementedError

    @property
    def value(self) -> Any:
        if not self.read:
            self.read = True
            self._guard()
        return self.raw

    @value.setter
    def value(self, obj: Any) -> None:
        self.raw, self.read = obj, True


class ChangingStringValue(_GuardedWhereRead):
    """A str from `source` whose value changed between calls (NOTE above): guarded by type; its value is
    guarded where it is read."""

    def _guard(self) -> None:
        self.out.guard_constant(self.source, self.raw)

    def python_type(self) -> type:
        return str

    def describe(self) -> str:
        return f"str({self.source.describe()})"


class ChangingMatchValue(_GuardedWhereRead):
    """A re.Match from `source` (NOTE [Matches read where they are used]): guarded by type; its identity is
    guarded where it is read, except by `m.group(k)` (a changing string), `m.start()` and `m.end()` (int inputs)."""

    def _guard(self) -> None:
        self.out.guard_id(self.source, self.raw)

    def python_type(self) -> type:
        return re.Match

    def describe(self) -> str:
        return f"Match({self.source.describe()})"

    def attr_in_trace(self, name: str) -> Value | None:
        return _MatchMethod(self, name) if name in ("group", "start", "end") and not self.read else None


class _MatchMethod(Value):
    """`m.group`, `m.start` or `m.end` of an unread ChangingMatchValue: `m.group(k)` (k an int or a name) a changing
    string, `m.start()` / `m.end()` an int input (NOTE [Dynamic ints]) of source `re.Match.start(<source>)`; any
    other call, or any other use, reads the match (guarded by identity)."""

    def __init__(self, match: ChangingMatchValue, name: str) -> None:
        self.match = match
        self.name = name
        self.source = None

    def python_type(self) -> type:
        return type(getattr(self.match.raw, self.name))

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return getattr(self.match.value, self.name)

    def describe(self) -> str:
        return f"{self.match.describe()}.{self.name}"

    def call_in_trace(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if self.name != "group" and not args and not kwargs and not self.match.read:
            position = getattr(self.match.raw, self.name)()
            source = CallSource(Ref(getattr(re.Match, self.name), f"re.Match.{self.name}"), self.match.source)
            return self.match.out.add_int_input(position, source)
        key = 0 if not args else args[0].value if len(args) == 1 and type(args[0]) is ConstantValue and \
            type(args[0].value) in (int, str) else None
        text = _group(self.match.raw, key) if key is not None and not kwargs and not self.match.read and \
            self.name == "group" else _MISSING
        if type(text) is str:  # `m.group(k)` is `m[k]`: guarded by type, read where it is used
            return ChangingStringValue(self.match.out, text, ItemSource(self.match.source, key))
        if text is None:  # a group that did not take part in the match: `m[k] is None` guarded
            self.match.out.guard_constant(ItemSource(self.match.source, key), None)
            return ConstantValue(None)
        return tx.call(tx.getattr(ConstantValue(self.match.value, self.match.source), self.name), args, kwargs)


_MISSING = object()


def _group(match: re.Match, key: int | str) -> Any:
    """`match.group(key)`; _MISSING for a group the pattern does not have (the call then reads the match)."""
    try:
        return match.group(key)
    except IndexError:
        return _MISSING


# NOTE [Matches read where they are used]: a re.Match from a source (an argument of a loop body's resume
# function: `for m in re.finditer(p, s)` over a changing string breaks at finditer and steps as Python) was
# guarded by identity, and each step's match is a new object: the body recompiled at every step. It is now a
# ChangingMatchValue, guarded by type, whose identity is guarded where anything reads it (a span, `m[k]`,
# comparing it), as a changing string's value is (NOTE above). `m.group()`, `m.group(k)` (an int or a name)
# read it not: each is a changing string with the source `<source>[k]` (a Match is immutable and `m[k]` is
# `m.group(k)`), so `int(m.group())` is an int input (NOTE above) and the body is traced once for all matches.
# A group that did not take part in the match is None, guarded so (`<source>[k] is None`); one the pattern
# does not have reads the match (the real call raises IndexError). `m.start()` and `m.end()` are int inputs
# with the source `re.Match.start(<source>)` (NOTE [Dynamic ints]): positions change with every match.
def changing_string(out, obj: Any, source: Source) -> Value:
    """The str `obj` at `source`, which changed between calls: opaque where it was carried into a resume function
    (NOTE [Strings carried across breaks] in carried_loops.py), else read where it is used (NOTE above); a
    re.Match from a source (NOTE [Matches read where they are used])."""
    if type(obj) is re.Match:
        out.guard_type(source, re.Match)
        return ChangingMatchValue(out, obj, source)
    if out.dynamic_ints and source.describe() in out.dynamic_ints:
        from .carried_loops import opaque_string
        return opaque_string(out, obj, source)
    out.guard_type(source, str)
    return ChangingStringValue(out, obj, source)


def string_changed(hook, source: str) -> None:
    """A call of `hook` (a FrameHook) missed because the str at `source` changed (NOTE [Strings that change
    between calls]): marked among its dynamic floats the first time; later misses on it (a trace read its value)
    are counted with markers there, read by `changes_often`."""
    marks = hook.dynamic_floats
    if source not in marks:
        logs.log("recompiles", "%s: the str %s changed value; it is guarded only where it is read from now on",
                 hook._name(), source)
        hook.dynamic_floats = marks | {source}
        return
    count = next(n for n in itertools.count(2) if f"{_READ_AGAIN}{n}:{source}" not in marks)
    hook.dynamic_floats = marks | {f"{_READ_AGAIN}{count}:{source}"}


_READ_AGAIN = "str read, changed again #"  # no source describes so


def changes_often(value: Value) -> bool:
    """`value` is an unread changing string whose source changed value STRING_VALUES times (NOTE [Regular
    expressions over strings that change often])."""
    if type(value) is not ChangingStringValue or value.read:
        return False
    return f"{_READ_AGAIN}{STRING_VALUES}:{value.source.describe()}" in value.out.dynamic_floats


# NOTE [Regular expressions over strings that change often]: `re.finditer(p, s)` over a changing string reads it
# (the matches are facts of its value), so the frame still compiled once per value. Breaking at the finditer
# instead (it runs as Python, its loop steps as Python with each match carried into the body: NOTE [Matches read
# where they are used]) serves every value, but costs a break: a string that takes a few values (a spec that
# alternates between two) is better served by one entry per value, the loop unrolled into the graph. So the
# break comes only once the string has changed STRING_VALUES times (it was read and guarded, and missed again).
STRING_VALUES = 4


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


__all__ = ["ChangingMatchValue", "ChangingStringValue", "changing_string", "changes_often", "converted",
           "string_changed"]
