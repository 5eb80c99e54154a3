"""Instances of list subclasses read from outside, seen through list's own methods.

NOTE [List subclasses]: library code subclasses list and keeps list's own methods (transformers'
`StoppingCriteriaList` and `LogitsProcessorList` add only `__call__`, which loops `for c in self`; a
registry adds an attribute or overrides `append`). Such an object from outside is an ObjectValue: its type
is guarded, its attributes read as any object's, and the methods its class defines in Python are inlined
(an overridden `__getitem__`, `__iter__` or `append` runs as the user's code, `super().append(x)` inside it
reaching list's own). What reaches one of list's own methods or slots on it (`o.append(x)` when the class
keeps list's `append`, `list.__len__(o)`, `len(o)`, `o[i]`, `x in o`, `for v in o`, `o[i] = v` when the
class keeps list's slot: the lookup of each name on the class is guarded) works on its contents,
`ListObjectContents`: a list from outside (NOTE [Lists from outside]) whose source is
`raw_list(o)` (`list.copy(o)`, list's own storage past every override), so its length and the items the
trace uses are guarded through that copy. One contents value stands for the object in a trace (keyed by the
object), so every read sees the mutations traced before it. Mutations are recorded on the contents and
replayed on the real object with list's own methods, `list.append(o, v)` (or `list.__setitem__(o,
slice(None), final)`), never through the class: an overridden `append` already ran in the trace and
reached list's own. An iterator over the contents that outlives the graph is list's own iterator over the
object (`list.__iter__(o)` at its position, NOTE [Live iteration]); one from outside over such an object
(a resume function entered inside `for c in self`) steps over the contents. Anything else on such an object
(an ObjectValue without a source, list's `__init__`, a class that overrides the slot) stays what it was: the
class's Python code inlined, or a graph break.
"""
from __future__ import annotations

import operator
import types
from typing import Any

from .breaks import BreakKind, Unsupported
from .sources import CallSource, Ref, Source
from .values import ConstantValue, NewObjectValue, NNModuleValue, ObjectValue, UserFunctionValue, Value
from .values.containers import ListValue
from .values.outside import OutsideListValue


def raw_list(obj: list) -> list:
    """The items a list subclass instance holds in list's own storage, whatever its class overrides."""
    return list.copy(obj)


_RAW_LIST = Ref(raw_list, "raw_list")


def is_list_object(value: Value) -> bool:
    """An instance of a list subclass from outside (an ObjectValue) or made while tracing."""
    if isinstance(value, NewObjectValue):
        return STORAGE in value.attrs
    # the real type, not isinstance(): that reads `__class__` through a Python __getattribute__ (review revO O12)
    return isinstance(value, ObjectValue) and not isinstance(value, NNModuleValue) and \
        issubclass(type(value.obj), list) and type(value.obj) is not list


class ListObjectContents(OutsideListValue):
    """The contents of a list-subclass object from outside (NOTE [List subclasses]); `list_object` is the
    object's value, which the replay and rebuilt iterators address."""

    def __init__(self, out, obj: ObjectValue, source: Source) -> None:
        super().__init__(out, raw_list(obj.obj), source)
        self.list_object = obj


def list_contents(out, obj: Value) -> ListValue:
    """The one contents value of the list object `obj` in this trace (its storage when made while tracing)."""
    if isinstance(obj, NewObjectValue):
        return obj.attrs[STORAGE]
    if obj.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"contents of a {type(obj.obj).__name__} without a source")
    table = out.__dict__.setdefault("list_object_contents", {})
    entry = table.get(id(obj.obj))
    if entry is not None and entry[0] is obj.obj:
        return entry[1]
    contents = ListObjectContents(out, obj, CallSource(_RAW_LIST, obj.source))
    table[id(obj.obj)] = (obj.obj, contents)
    return contents


def keeps_list_slot(tx, obj: Value, name: str) -> bool:
    """`obj` is a list object whose class resolves `name` to list's own entry (the lookup guarded)."""
    if not is_list_object(obj) or getattr(obj, "source", None) is None and not isinstance(obj, NewObjectValue):
        return False
    from . import lookup
    cls = obj.python_type()
    lookup.guard_lookup(tx.output, cls, name)  # found or overridden, the answer is a fact of the trace
    found = lookup.mro_lookup(cls, name)[1]
    return found is not None and found is list.__dict__.get(name)


def call_list_method(tx, fn: Any, obj: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`list.<name>(obj, *args)` for list's own method or slot `fn` on a list object."""
    from .container_methods import call_container_method
    name = fn.__name__
    if name == "__init__":
        return _init(tx, obj, args, kwargs)
    result = call_container_method(tx, fn, [list_contents(tx.output, obj), *args], kwargs)
    if name in ("__iadd__", "__imul__"):
        return obj  # list's in-place operators return the object itself
    return result


_LIST_OPERATORS = {operator.add: "__add__", operator.iadd: "__iadd__", operator.mul: "__mul__",
                   operator.imul: "__imul__"}


def list_binary(tx, fn: Any, a: Value, b: Value) -> Value | None:
    """`a + b`, `a += b`, `a * b`, `a *= b` for a list object `a` whose class keeps list's slot, with a `b` of
    a builtin type (an object could answer first with a reflected method); None otherwise."""
    name = _LIST_OPERATORS.get(fn)
    if name is not None and is_list_object(b) and not isinstance(a, (ObjectValue, NewObjectValue)):
        return _list_right(tx, name, a, b)
    if name is None or isinstance(b, (ObjectValue, NewObjectValue)) or not is_list_object(a):
        return None
    if name.startswith("__i") and not keeps_list_slot(tx, a, name):
        return None  # the class's own in-place method, or none (then `a = a + b`): user_operators
    plain = name.replace("__i", "__", 1)
    if not name.startswith("__i") and not keeps_list_slot(tx, a, plain):
        return None
    return call_list_method(tx, list.__dict__[name], a, [b], {})


def _list_right(tx, name: str, a: Value, b: Value) -> Value | None:
    """NOTE [List objects as right operands]: `[1] + o` and `n * o` with `o` a list object and `a` a plain
    list or an int: CPython calls the class's reflected method first (`__radd__`, which list lacks, or an
    overridden `__rmul__`; the lookup is guarded), then list's concatenation reads `o`'s own storage and
    `n * o` is list's `__rmul__`: both make a plain list of the contents. In-place forms (`lst += o` iterates
    `o` through its class) and other left operands keep the paths above."""
    from . import lookup
    from .container_methods import call_container_method
    cls = b.python_type()
    if name == "__add__" and isinstance(a, ListValue) and a.cls is list:
        lookup.guard_lookup(tx.output, cls, "__radd__")
        if lookup.mro_lookup(cls, "__radd__")[1] is not None:
            return None
        return call_container_method(tx, list.__add__, [a, list_contents(tx.output, b)], {})
    if name == "__mul__" and isinstance(a, ConstantValue) and type(a.value) in (int, bool) and \
            keeps_list_slot(tx, b, "__rmul__"):
        return call_list_method(tx, list.__rmul__, b, [a], {})
    return None


_REFLECTED = {operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"), operator.lt: ("__lt__", "__gt__"),
              operator.le: ("__le__", "__ge__"), operator.gt: ("__gt__", "__lt__"), operator.ge: ("__ge__", "__le__")}


def list_compare(tx, fn: Any, a: Value, b: Value) -> Value | None:
    """`a < b`, `a == b`, ... where one side is a list object and the other a list (or one more list object):
    list's own comparison of the contents when each list object's class keeps list's slot for its side (the
    reflected one for the right-hand side, which CPython tries first for a subclass); None otherwise."""
    names = _REFLECTED.get(fn)
    if names is None or not (is_list_object(a) or is_list_object(b)):
        return None
    sides = []
    for value, name in ((a, names[0]), (b, names[1])):
        if is_list_object(value):
            if not keeps_list_slot(tx, value, name):
                return None
            value = list_contents(tx.output, value)
        elif not (isinstance(value, ListValue) and value.cls is list):
            return None
        sides.append(value)
    from .comparisons import compare
    return compare(tx, fn, *sides)


def iterator_over_object(tx, obj: Value):
    """`iter(obj)` of a list object whose class keeps list's `__iter__`: list's iterator over its contents
    (live: NOTE [Live iteration]); None for any other value."""
    if not keeps_list_slot(tx, obj, "__iter__"):
        return None
    from .values.containers import iterator_over
    contents = list_contents(tx.output, obj)
    return iterator_over(contents, contents.items)


def list_object_iterator_at(obj: list, index: int) -> Any:
    """list's own iterator over the list object `obj`, advanced to `index` (its class's `__iter__` not
    called: the trace stepped list's own)."""
    iterator = list.__iter__(obj)
    iterator.__setstate__(index)
    return iterator


# NOTE [List-subclass objects made while tracing]: `LogitsProcessorList()` and `StoppingCriteriaList()` are
# made inside transformers' `_get_logits_processor` / `_get_stopping_criteria` and filled by `append`: each
# was a break ("creating an instance of LogitsProcessorList"). An instance of a list subclass made in the
# compiled region (can_create: a Python class over list with the default `__new__`, no slots, no `__del__`)
# is a NewObjectValue whose attrs hold, under STORAGE (not an identifier, so no attribute read reaches it),
# a ListValue with the list's own items: `__init__` is inlined when the class defines one, list's own
# `__init__` (reached directly or by `super().__init__(items)`) refills the storage, and list's methods and
# slots work on the storage as for an object from outside (NOTE [List subclasses]). The storage knows its
# object (`list_object`): an iterator over it that outlives the graph is list's iterator over the object.
# `codegen_runtime.new_object` rebuilds the real object: `list.__new__(cls)`, its items through
# `list.extend`, then its `__dict__`. Its `__dict__` and copies of it stay graph breaks, as for dict objects.
STORAGE = "<list items>"


def can_create(cls: type) -> bool:
    """A Python subclass of list with no other C base, no slots, no finalizer and the default `__new__`."""
    heap = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
    from . import lookup
    return (issubclass(cls, list) and cls is not list and type(cls).__call__ is type.__call__
            and cls.__new__ is list.__new__ and bool(cls.__flags__ & heap)
            and all(k in (object, list) or k.__flags__ & heap for k in cls.__mro__)
            and all(k is list or "__slots__" not in k.__dict__ for k in cls.__mro__[:-1])
            and lookup.mro_lookup(cls, "__del__")[0] is None)


def create(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from . import lookup
    lookup.guard_lookup(tx.output, type(cls), "__call__")
    for name in ("__new__", "__init__", "__del__"):
        lookup.guard_lookup(tx.output, cls, name)
    storage = ListValue([])
    obj = NewObjectValue(cls, {STORAGE: storage})
    storage.list_object = obj
    init = cls.__init__
    if isinstance(init, types.FunctionType):
        tx.inline(UserFunctionValue(init), [obj, *args], kwargs)
    else:
        _init(tx, obj, args, kwargs)
    return obj


def _init(tx, obj: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """list's own `__init__`: the list emptied, then filled from the iterable (an object made while tracing
    only: one from outside would be a mutation not logged as a call)."""
    from .protocol import iterate
    if not isinstance(obj, NewObjectValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"list.__init__ on a {obj.python_type().__name__} from outside")
    if kwargs or len(args) > 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"list.__init__ of a {obj.cls.__name__} with these arguments")
    items = iterate(tx, args[0]) if args else []
    storage = obj.attrs[STORAGE]
    storage.items[:] = items
    return ConstantValue(None)
