"""Building containers and strings, and unpacking them."""
from __future__ import annotations

from ..breaks import BreakKind, Unsupported, UserException
from ..lazy_generators import drain_whole
from ..protocol import iterate
from ..values import ConstantValue, DictValue, ListValue, SetValue, TupleValue
from . import op


@op("BUILD_TUPLE")
def build_tuple(tx, inst):
    tx.push(TupleValue(tx.popn(inst.arg)))


@op("BUILD_LIST")
def build_list(tx, inst):
    tx.push(ListValue(tx.popn(inst.arg)))


@op("LIST_TO_TUPLE")
def list_to_tuple(tx, inst):
    tx.push(TupleValue(list(tx.pop().items)))


# NOTE [Building into a container from outside]: LIST_APPEND, LIST_EXTEND, MAP_ADD, SET_ADD, SET_UPDATE,
# DICT_UPDATE and DICT_MERGE write into the container being built below them on the stack, which is made
# by BUILD_LIST/BUILD_MAP/BUILD_SET in the same frame, except in a resume function: a break inside a
# comprehension (or between the parts of `[*a, f(), *b]`) passes the half-built container to the resume
# function as a stack argument, a real object from outside. Writing only into the abstract items then
# lost every item added in the resume function (`[e for e in zip(range(n), it)]` whose steps run as
# Python returned `[]`, heapq.nlargest's result). Such a target gets the same write as a method call on
# it (`list.append`, `d[k] = v`, `set.add`, ...), which is recorded and replayed as a side effect.
def _from_outside(target) -> bool:
    return getattr(target, "source", None) is not None


def _call_on(tx, method, target, *args) -> None:
    from ..container_methods import call_container_method
    call_container_method(tx, method, [target, *args], {})


@op("LIST_APPEND")
def list_append(tx, inst):
    value = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _call_on(tx, list.append, target, value)
        return
    target.items.append(value)


@op("LIST_EXTEND")
def list_extend(tx, inst):
    iterable = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _call_on(tx, list.extend, target, iterable)
        return
    target.items.extend(drain_whole(tx, iterable))  # NOTE [Generators with finalizers traced lazily]


@op("BUILD_MAP")
def build_map(tx, inst):
    from ..identity_keys import set_element  # a dict being built: NOTE [Hook ids that never leave the trace]
    from ..process_ids import BUILT
    flat = tx.popn(2 * inst.arg)
    tx.push(DictValue({set_element(tx, flat[i], BUILT): flat[i + 1] for i in range(0, len(flat), 2)}))


@op("BUILD_CONST_KEY_MAP")
def build_const_key_map(tx, inst):
    keys = tx.pop().as_constant()
    values = tx.popn(inst.arg)
    tx.push(DictValue(dict(zip(keys, values))))


@op("MAP_ADD")
def map_add(tx, inst):
    from ..identity_keys import set_element
    value = tx.pop()
    key = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        from .arith import _store_item
        _store_item(tx, target, key, value)  # `target[key] = value`, as STORE_SUBSCR does it
        return
    target.items[set_element(tx, key, target)] = value


@op("DICT_UPDATE")
def dict_update(tx, inst):
    other = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _call_on(tx, dict.update, target, DictValue(_as_items(tx, other)))
        return
    target.items.update(_as_items(tx, other))


@op("DICT_MERGE")
def dict_merge(tx, inst):
    other = tx.pop()
    target = tx.peek(inst.arg)
    items = _as_items(tx, other)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _merge_into_outside(tx, target, items)  # (was a break no resume function can take: it ran eagerly)
        return
    duplicate = next((k for k in items if k in target.items), None)
    if duplicate is not None:
        raise UserException(TypeError(f"got multiple values for keyword argument '{duplicate}'"))
    target.items.update(items)


def _merge_into_outside(tx, target, items: dict) -> None:
    """DICT_MERGE (`f(**a, **b)`) into the keyword dict a resume function got from its caller: CPython's
    duplicate-key TypeError, else `dict.update` of the target (recorded and replayed)."""
    from ..comparisons import contains
    from ..values.mappings import key_value
    for key in items:
        if contains(tx, key_value(key), target):
            raise UserException(TypeError(f"got multiple values for keyword argument '{key}'"))
    _call_on(tx, dict.update, target, DictValue(items))


def _as_items(tx, value) -> dict:
    if isinstance(value, DictValue):
        return dict(value.items)
    from ..mappings import object_mapping_items
    items = object_mapping_items(tx, value)  # NOTE [Mappings that are objects]
    if items is not None:
        return items
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"** of {value.describe()}")


@op("BUILD_STRING")
def build_string(tx, inst):
    parts = tx.popn(inst.arg)
    tx.push(ConstantValue("".join(p.as_constant() for p in parts)))


@op("FORMAT_VALUE")
def format_value(tx, inst):
    flags = inst.arg if isinstance(inst.arg, int) else int(inst.arg[0]) | (4 if inst.arg[1] else 0)
    spec = tx.pop().as_constant() if flags & 0x04 else ""
    value = tx.pop()
    from ..object_str import is_user_object, user_format
    if is_user_object(value, tx, "__format__", "__str__", "__repr__"):  # NOTE [Strings of user objects]
        tx.push(user_format(tx, value, flags & 0x03, spec))
        return
    if not value.is_constant():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"formatting {value.describe()} into a string")
    from ..carried_loops import check_dynamic_format
    check_dynamic_format(tx, value)  # NOTE [Dynamic ints formatted into strings]
    v = value.as_constant()
    conversion = flags & 0x03
    from ..hash_order import note_constants
    note_constants(tx.output, [v])  # NOTE [Hash-seeded facts]
    v = {0: lambda x: x, 1: str, 2: repr, 3: ascii}[conversion](v)
    try:
        tx.push(ConstantValue(format(v, spec)))
    except Exception as e:
        raise UserException(e) from None


@op("UNPACK_SEQUENCE")
def unpack_sequence(tx, inst):
    items = iterate(tx, tx.pop())
    if len(items) != inst.arg:  # CPython's message differs by version and kind of iterable, and it stops
        # reading an iterator at the first item too many: it raises for real, as Python
        raise Unsupported(BreakKind.EXCEPTION_RAISED, f"unpacking {len(items)} values into {inst.arg}")
    for item in reversed(items):
        tx.push(item)


@op("UNPACK_EX")
def unpack_ex(tx, inst):
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = iterate(tx, tx.pop())
    if len(items) < before + after:
        raise UserException(ValueError(f"not enough values to unpack (expected at least {before + after}, got {len(items)})"))
    middle = ListValue(items[before:len(items) - after])
    for item in reversed(items[len(items) - after:]):
        tx.push(item)
    tx.push(middle)
    for item in reversed(items[:before]):
        tx.push(item)


@op("BUILD_SET")
def build_set(tx, inst):
    from ..identity_keys import set_element
    tx.push(SetValue({set_element(tx, v) for v in tx.popn(inst.arg)}, exact=True))  # NOTE [Set order]


@op("SET_ADD")
def set_add(tx, inst):
    from ..identity_keys import set_element
    value = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _call_on(tx, set.add, target, value)
        return
    target.items.add(set_element(tx, value, target))


@op("SET_UPDATE")
def set_update(tx, inst):
    from ..identity_keys import set_element
    iterable = tx.pop()
    target = tx.peek(inst.arg)
    if _from_outside(target):  # NOTE [Building into a container from outside]
        _call_on(tx, set.update, target, iterable)
        return
    # NOTE [Set order]: CPython merges a set's table (`{"a", "b", "c"}` is BUILD_SET 0 and SET_UPDATE of a
    # frozenset constant): the same merge from the same layout keeps the program's order
    if isinstance(iterable, ConstantValue) and type(iterable.value) in (set, frozenset):
        target.items.update(iterable.value)
        return
    if isinstance(iterable, SetValue):  # a frozenset's own table (its `items` is a copy: NOTE [Set order])
        target.exact = target.exact and (iterable.exact or iterable.frozen is not None)
        target.items.update(iterable.frozen if iterable.frozen is not None else iterable.items)
        return
    target.exact = target.exact and not isinstance(iterable, DictValue)
    target.items.update(set_element(tx, v, target) for v in iterate(tx, iterable))
