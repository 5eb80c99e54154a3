"""`collections` containers over abstract values: OrderedDict, defaultdict, plain dict subclasses, deque.

Constructors take dict's arguments (a mapping or an iterable of pairs, then keywords); `fromkeys` of
dict, OrderedDict and defaultdict shares one value among all keys, as CPython does. OrderedDict adds
`move_to_end` and `popitem(last=)`; `dict.popitem` takes the last item. A defaultdict read at a missing
key calls its factory and stores the result (a mutation like any other: NOTE [Live dict views] sees it).
A subclass of dict or OrderedDict that defines nothing of its own (no methods, no `__init__`) is a
DictValue of that class, rebuilt as `cls({...})`; any other subclass stays an object (dict_objects.py).
A deque made in the trace is a ListValue of class deque (its methods below; indexing, len, iteration and
`d[i] = v` are a list's); NOTE [Deques with a maxlen].
Handlers register themselves in builtins.BUILTIN_HANDLERS when this module is imported (by builtins).
"""
from __future__ import annotations

import collections
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .builtins import BUILTIN_HANDLERS, _dict, handles
from .container_slots import check_dict_arguments, check_receiver
from .dict_slots import check_dict_write
from .protocol import draws_lazily, grow_while_drawing, iterate
from .values import (BoundMethodValue, BuiltinValue, ConstantValue, DefaultDictValue, DictValue, ListValue,
                     SetValue, TupleValue, Value)

from .mappings_runtime import dict_of_view as _dict_of_view, proxied_dict as _proxied_dict
from .values.containers import bump_deque
from .sources import Ref as _Ref

_DICT_OF_VIEW = _Ref(_dict_of_view, "dict_of_view")
_PROXIED_DICT = _Ref(_proxied_dict, "proxied_dict")
_OD = collections.OrderedDict
_DD = collections.defaultdict
# methods a DictValue of `cls` has beyond CONTAINER_METHODS[dict] (attributes.py)
_EXTRA_METHODS = {dict: ("popitem", "fromkeys"), _OD: ("popitem", "move_to_end", "fromkeys"),
                  _DD: ("popitem", "fromkeys")}
# names a plain subclass may define without changing how its instances behave
_BENIGN = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
           "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__"}


@handles(_OD)
def _ordered_dict(tx, args, kwargs):
    return DictValue(_dict(tx, args, kwargs).items, cls=_OD)


@handles(_DD)
def _defaultdict(tx, args, kwargs):
    factory = args[0] if args else None
    if factory is not None and factory.is_constant() and factory.as_constant() is None:
        factory = None
    if factory is not None and factory.is_constant() and not callable(factory.as_constant()):
        raise UserException(TypeError("first argument must be callable or None"))
    return DefaultDictValue(_dict(tx, args[1:], kwargs).items, factory)


def _fromkeys(cls: type):
    def handler(tx, args, kwargs):
        try:  # NOTE [Argument errors of container methods]: eager's TypeError for arguments that do not bind
            cls.fromkeys(*[()] * len(args), **dict.fromkeys(kwargs))
        except TypeError as e:
            raise UserException(e) from None
        if not args or len(args) > 2 or kwargs.keys() - {"value"}:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.fromkeys with these arguments")
        value = args[1] if len(args) > 1 else kwargs.get("value", ConstantValue(None))
        items = {_key(k): value for k in iterate(tx, args[0])}
        return DefaultDictValue(items, None) if cls is _DD else DictValue(items, cls=cls)
    return handler


for _cls in (dict, _OD, _DD):
    BUILTIN_HANDLERS[_cls.fromkeys] = _fromkeys(_cls)


def _key(v: Value) -> Any:
    if not v.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{v.describe()} as a dict key")
    key = v.as_constant()
    try:
        hash(key)
    except TypeError as e:
        raise UserException(e) from None
    return key


def _mutable(tx, d: Value) -> DictValue:
    if not isinstance(d, DictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a dict method on {d.describe()}")
    tx.output.side_effects.mutate_container(d)
    return d


@handles(dict.popitem)
def _dict_popitem(tx, args, kwargs):
    check_receiver(dict.popitem, args[0])  # NOTE [Receivers of unbound container methods]
    check_dict_arguments(dict, "popitem", args[1:], kwargs)  # NOTE [Argument errors of container methods]
    check_dict_write(dict, "popitem", args[0])  # NOTE [dict's own writes to OrderedDicts]
    return _popitem(tx, args[0], ())


@handles(_OD.popitem)
def _od_popitem(tx, args, kwargs):
    check_receiver(_OD.popitem, args[0])  # NOTE [Receivers of unbound container methods]
    check_dict_arguments(_OD, "popitem", args[1:], kwargs)
    last = (args[1] if len(args) > 1 else kwargs.get("last", ConstantValue(True))).as_constant()
    return _popitem(tx, args[0], (bool(last),))


# NOTE [Reordering calls replayed on OrderedDicts from outside]: an OrderedDict from outside is modelled by
# its linked order only (what it iterates, what its key guard checks); its underlying dict may iterate
# otherwise (a move_to_end made before the call: an LRU cache kept in a global), and dict's own reads of it
# are breaks (dict_slots.py). Its mutations are replayed as the calls the program made (`popitem(False)`,
# `move_to_end(k, last)`, `od[k] = v`, ...: NOTE [Mutation log]) on the real object, whose own methods then
# keep both orders as eager does. Replaying final contents (`clear(); update(...)`) instead rebuilt it with
# the two orders equal: `dict.keys(od)` after the call read the linked order (review revAH HIGH). A call that
# raises mutates nothing and records nothing, so no container is left without its calls.
def _popitem(tx, d: Value, last: tuple) -> Value:
    if isinstance(d, DictValue) and not d.items:
        raise UserException(KeyError("dictionary is empty" if last else "popitem(): dictionary is empty"))
    d = _mutable(tx, d)
    key = next(reversed(d.items)) if not last or last[0] else next(iter(d.items))
    tx.output.side_effects.record_op(d, "popitem", tuple(ConstantValue(a) for a in last))
    from .values.mappings import key_value
    return TupleValue([key_value(key), d.items.pop(key)])


# NOTE [Reordered OrderedDicts made in the trace]: an OrderedDict keeps two orders: its linked list (what it
# iterates) and its underlying dict (what dict's own keys/items/values/__iter__ read). Only move_to_end makes
# them differ. From the first move_to_end on, the DictValue's `items` is a real OrderedDict, reordered by its
# own move_to_end, so both orders are CPython's own through every later insert, delete and popitem; the
# value is rebuilt (codegen._dict, as_constant) by mappings_runtime.make_reordered: the underlying order first,
# then move_to_end in the linked order. dict's own iteration of it stays a break (dict_slots.py), which now
# runs on an exact rebuild (it was rebuilt in its linked order: `dict.keys(od)` came back reordered).
@handles(_OD.move_to_end)
def _move_to_end(tx, args, kwargs):
    check_receiver(_OD.move_to_end, args[0])  # NOTE [Receivers of unbound container methods]
    try:  # move_to_end(key, last=True): eager's TypeError for arguments that do not bind
        _OD.move_to_end(_OD({0: 0}), *[0, True][:len(args) - 1], *[True] * (len(args) - 3), **dict.fromkeys(kwargs))
    except TypeError as e:
        raise UserException(e) from None
    if len(args) < 2:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "OrderedDict.move_to_end with the key by name")
    key = _key(args[1])
    last = (args[2] if len(args) > 2 else kwargs.get("last", ConstantValue(True))).as_constant()
    if isinstance(args[0], DictValue) and key not in args[0].items:
        raise UserException(KeyError(key))
    d = _mutable(tx, args[0])
    if not isinstance(d.items, _OD):  # NOTE [Reordered OrderedDicts made in the trace]
        d.items = _OD(d.items)
    d.items.move_to_end(key, last=bool(last))
    from .values.mappings import key_value  # NOTE [Reordering calls replayed on OrderedDicts from outside]
    tx.output.side_effects.record_op(d, "move_to_end", (key_value(key), ConstantValue(bool(last))))
    d.reordered = True  # its underlying dict keeps the old order: NOTE [Dict slots of subclasses]
    return ConstantValue(None)


def missing_item(tx, d: DictValue, key: Any) -> Value:
    """`d[key]` for a key `d` lacks: a defaultdict with a factory stores and returns `factory()`."""
    if not isinstance(d, DefaultDictValue) or d.factory is None:
        raise UserException(KeyError(key))
    value = tx.call(d.factory, [], {})
    _mutable(tx, d).items[key] = value
    return value


def wrap_view(out, view: Any, source) -> Value:
    """A real dict view read from outside (e.g. passed to a resume function): a live view of its dict,
    which is wrapped (and deduplicated by identity) like any dict read through a source."""
    from .mappings_runtime import VIEW_KINDS
    from .sources import CallSource
    from .values import DictViewValue
    from .values.builder import wrap
    out.guard_type(source, type(view))
    if type(view) in (type({}.keys()), type({}.values()), type({}.items())) and isinstance(_dict_of_view(view), _OD):
        # dict's own view of an OrderedDict iterates its underlying dict (NOTE [Dict slots of subclasses])
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "dict's view of an OrderedDict")
    mapping = wrap(out, _dict_of_view(view), CallSource(_DICT_OF_VIEW, source))
    if not isinstance(mapping, DictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a view of {mapping.describe()}")
    return DictViewValue(mapping, VIEW_KINDS[type(view)])


# NOTE [Mappingproxies]: `types.MappingProxyType(d)` (a module's read-only table, a class `__dict__`, a config
# dict shown read-only) is a live read-only view of `d`. Read from outside it is a MappingProxyValue over the
# value of `d` itself, reached through the proxy (`proxied_dict(p)`, guarded as any dict is) and deduplicated
# by identity with `d` reached any other way (NOTE [Objects by identity] in graph.py): so `CFG["k"] = v;
# RO["k"]` reads v, and `"new" in RO`, `len(RO)` see a key the trace added, as in CPython (a proxy modelled
# as its own dict snapshot read the values from the call's start). Writes raise TypeError as CPython's do
# (handlers/arith.py; the value's class is mappingproxy). Only over a plain dict or OrderedDict: an item read
# of a proxied defaultdict would insert the key (NOTE [defaultdict items in guards]); a proxy over another
# mapping is an object. A proxy made in the frame is a call the trace does not model (a break): the resume
# function reads it as here.
def plain_mappingproxy(obj: Any) -> bool:
    if type(obj) is not types.MappingProxyType:
        return False
    from .mappings_runtime import proxied_dict
    return type(proxied_dict(obj)) in (dict, _OD)


def wrap_mappingproxy(out, proxy: types.MappingProxyType, source) -> Value:
    """A mappingproxy read from outside: a live view of its dict's value (NOTE [Mappingproxies])."""
    from .sources import CallSource
    from .values.builder import wrap
    from .values.mappings import MappingProxyValue
    out.guard_type(source, types.MappingProxyType)
    mapping = wrap(out, _proxied_dict(proxy), CallSource(_PROXIED_DICT, source))
    if not isinstance(mapping, DictValue) or isinstance(mapping, MappingProxyValue):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a mappingproxy of {mapping.describe()}")
    return MappingProxyValue(mapping, source)


def copy_mapping(d: DictValue) -> DictValue:
    """`d.copy()`: an OrderedDict (subclass) copies as its own class, a defaultdict with its factory, a
    mappingproxy as its mapping does, anything else (dict subclasses) as a plain dict, as CPython does."""
    from .values.mappings import MappingProxyValue
    if isinstance(d, MappingProxyValue):  # `proxy.copy()` is its mapping's copy(): an OrderedDict's is one
        return copy_mapping(d.mapping)
    if isinstance(d, DefaultDictValue):
        return DefaultDictValue(dict(d.items), d.factory)
    return DictValue(dict(d.items), cls=d.cls if issubclass(d.cls, _OD) else dict)


# NOTE [Dict union]: `a | b` (PEP 584) with a dict, OrderedDict or defaultdict (or a plain subclass of dict or
# OrderedDict: the slots are inherited) on both sides runs the slot CPython's binary operator picks: the right
# operand's reflected slot first when its type is a subclass of the left's with another slot, else the left's.
# dict's slot makes a plain dict, OrderedDict's a copy of the left operand as the OrderedDict (sub)class, and
# defaultdict's a defaultdict with the factory of its defaultdict operand; each is then updated with the right
# operand, so keys keep the left's positions and take the right's values (Zamba2's `kwargs | {...}` broke the
# graph). A non-dict operand of a type without `|` for dicts is CPython's TypeError; other operands, dict
# subclasses with their own `__or__`/`__ror__` and mappingproxies are left to the other rules (objects: their
# methods are inlined; otherwise a break).
_NO_DICT_OR = (list, tuple, int, float, complex, str, bytes, bool, type(None), set, frozenset)


def union_kind(v: Value) -> type | None:
    """The class whose `|` slot a dict operand has (dict, OrderedDict, defaultdict; None: not modelled). `|=` of
    each is `update` in place."""
    if not isinstance(v, DictValue):
        return None
    cls = v.cls
    if cls is _DD:
        return _DD if isinstance(v, DefaultDictValue) else None
    if cls in (dict, _OD) or is_plain_dict_subclass(cls):
        return _OD if issubclass(cls, _OD) else dict
    return None


def dict_union(tx, a: Value, b: Value) -> Value | None:
    """`a | b` with a dict on either side (NOTE [Dict union]); None: not modelled here."""
    from .values.mappings import MappingProxyValue
    inner = [v.mapping if isinstance(v, MappingProxyValue) else v for v in (a, b)]
    if (inner[0] is not a or inner[1] is not b) and union_kind(inner[0]) and union_kind(inner[1]):
        return dict_union(tx, *inner)  # a mappingproxy's `|` is its mapping's (`proxy | d`, `d | proxy`)
    ka, kb = union_kind(a), union_kind(b)
    if ka is None or kb is None:
        other = b if ka is not None else a if kb is not None else None
        if type(other) in (ConstantValue, ListValue, TupleValue, SetValue) and other.python_type() in _NO_DICT_OR:
            raise UserException(TypeError(f"unsupported operand type(s) for |: '{a.python_type().__name__}' "
                                          f"and '{b.python_type().__name__}'"))
        return None
    reflected = kb is not ka and issubclass(b.cls, a.cls)
    kind = kb if reflected else ka
    if kind is dict:
        new = DictValue(dict(a.items), cls=dict)
    elif kind is _OD:
        new = DictValue(dict(a.items), cls=(a if ka is _OD else b).cls)
    else:
        new = DefaultDictValue(dict(a.items), (a if ka is _DD else b).factory)
    from .container_methods import call_container_method
    call_container_method(tx, dict.update, [new, b], {})
    return new


def mapping_attr(d: DictValue, name: str) -> Value | None:
    """Attributes of a DictValue that dict itself lacks (None: look it up as a dict's)."""
    if name == "default_factory" and isinstance(d, DefaultDictValue):
        return d.factory if d.factory is not None else ConstantValue(None)
    base = _OD if issubclass(d.cls, _OD) else _DD if issubclass(d.cls, _DD) else dict
    if name in _EXTRA_METHODS[base]:
        attr = getattr(base, name)
        return BuiltinValue(attr) if name == "fromkeys" else BoundMethodValue(BuiltinValue(attr), d)
    if base is _OD and name in _OD_OWN:  # NOTE [Methods of OrderedDicts are OrderedDict's]
        return BoundMethodValue(BuiltinValue(getattr(_OD, name)), d)
    return None


# NOTE [Methods of OrderedDicts are OrderedDict's]: `od.update` (pop, setdefault, keys, ...) of an OrderedDict is
# traced as dict's method (container_methods._dict_method), but the bound method must be OrderedDict's own: rebuilt
# at a break (the call then runs as Python, e.g. an update drawing a generator), `dict.update(od, ...)` added the
# keys past OrderedDict's linked order, and `od` iterated without them (review revN HIGH-3: the update was lost).
_OD_OWN = ("keys", "values", "items", "update", "pop", "setdefault", "copy", "clear", "__eq__", "__ne__", "__or__",
          "__ior__", "__iter__")  # the slots: NOTE [Dict slots of subclasses]


def is_plain_dict_subclass(cls: type) -> bool:
    if type(cls) is not type or not issubclass(cls, dict) or cls in (dict, _OD, _DD):
        return False
    for klass in cls.__mro__:
        if klass in (dict, _OD):
            return True
        if klass is _DD or set(vars(klass)) - _BENIGN:
            return False
    return False


def make_dict_subclass(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> DictValue:
    return DictValue(_dict(tx, args, kwargs).items, cls=cls)


__all__ = ["deque_attr", "deque_maxlen", "outside_deque", "dict_union", "union_kind",
           "wrap_view", "copy_mapping", "is_plain_dict_subclass", "make_dict_subclass", "mapping_attr", "missing_item"]


# ---- collections.deque: a list value of class deque (no maxlen) -------------------------------------
_DEQUE = collections.deque
_DEQUE_METHODS = ("append", "appendleft", "extend", "extendleft", "pop", "popleft", "insert", "clear", "copy",
                  "rotate", "reverse", "index", "count", "remove")


# NOTE [Deques with a maxlen]: `collections.deque(maxlen=n)` (a sliding window of recent values) with a
# constant n is a ListValue of class deque carrying `maxlen`: append/extend drop from the left once it is
# full, appendleft/extendleft from the right, insert into a full deque raises IndexError, copy keeps the
# maxlen, all as CPython's deque does; the deque is rebuilt as `deque(items, maxlen)`. A maxlen that is not
# a constant int or None, or the operators `+`, `*`, `+=`, `*=` on a deque with a maxlen, are graph breaks.
def deque_maxlen(value: Value):
    """The maxlen of a deque made in the trace (None for no bound, or for any other value)."""
    return getattr(value, "maxlen", None)


def _new_deque(items: list[Value], maxlen) -> ListValue:
    d = ListValue(items[len(items) - maxlen:] if maxlen is not None and len(items) > maxlen else items, cls=_DEQUE)
    if maxlen is not None:
        d.maxlen = maxlen
    return d


@handles(_DEQUE)
def _deque(tx, args, kwargs):
    if len(args) > 2 or kwargs.keys() - {"maxlen", "iterable"}:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "deque with unexpected arguments")
    maxlen = args[1] if len(args) > 1 else kwargs.get("maxlen", ConstantValue(None))
    if not maxlen.is_constant() or type(maxlen.as_constant()) not in (int, type(None)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"deque with a maxlen {maxlen.describe()}")
    n = maxlen.as_constant()
    if n is not None and n < 0:
        raise UserException(ValueError("maxlen must be non-negative"))
    source = args[0] if args else kwargs.get("iterable")
    return _new_deque(iterate(tx, source) if source is not None else [], n)


# NOTE [Deques from outside]: a deque passed in or held by a module or object (a rolling buffer appended to
# in forward) was an opaque object: each method call and each iteration was a break. It is now a ListValue of
# class deque with its source, guarded by type, length and maxlen, its items wrapped through `d[i]` (tensors
# become graph inputs); the aliasing of NOTE [Objects by identity] covers it like a list. Its mutations are
# replayed after the graph as the same method calls on the real deque (NOTE [Mutation log]; a mutation no call
# names is replayed as clear() + extend(final items)), so the real deque's own maxlen trimming applies.
def outside_deque(out, obj: collections.deque, source) -> ListValue:
    from .sources import AttrSource, ItemSource
    from .values.builder import wrap
    out.guard_type(source, _DEQUE)
    e = source.expr(out.names)
    out.add_guard("LENGTH", f"___len({e}) == {len(obj)}", source, expected=str(len(obj)), actual=f"___len({e})")
    out.guard_constant(AttrSource(source, "maxlen"), obj.maxlen)
    d = _new_deque([wrap(out, item, ItemSource(source, i)) for i, item in enumerate(obj)], obj.maxlen)
    d.source = source
    return d


def deque_attr(d: ListValue, name: str) -> Value:
    if name in _DEQUE_METHODS:
        return BoundMethodValue(BuiltinValue(getattr(_DEQUE, name)), d)
    if name == "maxlen":
        return ConstantValue(deque_maxlen(d))
    if hasattr(_DEQUE, name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"deque.{name}")
    raise UserException(AttributeError(f"'collections.deque' object has no attribute '{name}'"))


def _deque_method(name: str):
    def handler(tx, args, kwargs):
        d, rest = args[0], args[1:]
        if not isinstance(d, ListValue) or d.cls is not _DEQUE or kwargs:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"deque.{name} on {d.describe()}")
        items, maxlen = d.items, deque_maxlen(d)
        if name == "copy":
            return _new_deque(list(items), maxlen)
        if name in ("index", "count", "remove", "rotate", "reverse"):
            return _constant_deque_method(tx, d, name, rest)
        logged = tuple(rest)
        if name in ("extend", "extendleft") and len(rest) == 1 and draws_lazily(rest[0]):
            push = _deque_method("appendleft" if name == "extendleft" else "append")
            grow_while_drawing(tx, rest[0], lambda added: push(tx, [d, *added], {}))  # NOTE [Containers grown
            return ConstantValue(None)  # while drawing]
        if name in ("extend", "extendleft"):
            rest = [*iterate(tx, rest[0])]  # before the mutation: `d.extend(d)` adds the old items
            logged = (TupleValue(list(rest)),)
        if name in ("pop", "popleft"):
            if rest:
                raise UserException(TypeError(f"deque.{name}() takes no arguments ({len(rest)} given)"))
            if not items:
                raise UserException(IndexError(f"{name} from an empty deque"))
            tx.output.side_effects.mutate_container(d)
            tx.output.side_effects.record_op(d, name, ())  # NOTE [Deques from outside]
            bump_deque(d)  # NOTE [Deque iterators]
            return items.pop() if name == "pop" else items.pop(0)
        if name == "insert" and maxlen is not None and len(items) >= maxlen:
            raise UserException(IndexError("deque already at its maximum size"))
        tx.output.side_effects.mutate_container(d)
        if rest if name != "clear" else items:  # NOTE [Deque iterators]: what CPython's counter counts
            bump_deque(d)
        if name == "insert":
            items.insert(rest[0].as_constant(), rest[1])
        elif name == "clear":
            items.clear()
        else:
            for item in rest:  # append(x), appendleft(x), extend(xs), extendleft(xs): one item at a time
                _push(items, item, left=name.endswith("left"), maxlen=maxlen)
        tx.output.side_effects.record_op(d, name, logged)
        return ConstantValue(None)
    return handler


def _push(items: list[Value], item: Value, left: bool, maxlen) -> None:
    """One append (or appendleft) to a deque's items, dropping from the other end when it is full."""
    if maxlen == 0:
        return
    if left:
        items.insert(0, item)
    else:
        items.append(item)
    if maxlen is not None and len(items) > maxlen:
        items.pop(-1 if left else 0)


def _constant_deque_method(tx, d: ListValue, name: str, args: list[Value]) -> Value:
    effects = tx.output.side_effects
    if name in ("rotate", "reverse"):
        real = _DEQUE(range(len(d.items)))  # permute positions, keep the values
        try:
            getattr(real, name)(*(a.as_constant() for a in args))
        except Exception as e:
            raise UserException(e) from None
        effects.mutate_container(d)
        if name == "rotate" and len(d.items) > 1:
            bump_deque(d)  # NOTE [Deque iterators]: even rotate(0); reverse keeps the counter
        d.items[:] = [d.items[i] for i in real]
        effects.record_op(d, name, tuple(args))  # NOTE [Deques from outside]
        return ConstantValue(None)
    if not all(i.is_constant() for i in d.items) or not all(a.is_constant() for a in args):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"deque.{name} over non-constant items")
    before = [i.as_constant() for i in d.items]
    real = _DEQUE(before)
    try:
        result = getattr(real, name)(*(a.as_constant() for a in args))
    except Exception as e:
        raise UserException(e) from None
    if name == "remove":
        effects.mutate_container(d)
        bump_deque(d)  # NOTE [Deque iterators]
    from .folded_results import permuted_like  # the items themselves: a list inside stays the program's list
    d.items[:] = permuted_like(d.items, before, list(real))
    if name == "remove":
        effects.record_op(d, name, tuple(args))
    return ConstantValue(result)


for _name in _DEQUE_METHODS:
    BUILTIN_HANDLERS[getattr(_DEQUE, _name)] = _deque_method(_name)


# NOTE [Dict update sequences]: dict(seq), d.update(seq) and `d |= seq` take each element of a sequence that is not
# a mapping as a (key, value) pair, with CPython's own errors for one that is not: any TypeError making it a
# sequence becomes "cannot convert dictionary update sequence element #i to a sequence" and another length a
# ValueError "dictionary update sequence element #i has length n; 2 is required" (before: `d |= [1]` raised
# "'int' object is not iterable", and `d |= "ab"` an internal ValueError that sent the frame eagerly). CPython
# inserts the pairs before the bad one: the error carries them (`partial_items`), which update() keeps in d.
def update_pairs(tx, src: Value, items: dict[Any, Value]) -> None:
    """Add the (key, value) pairs of the sequence `src` to `items`, as dict's update from a sequence does."""
    from .identity_keys import set_element
    from .process_ids import BUILT
    for i, pair in enumerate(iterate(tx, src)):
        try:
            k, v = _update_pair(tx, pair, i)
            items[set_element(tx, k, BUILT)] = v
        except UserException as e:  # also an unhashable key: CPython kept the pairs before it
            e.partial_items = items
            raise


def _update_pair(tx, pair: Value, i: int) -> list[Value]:
    try:
        parts = iterate(tx, pair)
    except UserException as e:
        if not isinstance(e.exc, TypeError):
            raise
        raise UserException(TypeError(f"cannot convert dictionary update sequence element #{i} to a sequence")) \
            from None
    if len(parts) != 2:
        raise UserException(ValueError(f"dictionary update sequence element #{i} has length {len(parts)}; 2 is "
                                       "required"))
    return parts


def object_mapping_items(tx, value: Value) -> dict[Any, Value] | None:
    """NOTE [Mappings that are objects]: `dict(m)`, `f(**m)` and `{**m}` for a user object `m` (e.g. a
    `collections.abc.MutableMapping` subclass) do what CPython's dict merge does for a non-dict: if `m`
    has a `keys` attribute, iterate `m.keys()` and read `m[k]` for each key, all traced through the
    class's own methods. None when `value` is not such an object (no `keys`: dict() then takes pairs)."""
    from .dict_objects import is_dict_object, is_new_dict_object
    from .identity_keys import dict_key
    from .protocol import getitem
    from .values import NewObjectValue, NNModuleValue, ObjectValue
    if not isinstance(value, (ObjectValue, NewObjectValue)) or isinstance(value, NNModuleValue):
        return None
    if (is_dict_object(value) or is_new_dict_object(value)) and _iterates_as_dict(value):
        return None
    try:
        keys = tx.getattr(value, "keys")
    except UserException as e:
        if isinstance(e.exc, AttributeError):
            return None
        raise
    items: dict[Any, Value] = {}
    for key in iterate(tx, tx.call(keys, [], {})):
        items[dict_key(tx, key)] = getitem(tx, value, key)
    return items


def _iterates_as_dict(value: Value) -> bool:
    """CPython's dict merge reads a dict subclass's storage directly only when the class keeps dict's own
    `__iter__`; one that overrides it (OrderedDict and its subclasses: transformers' ModelOutput in
    `Out(**outputs)`) is merged through `keys()` and `m[k]`, as any mapping (NOTE [Mappings that are objects])."""
    cls = value.python_type() if hasattr(value, "python_type") else type(getattr(value, "obj", None))
    return getattr(cls, "__iter__", None) is dict.__iter__


# NOTE [Counting elements]: `collections.Counter(iterable)` and `Counter.update(iterable)` tally through
# `_collections._count_elements(mapping, iterable)`, a C function (Counter is used in real code: token
# counts in preprocessing, bucket counts). It is traced as the pure-Python version collections itself
# falls back to, which does what the C one does, step for step, for any mapping: `mapping.get(elem, 0)`
# then `mapping[elem] = ... + 1` through the mapping's own (possibly overridden) methods; the C fast path
# for a mapping that overrides neither is the same dict operations.
def _count_elements_py(mapping, iterable):
    mapping_get = mapping.get
    for elem in iterable:
        mapping[elem] = mapping_get(elem, 0) + 1


def _count_elements(tx, args, kwargs):
    from .values import UserFunctionValue
    if len(args) != 2 or kwargs:
        raise UserException(TypeError(f"_count_elements expected 2 arguments, got {len(args) + len(kwargs)}"))
    return tx.inline(UserFunctionValue(_count_elements_py), args, {})


try:
    from _collections import _count_elements as _C_COUNT_ELEMENTS
except ImportError:  # pragma: no cover - collections then uses its Python version, which is traced as it is
    _C_COUNT_ELEMENTS = None
if _C_COUNT_ELEMENTS is not None:
    BUILTIN_HANDLERS[_C_COUNT_ELEMENTS] = _count_elements
