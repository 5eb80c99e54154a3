"""OutsideListValue and OutsideDictValue: a plain list or dict that came from outside the frame, read (and
guarded) only as far as the trace uses it.

NOTE [Lists from outside]: a list read through a Source (a global log, a list argument, an attribute) is
guarded by its type and identity-by-source only; its length and items are read, and guarded, when the
trace uses them:
- `len(lst)` and truth guard the length (`___len(e) == n`) once;
- `lst[i]` for a constant int `i` guards that the index exists (`___len(e) > i`, or `>= -i` for a
  negative one) and wraps that one item (through `ItemSource(source, i)`, guarded as any value);
- `lst.append(v)`, `lst.extend(it)` and `lst += it` add to `tail` (the items appended while tracing)
  without reading the list: the replay calls the same methods on the live list (NOTE [Mutation log]);
- anything else (iteration, slicing, `in`, sort, other mutations, rebuilding) reads the whole list: the
  length and every item are guarded, as for any list, and the value then behaves as a plain ListValue.
So a global list that the function only appends to (a log growing on every call) compiles once. The
real list is never mutated while tracing, so what is read is the state at frame entry, the state the
guards check.

NOTE [Dicts from outside]: likewise a plain dict with str/int/bool keys: `d[k]`, `d.get(k)` and `k in d`
for such a constant key guard only whether `k` is present (and wrap that one value through
`ItemSource`); `d[k] = v` is kept in `written` (replayed as `d[k] = v`); anything else (iteration, len,
views, other methods) guards the exact key list and every value, the writes then applied in order.
"""
from __future__ import annotations

from typing import Any

from ..sources import ItemSource, Source
from .base import Value
from .containers import DictValue, ListValue, SetValue


class OutsideListValue(ListValue):
    def __init__(self, out, obj: list, source: Source) -> None:  # no super().__init__: items are read lazily
        self.source = source
        self.cls = list
        self._out = out
        self._obj = obj
        self._items: list[Value] | None = None
        self._length: int | None = None  # the length at entry, once guarded
        self.tail: list[Value] = []  # appended while tracing, before the whole list was read

    @property
    def items(self) -> list[Value]:
        if self._items is None:
            self._items = [self._item(i) for i in range(self._guard_length())] + self.tail
            self.tail = []
        return self._items

    @items.setter
    def items(self, items: list[Value]) -> None:
        self._items = items

    @property
    def materialized(self) -> bool:
        return self._items is not None

    def _guard_length(self) -> int:
        if self._length is None:
            self._length = len(self._obj)
            e = self.source.expr(self._out.names)
            self._out.add_guard("LENGTH", f"___len({e}) == {self._length}", self.source,
                                expected=str(self._length), actual=f"___len({e})")
        return self._length

    def _item(self, index: int) -> Value:
        from .builder import wrap
        return wrap(self._out, self._obj[index], ItemSource(self.source, index))

    def length(self) -> int:
        if self._items is not None:
            return len(self._items)
        return self._guard_length() + len(self.tail)

    def truth(self) -> bool:
        if self._items is not None:
            return bool(self._items)
        if self.tail:
            return True
        if self._length is None:
            e = self.source.expr(self._out.names)
            empty = not self._obj
            self._out.add_guard("LENGTH", f"(___len({e}) == 0) is {empty}", self.source,
                                expected="empty" if empty else "not empty", actual=f"___len({e})")
        return bool(self._obj)

    def item(self, index: int) -> Value:
        """`lst[index]`; IndexError is the user's."""
        if self._items is not None:
            return self._items[index]  # may raise IndexError, as CPython does
        if self.tail and self._length is None:
            self._guard_length()
        if self._length is not None:
            total = self._length + len(self.tail)
            if not -total <= index < total:
                raise IndexError("list index out of range")
            index %= total
            return self._item(index) if index < self._length else self.tail[index - self._length]
        exists = -len(self._obj) <= index < len(self._obj)
        e = self.source.expr(self._out.names)
        check = f"___len({e}) > {index}" if index >= 0 else f"___len({e}) >= {-index}"
        self._out.add_guard("LENGTH", f"({check}) is {exists}", self.source,
                            expected=f"index {index} {'exists' if exists else 'is out of range'}",
                            actual=f"___len({e})")
        if not exists:
            raise IndexError("list index out of range")
        return self._item(index)

    def add(self, values: list[Value]) -> None:
        """`lst.extend(values)` (or append) while tracing."""
        if self._items is not None:
            self._items.extend(values)
        else:
            self.tail.extend(values)

    def pending(self) -> list[Value]:
        """The values made while tracing that this (unread) list holds: the appended ones."""
        return list(self.tail)

    def describe(self) -> str:
        if self._items is not None:
            return super().describe()
        return f"list {self.source.describe()}"


class OutsideDictValue(DictValue):
    def __init__(self, out, obj: dict, source: Source) -> None:  # no super().__init__: items are read lazily
        self.source = source
        self.cls = dict
        self._out = out
        self._obj = obj
        self._items: dict | None = None
        self._present: dict = {}  # key -> whether it was in the dict at entry, once guarded
        self.written: dict = {}  # d[k] = v while tracing, before the whole dict was read

    @property
    def items(self) -> dict:
        if self._items is None:
            from .builder import _wrap_dict  # the guards and values of any dict read whole
            self._items = dict(_wrap_dict(self._out, self._obj, self.source).items)
            self._items.update(self.written)
            self.written = {}
        return self._items

    @items.setter
    def items(self, items: dict) -> None:
        self._items = items

    @property
    def materialized(self) -> bool:
        return self._items is not None

    @staticmethod
    def lazy_key(key: Any) -> bool:
        return type(key) in (str, int, bool)

    def _value(self, key: Any) -> Value:
        from .builder import wrap
        return wrap(self._out, self._obj[key], ItemSource(self.source, key))

    def has(self, key: Any) -> bool:
        if self._items is not None or not self.lazy_key(key):
            return key in self.items
        if key in self.written:
            return True
        if key not in self._present:
            self._present[key] = key in self._obj
            e = self.source.expr(self._out.names)
            self._out.add_guard("DICT_CONTAINS", f"({key!r} in {e}) is {self._present[key]}", self.source,
                                expected=f"{key!r} {'present' if self._present[key] else 'absent'}", actual=e)
        return self._present[key]

    def lookup(self, key: Any) -> Value | None:
        """`d[key]`, or None when the key is absent."""
        if not self.has(key):
            return None
        if self._items is not None:
            return self._items[key]
        return self.written[key] if key in self.written else self._value(key)

    def store(self, key: Any, value: Value) -> None:
        if self._items is None and self.lazy_key(key):
            self.written[key] = value
        else:
            self.items[key] = value

    def pending(self) -> list[Value]:
        """The values made while tracing that this (unread) dict holds: the stored ones."""
        return list(self.written.values())

    def describe(self) -> str:
        if self._items is not None:
            return super().describe()
        return f"dict {self.source.describe()}"


class OutsideSetValue(SetValue):
    """NOTE [Sets from outside]: a plain set of constants: `s.add(c)`, `s.discard(c)` are kept in `changes`
    (replayed as the same calls) without reading the set; `c in s` and `s.remove(c)` guard only whether
    `c` is in it; anything else guards the whole set by value, the changes then applied in order."""

    def __init__(self, out, obj: set, source: Source) -> None:  # no super().__init__: items are read lazily
        self.source = source
        self.cls = set
        self._out = out
        self._obj = obj
        self._items: set | None = None
        self._present: dict = {}  # element -> whether it was in the set at entry, once guarded
        self.changes: dict = {}  # element -> whether it is in the set after the trace's add/discard calls
        self.exact = False  # NOTE [Set order]: `items` is a copy; `order` is the real set's, once read
        self.order: list | None = None
        self.frozen = None

    @property
    def items(self) -> set:
        if self._items is None:
            from .builder import guard_set
            guard_set(self._out, self._obj, self.source)
            self._items = set(self._obj)
            # NOTE [Set order]: the entry order only while nothing changed the set (a mutation such as
            # `s |= t` announced before its first read would otherwise iterate the entry elements)
            self.order = None if self.changes or getattr(self, "reordered", False) else list(self._obj)
            for element, present in self.changes.items():
                (self._items.add if present else self._items.discard)(element)
            self.changes = {}
        return self._items

    @items.setter
    def items(self, items: set) -> None:
        self._items = items

    @property
    def materialized(self) -> bool:
        return self._items is not None

    @staticmethod
    def lazy_element(element: Any) -> bool:
        return type(element) in (str, int, bool, type(None))

    def has(self, element: Any) -> bool:
        if self._items is not None or not self.lazy_element(element):
            return element in self.items
        if element in self.changes:
            return self.changes[element]
        if element not in self._present:
            self._present[element] = element in self._obj
            e = self.source.expr(self._out.names)
            self._out.add_guard("SET_CONTAINS", f"({element!r} in {e}) is {self._present[element]}", self.source,
                                expected=f"{element!r} {'present' if self._present[element] else 'absent'}",
                                actual=e)
        return self._present[element]

    def change(self, element: Any, present: bool) -> None:
        """`s.add(element)` (present) or `s.discard(element)` while tracing."""
        if self._items is None and self.lazy_element(element):
            self.changes.pop(element, None)
            self.changes[element] = present
        else:
            (self.items.add if present else self.items.discard)(element)

    def pending(self) -> list[Value]:
        return []  # only constants are kept unread

    def describe(self) -> str:
        if self._items is not None:
            return super().describe()
        return f"set {self.source.describe()}"


def set_has(s: SetValue, element: Any) -> bool:
    """`element in s` (an element as identity_keys.set_element gives it)."""
    return s.has(element) if isinstance(s, OutsideSetValue) else element in s.items


def outside_set(out, obj: set, source: Source) -> OutsideSetValue:
    out.guard_type(source, set)
    return OutsideSetValue(out, obj, source)


def lazy_dict(obj: Any) -> bool:
    """Whether `obj` is read as an OutsideDictValue: a plain dict with str, int and bool keys."""
    return type(obj) is dict and all(OutsideDictValue.lazy_key(k) for k in obj)


def outside_dict(out, obj: dict, source: Source) -> OutsideDictValue:
    out.guard_type(source, dict)
    return OutsideDictValue(out, obj, source)


def outside_list(out, obj: Any, source: Source) -> OutsideListValue:
    out.guard_type(source, list)
    return OutsideListValue(out, obj, source)


__all__ = ["OutsideDictValue", "OutsideListValue", "OutsideSetValue", "lazy_dict", "outside_dict", "outside_list",
           "outside_set", "set_has"]
