"""Methods of Python containers (list, tuple, dict, set, frozenset, OrderedDict and plain set subclasses)
called on abstract values: `lst.append(x)`, `d.update(...)`, `s.add(x)`, `list.sort(lst, key=...)`.
Mutations of containers that outlive the frame are recorded for replay (NOTE [Mutation log])."""
from __future__ import annotations

import collections
import types
from typing import Any

from .breaks import BreakKind, Unsupported, UserException
from .builtins import _TracedOrder, _all_const, _consts, _dict, _iter
from .folded_results import permuted_like
from .comparisons import contains
from .container_slots import (call_container_slot, check_dict_arguments, check_method_arguments, check_receiver,
                              is_container_slot)
from .dict_slots import call_subclass_dict_slot, check_dict_write, check_underlying_order, is_subclass_dict_slot
from .protocol import (announce_before_drawing, constant_fold, extend_list, getitem, grow_while_drawing, iterate,
                       length)
from .sym_arith import index as sym_index, symbolic
from .values.objects import ObjectValue
from .values.outside import OutsideDictValue, OutsideSetValue, set_has
from .values import (ConstantValue, DictValue, DictViewValue, ListValue, SequenceValue, SetValue, TensorValue,
                     TupleValue, Value)


# NOTE [Plain set subclasses]: `class S(set): pass` (or of frozenset) adds nothing but a type: its
# instances hash, compare, iterate and answer every method exactly as the base does, and CPython gives
# the *base* type back from operators and methods (`S("ab") | {"c"}` and `S("ab").copy()` are sets). An
# instance made in the frame is modelled as the base's SetValue whose `cls` is the subclass and whose real
# object is an instance of it (the frozen one for a frozenset subclass), so every operation runs on a
# real object of the program's type and layout; results are typed by what CPython returned. A class
# that defines anything beyond the benign names (a method, a class attribute, __slots__) is not plain
# and stays a graph break. Each class between the subclass and its base is guarded to stay plain
# (its own __dict__ keys within the benign names) and the subclass's MRO is guarded, so adding a method
# later recompiles.
# A subclass may also define ordinary methods (names that are not dunders, plain functions): `s.name(...)`
# finds them first and inlines them (attributes.py, guarded lookup), `super().add(x)` and `set.add(s, x)`
# reach the base. Dunders, __init__/__new__ included, stay excluded: operators, `in`, `len`, iteration and
# construction use the base's slots here.
def plain_set_subclass(cls: Any) -> bool:
    if type(cls) is not type or not issubclass(cls, (set, frozenset)) or cls in (set, frozenset):
        return False
    for klass in cls.__mro__:
        if klass in (set, frozenset):
            return True
        if _subclass_methods(klass) is None:
            return False
    return False


def _subclass_methods(klass: type) -> tuple[str, ...] | None:
    """The ordinary methods `klass` defines itself, or None when it defines anything else."""
    from .mappings import _BENIGN
    names = sorted(set(vars(klass)) - _BENIGN)
    if any(n.startswith("__") and n.endswith("__") or not isinstance(vars(klass)[n], types.FunctionType)
           for n in names):
        return None
    return tuple(names)


def make_set_subclass(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> SetValue:
    """`S(iterable)` for a plain set or frozenset subclass S (NOTE [Plain set subclasses])."""
    from . import lookup
    from .identity_keys import set_operand
    from .mappings import _BENIGN
    from .values.mappings import IdentityKey
    if kwargs or len(args) > 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}() with keyword or extra arguments")
    lookup.guard_mro(tx.output, cls)
    for klass in cls.__mro__:
        if klass in (set, frozenset):
            break
        benign = "{" + ", ".join(repr(n) for n in sorted(_BENIGN) + list(_subclass_methods(klass))) + "}"
        source = lookup.class_dict_source(klass)
        expr = source.expr(tx.output.names)
        tx.output.add_guard("CLASS_PLAIN", f"{expr}.keys() <= {benign}", source,
                            expected=f"{klass.__qualname__} defines nothing beyond {benign}", actual=f"set({expr})")
    real = cls(set_operand(tx, args[0])) if args else cls()
    if issubclass(cls, set):
        return SetValue(real, cls=cls, exact=True)
    value = SetValue(set(real), cls=cls, exact=len(real) < 2)
    if not any(isinstance(e, IdentityKey) for e in real):
        value.frozen = real
    return value


def frozen_set_value(real: frozenset) -> SetValue:
    """A frozenset made in the frame: the real one, made as CPython makes it (NOTE [Set order])."""
    from .values.mappings import IdentityKey
    value = SetValue(set(real), cls=frozenset, exact=len(real) < 2)
    if not any(isinstance(e, IdentityKey) for e in real):
        value.frozen = real
    return value


# ---- container methods ---------------------------------------------------------------------------
_CONTAINER_METHOD_OWNERS = (list, dict, tuple, set, frozenset, collections.OrderedDict)


def is_container_method(fn: Any) -> bool:
    return getattr(fn, "__objclass__", None) in _CONTAINER_METHOD_OWNERS


def call_container_method(tx, fn: Any, args: list[Value], kwargs: dict[str, Value], explicit: bool = False) -> Value:
    """`fn(*args, **kwargs)`; `explicit`: the program's own call (not one the translator makes for an operator)."""
    from .dict_objects import dict_contents, is_dict_object, own_missing, store_item
    from .list_objects import call_list_method, is_list_object
    owner, name = fn.__objclass__, fn.__name__
    self_value, rest = args[0], args[1:]
    check_receiver(fn, self_value, explicit)  # NOTE [Receivers of unbound container methods]
    if owner is list and is_list_object(self_value):  # NOTE [List subclasses]
        return call_list_method(tx, fn, self_value, rest, kwargs)
    if is_container_slot(owner, name, self_value):  # NOTE [Container slots called as methods]
        return call_container_slot(tx, owner, name, self_value, rest, kwargs)
    if is_subclass_dict_slot(owner, name, self_value):  # NOTE [Dict slots of subclasses]
        return call_subclass_dict_slot(tx, owner, name, self_value, rest, kwargs)
    check_underlying_order(owner, name, self_value)
    if owner in (list, tuple):  # NOTE [Argument errors of container methods]
        check_method_arguments(owner, name, rest, kwargs)
    if owner in (dict, collections.OrderedDict):
        check_dict_arguments(owner, name, rest, kwargs)
    if explicit:  # (after eager's TypeError for arguments that do not bind)
        check_dict_write(owner, name, self_value)  # NOTE [dict's own writes to OrderedDicts]
    if owner in (dict, collections.OrderedDict) and is_dict_object(self_value) and name == "__setitem__":
        return store_item(tx, self_value, owner, rest, kwargs)  # NOTE [Item stores into dict objects from outside]
    if owner in (dict, collections.OrderedDict) and is_dict_object(self_value):
        missing = name == "__getitem__" and own_missing(tx, self_value)
        self_value = dict_contents(tx, self_value, name, owner)  # NOTE [Dict subclasses]
        if missing:
            try:
                return _dict_method(tx, self_value, name, rest, kwargs)
            except UserException as e:  # NOTE [__missing__ of dict objects]: absent (guarded with the contents)
                if not isinstance(e.exc, KeyError) or len(rest) != 1 or kwargs:
                    raise
                return tx.call_special_of(args[0], "__missing__", [rest[0]], {})
    if owner in (set, frozenset):
        return _set_method(tx, self_value, name, rest, kwargs)
    if owner in (dict, collections.OrderedDict):
        return _dict_method(tx, self_value, name, rest, kwargs)
    if type(self_value).__name__ == "OpaqueSequenceValue":  # NOTE [Bound methods of sequences of changing
        # length] in carried_loops.py: any use of it is a break, the call runs as Python
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} of a sequence of changing length")
    if isinstance(self_value, ObjectValue):  # an instance of a list subclass kept as an object
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{owner.__name__}.{name} called on a "
                          f"{self_value.python_type().__name__} object")
    if not isinstance(self_value, ListValue) or name in ("index", "count", "copy"):
        return _sequence_method(tx, self_value, name, rest, kwargs)
    if name in ("append", "extend") and not kwargs and len(rest) == 1:
        def add(added: list[Value]) -> None:
            tx.output.side_effects.mutate_container(self_value)
            extend_list(self_value, added)  # NOTE [Lists from outside]: the list itself is not read
            tx.output.side_effects.record_op(self_value, name, (rest[0],) if name == "append" else
                                             (TupleValue(added),))
        if name == "append":
            add([rest[0]])
        else:
            grow_while_drawing(tx, rest[0], add)  # NOTE [Containers grown while drawing]
        return ConstantValue(None)
    tx.output.side_effects.mutate_container(self_value)
    before = len(self_value.items)
    result = _sequence_method(tx, self_value, name, rest, kwargs)
    _record_list_op(tx, self_value, name, rest, before)
    return result


def _record_list_op(tx, lst: ListValue, name: str, args: list[Value], before: int) -> None:
    """Name the list mutation just traced for the replay (NOTE [Mutation log] in side_effects.py)."""
    if name == "extend":
        args = [TupleValue(lst.items[before:])]  # the items it added, as they were iterated
    elif name == "pop":
        args = [ConstantValue(args[0].as_constant() if args else -1)]
    elif name == "insert":
        args = [ConstantValue(args[0].as_constant()), args[1]]
    elif name == "sort":  # replayed as the list it made, in program order: `lst[:] = [...]`
        name, args = "__setitem__", [ConstantValue(slice(None)), ListValue(list(lst.items))]
    elif name not in ("append", "remove", "clear", "reverse"):
        return
    tx.output.side_effects.record_op(lst, name, tuple(args))


_SEQUENCE_METHODS = ("append", "extend", "insert", "pop", "reverse", "clear", "copy", "sort", "index", "count",
                     "remove")


def _sequence_method(tx, seq: SequenceValue, name: str, args: list[Value], kwargs) -> Value:
    if name not in _SEQUENCE_METHODS:  # `list.__len__(l)`, `tuple.__add__(t, u)`, a slot bound from outside:
        # not modelled here (they answered None): a break, the call runs as Python
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{seq.python_type().__name__}.{name} called as a method")
    items = seq.items
    if name == "append":
        items.append(args[0])
    elif name == "extend":
        items.extend(iterate(tx, args[0]))
    elif name in ("insert", "pop"):
        return _insert_or_pop(items, name, args)
    elif name == "reverse":
        items.reverse()
    elif name == "clear":
        items.clear()
    elif name == "copy":
        return ListValue(list(items))
    elif name == "sort" and isinstance(seq, ListValue) and not (kwargs.get("key") or ConstantValue(None)).is_constant():
        _sort_with_key(tx, seq, args, kwargs)
    elif name == "sort" and isinstance(seq, ListValue) and not args and not kwargs.keys() - {"key", "reverse"} \
            and (not seq.is_constant() or symbolic(seq)) and not any(isinstance(i, TensorValue) for i in seq.items):
        _sort_traced(tx, seq, list(seq.items), list(seq.items), kwargs)  # NOTE [Sorting by traced comparisons]
    elif name in ("index", "count", "remove", "sort"):
        kept = sym_index(tx, seq, args, kwargs) if name == "index" else None  # NOTE [Sorting by symbolic keys]
        return kept or _constant_sequence_method(tx, seq, name, args, kwargs)
    return ConstantValue(None)


def _insert_or_pop(items: list[Value], name: str, args: list[Value]) -> Value:
    """The same operation on the trace's items raises what CPython raises on the list (NOTE [Argument errors of
    container methods]): an index out of range, an index that is no integer."""
    try:
        if name == "insert":
            items.insert(args[0].as_constant(), args[1])
            return ConstantValue(None)
        if not items:
            raise UserException(IndexError("pop from empty list"))
        return items.pop(args[0].as_constant() if args else -1)
    except (IndexError, TypeError) as e:
        raise UserException(e) from None


def _sort_with_key(tx, lst: ListValue, args: list[Value], kwargs: dict[str, Value]) -> None:
    """`lst.sort(key=f)` as CPython does it: the list is empty while `f` is called on each item in order
    (code in `f` sees `[]`), then it holds the items ordered by their (constant) keys, stably."""
    if args or kwargs.keys() - {"key", "reverse"}:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "list.sort() with positional or unknown arguments")
    saved = list(lst.items)
    lst.items.clear()
    try:
        keys = [tx.call(kwargs["key"], [item], {}) for item in saved]
    finally:
        modified = bool(lst.items)
        lst.items[:] = saved  # as CPython leaves it when a key call raises
    if modified:
        raise Unsupported(BreakKind.SIDE_EFFECT, "the list was modified by its sort() key function")
    if not all(k.is_constant() and not symbolic(k) for k in keys):  # NOTE [Sorting by symbolic keys]
        _sort_traced(tx, lst, saved, keys, kwargs)  # NOTE [Sorting by traced comparisons]
        return
    reverse = bool(kwargs.get("reverse", ConstantValue(False)).as_constant())
    try:
        order = sorted(range(len(saved)), key=lambda i: keys[i].as_constant(), reverse=reverse)
    except TypeError as e:
        raise UserException(e) from None
    lst.items[:] = [saved[i] for i in order]


def _sort_traced(tx, lst: ListValue, saved: list[Value], keys: list[Value], kwargs: dict[str, Value]) -> None:
    """`lst.sort()` ordered by traced comparisons of `keys` (NOTE [Sorting by traced comparisons]). CPython
    empties the list while it compares, so code in `__lt__` sees `[]`; a comparison that raises leaves the
    list in a state CPython does not define: that is a graph break (the sort then runs in Python)."""
    reverse = bool(kwargs.get("reverse", ConstantValue(False)).as_constant())
    lst.items.clear()
    try:
        order = sorted(range(len(saved)), key=lambda i: _TracedOrder(tx, keys[i]), reverse=reverse)
    except UserException as e:
        raise Unsupported(BreakKind.EXCEPTION_RAISED, f"a comparison in list.sort() raises "
                          f"{type(e.exc).__name__}: the sort runs in Python") from None
    finally:
        modified = bool(lst.items)
        lst.items[:] = saved
    if modified:
        raise Unsupported(BreakKind.SIDE_EFFECT, "the list was modified while it was sorted")
    lst.items[:] = [saved[i] for i in order]


def _constant_sequence_method(tx, seq: SequenceValue, name: str, args, kwargs) -> Value:
    if not seq.is_constant() or not _all_const(args, kwargs):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name}() over non-constant items")
    values = list(seq.as_constant())
    before = list(values)
    result = constant_fold(getattr(list, name), values, *_consts(args), **{k: v.as_constant() for k, v in kwargs.items()})
    if name in ("remove", "sort"):  # the items themselves, reordered: a list inside stays the program's list
        seq.items[:] = permuted_like(seq.items, before, values)  # NOTE [Mutable results of folded calls]
    return result


_SET_MUTATORS = {"add", "update", "discard", "remove", "clear", "pop", "difference_update", "intersection_update",
                 "symmetric_difference_update"}


# how many arguments the set mutators that take a fixed number accept
_SET_ARITY = {"add": 1, "discard": 1, "remove": 1, "pop": 0, "clear": 0, "symmetric_difference_update": 1}
# methods that take an element (hashed), not an iterable; methods whose answer is not a set
_SET_ELEMENT_METHODS = ("add", "discard", "remove", "__contains__")
_SET_ANSWERS = ("isdisjoint", "issubset", "issuperset", "__contains__", "__len__", "__eq__", "__ne__", "__lt__",
                "__le__", "__gt__", "__ge__")


def _set_method(tx, s: Value, name: str, args: list[Value], kwargs) -> Value:
    """Set methods over sets of constants: evaluated on the real Python set the value holds."""
    from .identity_keys import known_layout, set_element, set_lookup_element, set_operand
    if not isinstance(s, SetValue) or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"set.{name} on {s.describe()}")
    if len(args) != _SET_ARITY.get(name, len(args)) and issubclass(s.cls, set):
        try:  # CPython checks the count first, before reading any argument or changing the set
            getattr(set, name)(s.cls(), *[None] * len(args))  # the descriptor names `set.name` as eager does
        except TypeError as e:
            raise UserException(e) from None
        raise Unsupported(BreakKind.INTERNAL_ERROR, f"set.{name} accepted {len(args)} arguments")
    if name == "isdisjoint" and len(args) == 1 and _is_iterator(args[0]):  # NOTE [isdisjoint over an iterator]
        return _isdisjoint_by_iteration(tx, s, args[0])
    if name == "copy" and not args and s.cls is frozenset:
        return s  # CPython's frozenset_copy: an exact frozenset is its own copy (`p.copy() is p`), a subclass's is new
    mutates = name in _SET_MUTATORS
    if mutates:
        announce_before_drawing(tx, s, args)  # NOTE [Containers grown while drawing]
    # isdisjoint/issubset/issuperset answer a bool: the operands' elements suffice, not their layout
    consts = [set_operand(tx, a, strict=False) if name not in _SET_ELEMENT_METHODS else set_element(tx, a, s)
              if name == "add" else set_lookup_element(tx, a, s) for a in args]  # NOTE [Set order]: as CPython gets them
    if name == "remove" and isinstance(args[0], SetValue) and issubclass(args[0].cls, set) and \
            not set_has(s, consts[0]):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "set.remove of a set it does not hold (NOTE [Sets looked up "
                                                      "as frozensets])")
    if mutates and not all(known_layout(a) for a in args if isinstance(a, SetValue)):
        from .set_replay import unknown_operand_layout  # NOTE [Set operands in the replay]
        unknown_operand_layout(s, args)
        s.exact = False  # its elements are right, its order is not known any more
    if name == "pop" and len(s.items) > 1 and not s.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "set.pop() of a set of tensors (its order follows addresses)")
    if name in _SET_MUTATORS:
        return _mutate_set(tx, s, name, consts)
    receiver = s.frozen if s.frozen is not None else s.items
    try:
        # through the base's descriptor: the real object may be of a subclass with its own methods
        result = getattr(set if isinstance(receiver, set) else frozenset, name)(receiver, *consts)
    except Exception as e:
        raise UserException(e) from None
    if isinstance(result, (set, frozenset)):
        if not known_layout(s) or not all(known_layout(a) for a in args if isinstance(a, SetValue)):
            from .set_tables import unknown_layout  # NOTE [Set results of unknown layout]
            return unknown_layout(result)
        return frozen_set_value(result) if type(result) is frozenset else SetValue(result, cls=set, exact=True)
    return ConstantValue(result)


def _is_iterator(v: Value) -> bool:
    from .carried_loops import CarriedIteratorValue
    from .values.containers import IteratorValue
    return isinstance(v, (IteratorValue, CarriedIteratorValue))


def _isdisjoint_by_iteration(tx, s: SetValue, other: Value) -> Value:
    from .sequence_protocol import isdisjoint_by_iteration
    from .values import BuiltinValue, UserFunctionValue
    looped = getattr(other, "looped", None)  # as NOTE [Membership in iterators]: no for loop of the user's
    contains = BuiltinValue(set.__contains__ if issubclass(s.cls, set) else frozenset.__contains__)
    result = tx.inline(UserFunctionValue(isdisjoint_by_iteration), [s, other, contains], {})
    if looped is not None:
        other.looped = looped
    return result


_SET_DELETIONS = ("discard", "remove", "pop", "difference_update", "intersection_update", "symmetric_difference_update")


def _mutate_set(tx, s: SetValue, name: str, consts: list) -> Value:
    """`s.name(*consts)` in place, logged for the replay when `s` came from outside (NOTE [Mutation log])."""
    from .values.mappings import key_value
    if not issubclass(s.cls, set):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"set.{name} on a {s.cls.__name__}")
    from .identity_keys import is_function_element
    if name == "pop" and any(is_function_element(k) for k in s.items):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "set.pop() of a set of functions")  # NOTE [Sets of functions from outside]
    if name == "pop" and s.source is not None and len(s.items) > 1:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"set.pop() of {s.source.describe()} (the element it removes "
                                                 "follows the layout of the real set)")
    if name == "pop" and len(s.items) > 1 and not s.exact:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"set.pop() of {s.describe()}, whose hash-table layout the "
                                                       "trace cannot reproduce")  # NOTE [Set order]
    if name == "remove" and not set_has(s, consts[0]) or name == "pop" and not s.items:
        raise UserException(KeyError(consts[0]) if name == "remove" else KeyError("pop from an empty set"))
    from .set_replay import replay_operand  # NOTE [Set operands in the replay]
    replay = tuple(key_value(c) if name in ("add", "discard", "remove") else replay_operand(s, c, not s.items)
                   for c in consts)
    tx.output.side_effects.mutate_container(s)
    if isinstance(s, OutsideSetValue) and name in ("add", "discard", "remove"):
        s.change(consts[0], name == "add")  # NOTE [Sets from outside]: the set itself is not read
        result = None
    else:
        if name == "pop":
            from .hash_order import note_order
            note_order(tx.output, s.items)  # NOTE [Hash-seeded facts]
        result = getattr(set, name)(s.items, *consts)  # NOTE [Set order]: the same call on the same layout
        s.deleted = name != "clear" and (name in _SET_DELETIONS or getattr(s, "deleted", False))
    tx.output.side_effects.record_op(s, name, replay)
    return key_value(result) if name == "pop" else ConstantValue(None)


def _keep_partial(d: DictValue, partial: dict | None, log) -> None:
    """The pairs an update stored before its bad one (none: an empty update, so the call is still logged:
    NOTE [Reordering calls replayed on OrderedDicts from outside] in mappings.py)."""
    d.items.update(partial or {})
    log(d, "update", (DictValue(dict(partial or {})),))


# NOTE [Calls that raise announce nothing]: pop and setdefault announce their mutation only once the key
# is hashable and (pop without a default) present: an announcement left without its call (a caught
# `od.pop("zz")`, `od.setdefault([1])`) made the replay rewrite the whole container (`clear(); update()`),
# which reorders an OrderedDict from outside whose dict order differs from its own (review revAJ MED-1).
def _dict_method(tx, d: DictValue, name: str, args: list[Value], kwargs) -> Value:
    if not isinstance(d, DictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"dict.{name} on {d.describe()}")
    if name == "update":
        announce_before_drawing(tx, d, args)  # NOTE [Containers grown while drawing]
    if name in ("update", "clear"):
        tx.output.side_effects.mutate_container(d)
    if name in ("keys", "values", "items"):
        return DictViewValue(d, name)  # NOTE [Live dict views]
    from .identity_keys import dict_key
    if name == "get":
        key = dict_key(tx, args[0], d)
        default = args[1] if len(args) > 1 else ConstantValue(None)
        if isinstance(d, OutsideDictValue):  # NOTE [Dicts from outside]
            found = d.lookup(key)
            return default if found is None else found
        return d.items.get(key, default)
    log = tx.output.side_effects.record_op  # NOTE [Mutation log] in side_effects.py
    if name == "update":
        try:
            added = dict(_dict(tx, [args[0]], {}).items) if args else {}
        except UserException as e:  # NOTE [Dict update sequences]: the pairs before the bad one stay
            _keep_partial(d, getattr(e, "partial_items", None), log)
            raise
        added.update(kwargs)
        d.items.update(added)
        log(d, "update", (DictValue(added),))
        return ConstantValue(None)
    if name == "pop":
        key = dict_key(tx, args[0], d)
        if key not in d.items and len(args) < 2:
            raise UserException(KeyError(key))
        tx.output.side_effects.mutate_container(d)
        if key in d.items:
            log(d, "pop", (ConstantValue(key),))
            return d.items.pop(key)
        log(d, "pop", (ConstantValue(key), args[1]))
        return args[1]
    if name == "setdefault":
        key = dict_key(tx, args[0], d)
        default = args[1] if len(args) > 1 else ConstantValue(None)
        tx.output.side_effects.mutate_container(d)
        log(d, "setdefault", (ConstantValue(key), default))
        return d.items.setdefault(key, default)
    if name == "copy":
        from .mappings import copy_mapping
        return copy_mapping(d)
    if name == "clear":
        d.items.clear()
        log(d, "clear")
        return ConstantValue(None)
    if name == "__getitem__" and len(args) == 1:  # `dict.__getitem__(d, k)`, `super().__getitem__(k)`
        return getitem(tx, d, args[0])
    if name == "__contains__" and len(args) == 1:
        return ConstantValue(contains(tx, args[0], d))
    if name == "__len__" and not args:
        return ConstantValue(length(tx, d))
    if name == "__iter__" and not args:
        return _iter(tx, [d], {})
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"dict.{name}")
