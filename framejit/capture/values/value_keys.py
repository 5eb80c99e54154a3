"""Dict keys from outside that are immutable values: namedtuples, frozensets, complex numbers, ranges, dates.

NOTE [Immutable values as dict keys, by their source]: a dict argument, global or attribute keyed by
namedtuples (`scales[Key(0, 1)]`), frozensets, complex numbers, ranges, dates or timedeltas (or plain tuples
holding them) was "non-constant keys": no break could be taken at the load and the whole frame ran eagerly
(hhuntG6 M1). A first attempt made such keys constants of the trace (7502770, reverted): the trace then held the
key object of its first call, so `k is K0` and `id(k)` answered from that object (revAS HIGH-1), and a
namedtuple key's properties, methods and `__repr__` ran once while tracing with nothing guarding its class
(HIGH-2, HIGH-3). Here each such key is read through its own source, `list(d)[i]`, as tensor and object keys
are (NOTE [Keys by their source]): a namedtuple is a TupleValue whose class facts are guarded as for an argument
(plain_namedtuple_class; its methods and properties inlined, NOTE [Text of namedtuples]), a frozenset a SetValue,
a complex number or range a sourced constant, a date or timedelta an object; so identity questions (`k is K0`,
`id(k)`) are guarded relations of sources or graph breaks, never answers about the first call's object. The dict
holds an ImmutableKey (values/mappings.py) that hashes and compares as the real key (the trace's lookups with
`(0, 1)` or `Key(0, 1)` find it as CPython does) and stands for that sourced value; a value from outside of such a
type that the trace stores as a key (`v = d.pop(k); d[k] = v`, `d[arg] = 1`) is kept the same way
(`sourced_value_key`), so the key stored is that object, as in CPython. The dict's keys guard pins each such key by
its exact type and value, item by item (guards/same_values.same_key: a frozenset's items with their types in
iteration order, a range by start/stop/step, a namedtuple through tuple's own length and iteration, no code of its
class run), so `Key(0, 1)` misses an entry made for `(0, 1)`. That guard is what pins the keys: their values have
no guards of their own, and entries are read as `d[<key>]` (guards through `list(d)[i]` for every key and entry
made each call O(len(d) ** 2): 400 namedtuple keys cost 65 ms a call, 1.4 ms now).
Not accepted (the frame still runs eagerly, "non-constant keys"): instances of classes with their own
`__hash__`/`__eq__` (their hash and equality are user code that a lookup would run), namedtuples with an
instance dict or whose classes define a tuple method or their own `__repr__`/`__str__`/`__format__`,
frozensets holding anything but ints, bools, strs, bytes and None, NaN parts, datetimes and times (`==`
ignores `fold`), Decimals and Fractions. A date passed as an argument stays an object (not pinned by value).
"""
from __future__ import annotations

import datetime
import math
from typing import Any, Callable


_FROZEN_ITEMS = (int, bool, str, bytes, type(None))
_DATES = (datetime.date, datetime.timedelta)


def _plain_namedtuple_class(cls: type) -> bool:
    """A namedtuple class none of whose classes before tuple defines a tuple method or its own text (the
    wrap guards it: values/plain_bases.plain_namedtuple_class)."""
    from .plain_bases import own_text_dunder, _TUPLE_METHODS
    if not (issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)):
        return False
    own = cls.__mro__[:cls.__mro__.index(tuple)]
    return not any(name in vars(klass) for klass in own for name in _TUPLE_METHODS) and not own_text_dunder(cls)


def value_key(key: Any, constant: Callable[[Any], bool]) -> bool:
    """Whether `key` is a key read through its source here; `constant`: the test for keys that are constants
    (values/builder._constant_key), which items of a tuple key may also be."""
    cls = type(key)
    if cls is complex:
        return not (math.isnan(key.real) or math.isnan(key.imag))
    if cls is range or cls in _DATES:
        return True
    if cls is frozenset:
        return all(type(k) in _FROZEN_ITEMS for k in key)
    if cls is tuple:
        return any(value_key(k, constant) for k in key) and all(constant(k) or value_key(k, constant) for k in key)
    if isinstance(key, tuple) and _plain_namedtuple_class(cls) and not cls.__dictoffset__:  # no instance dict
        return all(constant(k) or value_key(k, constant) for k in key)
    return False


def sourced_value_key(value) -> Any:
    """An ImmutableKey for a value from outside (it has a source) of such a type put in or looked up in a dict or
    set by the trace (`v = d.pop(k); d[k] = v`, `d[arg] = 1`): the key stored is that object, as in CPython,
    not a copy rebuilt from its parts; None for other values."""
    if getattr(value, "source", None) is None or not value.is_constant():
        return None
    from .builder import _constant_key
    from .mappings import ImmutableKey
    real = value.as_constant()
    return ImmutableKey(value, real) if not _constant_key(real) and value_key(real, _constant_key) else None


def unmodelled_key(keys: list, constant: Callable[[Any], bool]) -> str:
    """Why the first key the dict's model refuses is refused, for the log (`""` where none is)."""
    from ..identity_keys import identity_hashed
    for k in keys:
        if constant(k) or value_key(k, constant) or identity_hashed(k) or type(k).__module__.startswith("torch"):
            continue
        cls = type(k)
        if isinstance(k, tuple) and type(k) is not tuple and isinstance(getattr(cls, "_fields", None), tuple):
            why = "a namedtuple with an instance dict, a tuple method or text method of its own, or other items"
        elif cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
            why = f"its class's __hash__/__eq__ ({cls.__qualname__}) is code a lookup would run: not modelled"
        else:
            why = "not modelled as a key"
        return f": a key of type {cls.__qualname__}: {why}"
    return ""


_KEY_ITEM_SCALARS = (int, float, str, bytes, bool, type(None))
_IMMUTABLE = (complex, range, frozenset, *_DATES)


def _key_value(out, key: Any, source) -> Any:
    """The value of the key read through `source`, with no guard of its own: the dict's keys guard pins its exact
    type and value item by item (a guard per key through `list(d)[i]` made every call O(len(d) ** 2)). A
    namedtuple's class facts are guarded (plain_namedtuple_class); an item that is not a plain scalar is wrapped."""
    from ..sources import ItemSource
    from .base import ConstantValue
    from .builder import wrap
    from .containers import SetValue, TupleValue
    from .objects import ObjectValue
    from .plain_bases import plain_namedtuple_class
    cls = type(key)
    if cls in _KEY_ITEM_SCALARS or cls in (complex, range):
        return ConstantValue(key, source)
    if cls in _DATES:
        return ObjectValue(key, source)
    if cls is frozenset:
        value = SetValue(key, source, frozenset)
        value.order, value.frozen = list(key), key  # NOTE [Set order]
        return value
    if not isinstance(key, tuple) or (cls is not tuple and not plain_namedtuple_class(out, cls)):
        return wrap(out, key, source)
    items = [(_key_value if type(item) in _KEY_ITEM_SCALARS + _IMMUTABLE or isinstance(item, tuple) else wrap)(
        out, item, ItemSource(source, index)) for index, item in enumerate(key)]
    return TupleValue(items, source, cls)


def wrap_value_key(out, key: Any, source, index: int):
    """The ImmutableKey of `key`, the `index`th key of the dict read through `source`; its entry is read through
    the key itself (None: ItemSource(d, key)), which the keys guard pins by value."""
    from ..sources import CallSource, ItemSource, Ref
    from .mappings import ImmutableKey
    key_source = ItemSource(CallSource(Ref(list, "list"), source), index)
    return ImmutableKey(out.remember(key_source, _key_value(out, key, key_source)), key), None
