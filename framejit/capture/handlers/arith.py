"""Operators: binary, in-place, unary, comparisons, identity, containment, subscripts and slices."""
from __future__ import annotations

import operator
import types

from ..breaks import BreakKind, Unsupported, UserException
from ..comparisons import compare, contains, is_same
from ..protocol import BINARY_OPS, COMPARE_OPS, binary, build_slice, getitem, iterate, truth, unary
from ..dict_objects import base_slot_owner, dunder, is_new_dict_object, storage, store_item
from ..values import ConstantValue, DictValue, ListValue, TensorValue
from ..values.outside import OutsideDictValue
from ..torch_function_inline import operator_call
from . import op


def _routed(tx, fn, *operands):
    """NOTE [Inlined __torch_function__]: an operator on a tensor whose class has its own __torch_function__."""
    return operator_call(tx, fn, list(operands))


@op("BINARY_OP")
def binary_op(tx, inst):
    b = tx.pop()
    a = tx.pop()
    fn = BINARY_OPS[inst.arg.name]
    tx.push(_routed(tx, fn, a, b) or binary(tx, fn, a, b))


@op("COMPARE_OP")
def compare_op(tx, inst):
    b = tx.pop()
    a = tx.pop()
    fn = COMPARE_OPS[inst.arg.name.replace("_CAST", "")]
    tx.push(_routed(tx, fn, a, b) or compare(tx, fn, a, b))


@op("UNARY_NEGATIVE")
def unary_negative(tx, inst):
    a = tx.pop()
    tx.push(_routed(tx, operator.neg, a) or unary(tx, operator.neg, a))


@op("UNARY_POSITIVE")
def unary_positive(tx, inst):
    a = tx.pop()
    tx.push(_routed(tx, operator.pos, a) or unary(tx, operator.pos, a))


@op("UNARY_INVERT")
def unary_invert(tx, inst):
    a = tx.pop()
    tx.push(_routed(tx, operator.invert, a) or unary(tx, operator.invert, a))


@op("UNARY_NOT")
def unary_not(tx, inst):
    tx.push(ConstantValue(not truth(tx, tx.pop())))


@op("IS_OP")
def is_op(tx, inst):
    b = tx.pop()
    a = tx.pop()
    same = is_same(tx, a, b)
    tx.push(ConstantValue(same != bool(inst.arg)))


@op("CONTAINS_OP")
def contains_op(tx, inst):
    container = tx.pop()
    item = tx.pop()
    found = contains(tx, item, container)
    tx.push(ConstantValue(found != bool(inst.arg)))


@op("BINARY_SUBSCR")
def binary_subscr(tx, inst):
    key = tx.pop()
    obj = tx.pop()
    tx.push(_routed(tx, operator.getitem, obj, key) or getitem(tx, obj, key))


@op("BINARY_SLICE")
def binary_slice(tx, inst):
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    key = build_slice([start, stop])
    tx.push(_routed(tx, operator.getitem, obj, key) or getitem(tx, obj, key))


@op("BUILD_SLICE")
def build_slice_op(tx, inst):
    tx.push(build_slice(tx.popn(inst.arg)))


def _read_only_mapping(obj, what: str) -> None:
    """A mappingproxy refuses writes as CPython does (NOTE [Mappingproxies] in capture/mappings.py)."""
    if isinstance(obj, DictValue) and obj.cls is types.MappingProxyType:
        raise UserException(TypeError(f"'mappingproxy' object does not support item {what}"))


def _store_item(tx, obj, key, value):
    """`obj[key] = value` (also `operator.setitem(obj, key, value)`)."""
    _read_only_mapping(obj, "assignment")
    if is_new_dict_object(obj):  # NOTE [Dict-subclass objects made while tracing]
        if dunder(tx, obj, "__setitem__", [key, value]) is None:  # a generator run ahead that reads obj breaks
            tx.output.side_effects.bump(storage(obj))  # (NOTE [Containers grown while drawing]: Counter.update)
            storage(obj).items[key.as_constant()] = value
        return
    if isinstance(obj, ListValue):
        k = key.as_constant()
        if isinstance(k, slice) and obj.cls is list:
            _store_slice(tx, obj, k, value)
            return
        if type(k) not in (int, bool):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"item assignment into {obj.describe()} at {k!r}")
        if not -len(obj.items) <= k < len(obj.items):
            raise UserException(IndexError("list assignment index out of range"))
        tx.output.side_effects.mutate_container(obj)
        obj.items[k] = value
        tx.output.side_effects.record_op(obj, "__setitem__", (ConstantValue(k), value))
        return
    if isinstance(obj, DictValue):
        from ..identity_keys import dict_key
        from ..values.mappings import key_value
        k = dict_key(tx, key, obj)  # NOTE [Sets of tensors]: tensors are keys by identity
        tx.output.side_effects.mutate_container(obj)
        if isinstance(obj, OutsideDictValue):
            obj.store(k, value)  # NOTE [Dicts from outside]
        else:
            obj.items[k] = value
        tx.output.side_effects.record_op(obj, "__setitem__", (key_value(k, read=False), value))
        return
    if isinstance(obj, TensorValue):  # in-place, like any tensor op (NOTE [Input mutation] in graph.py)
        from ..tensor_operators import check_tensor_dunder  # NOTE [Patched tensor operators]
        check_tensor_dunder(tx, obj, "__setitem__")
        tx.output.call("call_function", operator.setitem, (obj, key, value), {})
        return
    from ..numpy_support import NdarrayValue, setitem
    if isinstance(obj, NdarrayValue):  # NOTE [NumPy as torch]
        setitem(tx, obj, key, value)
        return
    if _python_slot(tx, obj, "__setitem__"):  # a Python class's own __setitem__ (ChainMap, a config object)
        tx.call_special_of(obj, "__setitem__", [key, value], {})
        return
    from ..list_objects import call_list_method, keeps_list_slot
    if keeps_list_slot(tx, obj, "__setitem__"):  # NOTE [List subclasses]
        call_list_method(tx, list.__setitem__, obj, [key, value], {})
        return
    owner = base_slot_owner(tx, obj, "__setitem__")  # NOTE [Dict objects from outside through the protocol]
    if owner is not None:
        store_item(tx, obj, owner, [key, value], {})
        return
    raise Unsupported(BreakKind.SIDE_EFFECT, f"item assignment into {obj.describe()}")


def _python_slot(tx, obj, name: str) -> bool:
    """`obj` is an object whose class defines `name` as a Python function (its lookup guarded)."""
    from ..lookup import guard_lookup
    from ..values import NewObjectValue, NNModuleValue, ObjectValue
    if not isinstance(obj, (ObjectValue, NewObjectValue)) or isinstance(obj, NNModuleValue):
        return False
    cls = obj.python_type()
    if not isinstance(getattr(cls, name, None), types.FunctionType):
        return False
    guard_lookup(tx.output, cls, name)
    return True


def _store_slice(tx, lst: ListValue, k: slice, value) -> None:
    """`lst[k] = value`, logged as that call (NOTE [Mutation log] in side_effects.py)."""
    new = iterate(tx, value)
    changed = list(lst.items)
    try:
        changed[k] = new
    except (ValueError, TypeError) as e:  # an extended slice of another length, a zero step
        raise UserException(e) from None
    tx.output.side_effects.mutate_container(lst)
    lst.items[:] = changed
    tx.output.side_effects.record_op(lst, "__setitem__", (ConstantValue(k), ListValue(new)))


@op("DELETE_SUBSCR")
def delete_subscr(tx, inst):
    key = tx.pop()
    obj = tx.pop()
    delete_item(tx, obj, key)


def delete_item(tx, obj, key) -> None:
    """`del obj[key]` (also `operator.delitem(obj, key)`)."""
    _read_only_mapping(obj, "deletion")
    from ..list_objects import call_list_method, keeps_list_slot
    if isinstance(obj, ListValue) and obj.cls is list:
        k = key.as_constant()
        changed = list(obj.items)
        try:
            del changed[k]
        except (IndexError, TypeError, ValueError) as e:
            raise UserException(e) from None
    elif isinstance(obj, DictValue) and not is_new_dict_object(obj):
        from ..identity_keys import dict_key
        from ..values.mappings import key_value
        k = dict_key(tx, key)
        if k not in obj.items:
            raise UserException(KeyError(key_value(k).as_constant() if key_value(k).is_constant() else k))
    elif _python_slot(tx, obj, "__delitem__"):
        tx.call_special_of(obj, "__delitem__", [key], {})
        return
    elif keeps_list_slot(tx, obj, "__delitem__"):  # NOTE [List subclasses]
        call_list_method(tx, list.__delitem__, obj, [key], {})
        return
    else:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"deleting an item of {obj.describe()}")
    tx.output.side_effects.mutate_container(obj)
    if isinstance(obj, ListValue):
        obj.items[:] = changed
        tx.output.side_effects.record_op(obj, "__delitem__", (ConstantValue(k),))
    else:
        del obj.items[k]
        tx.output.side_effects.record_op(obj, "__delitem__", (key_value(k, read=False),))


@op("STORE_SUBSCR")
def store_subscr(tx, inst):
    key = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    if not (isinstance(obj, TensorValue) and _routed(tx, operator.setitem, obj, key, value)):
        _store_item(tx, obj, key, value)


@op("STORE_SLICE")
def store_slice(tx, inst):
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    key = build_slice([start, stop])
    if not (isinstance(obj, TensorValue) and _routed(tx, operator.setitem, obj, key, value)):
        _store_item(tx, obj, key, value)
