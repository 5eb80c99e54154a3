"""Instances of dict subclasses read from outside, seen through dict's own methods.

NOTE [Dict subclasses]: library code often subclasses dict and calls `super().get(key)` or
`dict.__getitem__(self, key)` (transformers' registries, `ModelOutput`). Such an object is an
ObjectValue (its type is guarded; its own methods are inlined). When one of dict's read-only methods
is called on it, the call is answered from its raw contents: `raw_dict_items(obj)` (a plain dict of the
dict's own storage, read through `dict.items`, which bypasses every override; `dict.copy` does not: for a
class with its own `__iter__`, an OrderedDict subclass among them, it merges through `keys()` and the
overridden `__getitem__`) is wrapped like a plain dict through a CallSource, so its keys and the values
read are guarded. Mutating dict methods on such an object stay graph breaks, as does `d[k]` for an absent
key when the class defines __missing__ (own_missing).
"""
from __future__ import annotations

import collections
import types
from typing import Any

from .breaks import BreakKind, Unsupported
from .sources import CallSource, Ref
from .values import (ConstantValue, DictValue, IteratorValue, NewObjectValue, ObjectValue, UserFunctionValue,
                     Value)
from .values.builder import wrap

READ_ONLY_DICT_METHODS = frozenset({"get", "__getitem__", "__contains__", "keys", "values", "items", "__len__",
                                    "__iter__", "copy"})


def raw_dict_items(obj: dict) -> dict:
    """The items a dict subclass instance holds in dict's own storage, whatever it overrides."""
    return dict(dict.items(obj))


def raw_odict_items(obj: collections.OrderedDict) -> dict:
    """The same for an OrderedDict subclass, in the OrderedDict's own order (what OrderedDict's methods see;
    dict's storage order differs after `move_to_end`)."""
    return dict(collections.OrderedDict.items(obj))


_RAW_ITEMS = Ref(raw_dict_items, "raw_dict_items")
_RAW_ODICT_ITEMS = Ref(raw_odict_items, "raw_odict_items")


def is_dict_object(value: Value) -> bool:
    return isinstance(value, ObjectValue) and isinstance(value.obj, dict)


def dict_contents(tx, obj: ObjectValue, method: str, owner: type = dict) -> DictValue:
    """The raw contents of a dict-subclass instance, for a read-only method `method` of `owner` (dict, or
    OrderedDict for an OrderedDict subclass: its order)."""
    if method not in READ_ONLY_DICT_METHODS:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{owner.__name__}.{method} on a {type(obj.obj).__name__} from outside")
    if method == "copy" and (owner is not dict or type(obj.obj).__iter__ is not dict.__iter__):
        # OrderedDict.copy is `type(self)(self)`; dict.copy merges through `keys()` and `__getitem__` then
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.copy of a {type(obj.obj).__name__}")
    if obj.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"contents of a {type(obj.obj).__name__} without a source")
    if owner is dict:
        raw = wrap(tx.output, raw_dict_items(obj.obj), CallSource(_RAW_ITEMS, obj.source))
    else:
        raw = wrap(tx.output, raw_odict_items(obj.obj), CallSource(_RAW_ODICT_ITEMS, obj.source))
    if not isinstance(raw, DictValue):
        if id(obj.obj) in tx.output.side_effects.written_dict_objects:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"contents of a {type(obj.obj).__name__} from outside after "
                                                     "the trace stored an item into it")
        return raw
    return ObjectContents(raw, obj, owner, tx.output.side_effects)


class ObjectContents(DictValue):
    """The contents of a dict-subclass object from outside as the trace sees them at each read: the raw
    contents read once (`raw`, guarded) with the item stores recorded so far into the object applied in
    order (a stored key keeps its place, a new one goes last, as dict's and OrderedDict's `__setitem__` do;
    NOTE [Item stores into dict objects from outside]). Without a source: the real object holds the old
    contents until the replay. Read-only: only dict's read-only methods reach it."""

    def __init__(self, raw: DictValue, obj: ObjectValue, owner: type, side_effects) -> None:  # noqa: no super
        self.raw = raw
        self.dict_object = (obj, owner)  # NOTE [Views of dict objects from outside]
        self.side_effects = side_effects
        self.source = None
        self.cls = raw.cls

    @property
    def items(self) -> dict:
        items = dict(self.raw.items)
        for target, _owner, key, value in self.side_effects.item_writes:
            if target.obj is self.dict_object[0].obj:
                items[key] = value
        return items


# NOTE [Views of dict objects from outside]: `o.keys()` (values, items) of a dict-subclass object from
# outside is a view of the contents read above, a DictValue that stood for a copy (`raw_dict_items(o)`).
# A view that left the trace (returned, stored, carried across a break) was rebuilt as a view of a new copy:
# a `dict_keys` where eager returns `odict_keys`, which did not see later changes of `o` (nor the item stores
# the replay makes after the graph); and a view taken before an item store did not see it within the trace.
# ObjectContents remembers its object and owner (`dict_object`) and computes its items at each read, and
# such a view is rebuilt as the live view of the object itself, `OrderedDict.keys(o)` (view_of_object) or
# dict's.


# NOTE [Item stores into dict objects from outside]: transformers' ModelOutput (an OrderedDict subclass)
# keeps fields and items in step: `outputs.pooler_output = x` runs its `__setattr__`, which calls
# `super().__setitem__(name, value)` and `super().__setattr__(name, value)` (176 such stores in transformers'
# models, `image_outputs.pooler_output = ...` in most vision-language models). On an output made before a
# graph break, or passed in, that store was a break (the resume frame after `.tolist()` in Idefics3/Llava
# get_image_features; 2 graphs where stock torch.compile makes 1). Now dict's or OrderedDict's own
# `__setitem__` with a str or int constant key on such an object is recorded (SideEffects.store_item) and
# made by the replay as eager makes it, `OrderedDict.__setitem__(obj, key, value)` (it cannot raise for such a
# key; a new key goes last, an old one keeps its place, as in eager). A later read of the contents through
# dict's methods in the same trace (`o["k"]`, `keys()`, `to_tuple()`, `**o`) sees the raw contents read at
# the start (guarded) with the stores recorded so far applied in order (ObjectContents); it was a graph
# break (`o.x = ...; return o["x"]`: 2 graphs per call, stock torch.compile 1). Other writes (`pop`, `update`,
# `del`, a key of another type) stay breaks. Like finishing calls, these stores are not made when a graph
# raises without an eager rerun (NOTE [Effects before a failing graph]).
def store_item(tx, obj: ObjectValue, owner: type, args: list[Value], kwargs: dict) -> Value:
    key = args[0] if len(args) == 2 and not kwargs else None
    if not isinstance(key, ConstantValue) or type(key.value) not in (str, int) or obj.source is None:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{owner.__name__}.__setitem__ on a {type(obj.obj).__name__} "
                                                 "from outside")
    tx.output.side_effects.store_item(obj, owner, key.value, args[1])
    return ConstantValue(None)


# NOTE [Dict objects from outside through the protocol]: `k in o` and `o[k] = v` on a dict-subclass object
# from outside whose class keeps dict's (or OrderedDict's) own __contains__ / __setitem__ (a plain
# `class D(dict): pass`, a ModelOutput) are the base's operations, which the trace already models for the
# explicit calls: the contents read as dict_contents gives them (with the stores recorded so far), a store
# as store_item records it. They were graph breaks (`in` on ObjectValue(D), item assignment into it). The
# class's lookup of the slot is guarded, so a class that later overrides it is traced anew.
def base_slot_owner(tx, obj: Value, name: str) -> type | None:
    """dict or OrderedDict when `type(obj).<name>` is that base's own slot (guarded), else None."""
    if not is_dict_object(obj):
        return None
    from . import lookup
    cls = type(obj.obj)
    found = lookup.mro_lookup(cls, name)[1]
    for owner in (collections.OrderedDict, dict):
        if issubclass(cls, owner) and found is owner.__dict__.get(name):
            lookup.guard_lookup(tx.output, cls, name)
            return owner
    return None


def own_missing(tx, obj: ObjectValue) -> bool:
    """The object's class defines __missing__, which dict.__getitem__ calls for an absent key: the user's
    code (another exception, a side effect, a value) that the raw contents do not answer, so such a
    lookup is a graph break. The lookup of __missing__ is guarded (it keeps finding it, or none)."""
    from . import lookup
    lookup.guard_lookup(tx.output, type(obj.obj), "__missing__")
    return lookup.mro_lookup(type(obj.obj), "__missing__")[0] is not None


# NOTE [Dict-subclass objects made while tracing]: an instance of a dict subclass created inside the
# compiled region (transformers' `ModelOutput`: an OrderedDict subclass that is a dataclass, whose
# `__setattr__`/`__setitem__` keep fields and items in step) is a NewObjectValue whose attrs hold, under
# the key STORAGE (not an identifier, so no attribute read can reach it), a DictValue with the dict's own
# items. The class's Python methods (`__init__`, `__post_init__`, `__setattr__`, `__getitem__`,
# `to_tuple`) are inlined; dict's and OrderedDict's C methods reached from them (`super().__setitem__`,
# `self.keys()`) and the operators the class does not override work on the storage. Graph breaks and
# return values see the storage as one more attribute (a DictValue), and `codegen_runtime.new_object` rebuilds
# the real object: its items through `OrderedDict.__setitem__`/`dict.__setitem__`, then its `__dict__`.
STORAGE = "<dict items>"
_DICT_BASES = (dict, collections.OrderedDict)


def is_new_dict_object(value: Value) -> bool:
    return isinstance(value, NewObjectValue) and STORAGE in value.attrs


def can_create(cls: type) -> bool:
    """A Python subclass of dict/OrderedDict with no other C base, no slots and the default `__new__`."""
    heap = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
    return (issubclass(cls, dict) and type(cls).__call__ is type.__call__ and cls.__new__ is dict.__new__
            and bool(cls.__flags__ & heap)
            and all(k in (object, *_DICT_BASES) or k.__flags__ & heap for k in cls.__mro__)
            and all(k in _DICT_BASES or "__slots__" not in k.__dict__ for k in cls.__mro__[:-1]))


def create(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    obj = NewObjectValue(cls, {STORAGE: DictValue({})})
    init = cls.__init__
    if isinstance(init, types.FunctionType):
        tx.inline(UserFunctionValue(init), [obj, *args], kwargs)
    else:
        _update(tx, obj, args, kwargs)
    return obj


def storage(obj: NewObjectValue) -> DictValue:
    return obj.attrs[STORAGE]


def merged_items(obj: NewObjectValue) -> dict[Any, Value]:
    """What `dict(obj)` copies: CPython's dict_merge takes a dict's own storage when its type keeps dict's
    `__iter__` (Counter, ModelOutput), else it goes through `keys()` and `__getitem__` (not modelled)."""
    if _overrides(obj, "__iter__"):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"dict() of a {obj.cls.__name__} made while tracing, "
                                                      "which overrides __iter__")
    return dict(storage(obj).items)


def _update(tx, obj: NewObjectValue, args: list[Value], kwargs: dict[str, Value]) -> None:
    from .container_methods import call_container_method
    call_container_method(tx, dict.update, [storage(obj), *args], kwargs)


def _overrides(obj: NewObjectValue, name: str) -> bool:
    """The class defines `name` in Python before reaching dict/OrderedDict in its MRO."""
    for klass in obj.cls.__mro__:
        if klass in _DICT_BASES or klass is object:
            return False
        if name in klass.__dict__:
            return True
    return False


def dunder(tx, obj: NewObjectValue, name: str, args: list[Value]) -> Value | None:
    """`obj.<name>(*args)` for an operator dunder: the class's own Python method inlined, or None to let
    the caller apply dict's behaviour to `storage(obj)`."""
    if _overrides(obj, name):
        return tx.call_method_of(obj, name, args, {})
    return None


# NOTE [__missing__ of dict objects]: dict's `__getitem__` (the `d[k]` of a subclass that does not override
# it, and `dict.__getitem__(d, k)` / `super().__getitem__(k)`) calls `type(d).__missing__(d, k)` for an
# absent key when the class defines one: Counter answers 0, a user's class may build and store a value.
# For an object made while tracing the absence is a fact of the trace and `__missing__` is inlined; for
# one from outside the absence is guarded with its contents (container_methods.call_container_method). The
# lookup of `__missing__` is guarded either way.
def missing_of_new_object(tx, obj: NewObjectValue, key: Value) -> Value | None:
    """`obj[key]` through dict's own `__getitem__` when key is absent and the class has `__missing__`:
    its result; None when dict's own lookup answers (present key, or no `__missing__`)."""
    from . import lookup
    from .comparisons import contains
    lookup.guard_lookup(tx.output, obj.cls, "__missing__")
    if lookup.mro_lookup(obj.cls, "__missing__")[0] is None or contains(tx, key, storage(obj)):
        return None
    return tx.call_special_of(obj, "__missing__", [key], {})


def call_base_method(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """A C method of dict/OrderedDict/object called on a dict object made while tracing."""
    from .container_methods import call_container_method
    from .comparisons import contains
    from .protocol import getitem, iterate, length

    obj, rest = args[0], args[1:]
    name = fn.__name__
    if fn is object.__setattr__:
        obj.attrs[rest[0].as_constant()] = rest[1]
        return ConstantValue(None)
    items = storage(obj)
    if name == "__init__":
        _update(tx, obj, rest, kwargs)
        return ConstantValue(None)
    if name == "__setitem__":  # a generator that reads `obj` and was run ahead breaks (NOTE [Containers grown
        tx.output.side_effects.bump(items)  # while drawing]: `c.update(len(c) + k for k in ...)` of a Counter)
        items.items[rest[0].as_constant()] = rest[1]
        return ConstantValue(None)
    if name == "__getitem__" and len(rest) == 1:
        missing = missing_of_new_object(tx, obj, rest[0])  # NOTE [__missing__ of dict objects]
        if missing is not None:
            return missing
    simple = {"__getitem__": lambda: getitem(tx, items, rest[0]), "__len__": lambda: ConstantValue(length(tx, items)),
              "__contains__": lambda: ConstantValue(contains(tx, rest[0], items)),
              "__iter__": lambda: IteratorValue(iterate(tx, items))}
    if name in simple:  # their arity as dict's (NOTE [Argument errors of container methods])
        from .container_slots import check_dict_arguments
        check_dict_arguments(dict, name, rest, kwargs)
        return simple[name]()
    if name == "copy" and getattr(fn, "__objclass__", None) is not dict:  # OrderedDict.copy: type(self)(self)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__qualname__} on a {obj.cls.__name__} made while tracing")
    if name in ("keys", "values", "items", "get", "update", "pop", "setdefault", "copy", "clear"):
        # NOTE [OrderedDict methods of dict objects]: OrderedDict's own pop/setdefault/keys/... take other
        # arguments (keywords) and name another class in their errors than dict's: the owner is fn's.
        owner = collections.OrderedDict if getattr(fn, "__objclass__", None) is collections.OrderedDict else dict
        return call_container_method(tx, getattr(owner, name), [items, *rest], kwargs)
    if name == "popitem":  # a break, but arguments that do not bind raise the method's own error (not the
        from .container_slots import check_dict_arguments  # bound method's, which names the subclass)
        check_dict_arguments(getattr(fn, "__objclass__", dict), name, rest, kwargs)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__qualname__} on a {obj.cls.__name__} made while tracing")


def is_base_method_call(fn: Any, args: list[Value]) -> bool:
    if not args or not isinstance(args[0], NewObjectValue):
        return False
    if fn is object.__setattr__:
        return True
    return is_new_dict_object(args[0]) and getattr(fn, "__objclass__", None) in _DICT_BASES
