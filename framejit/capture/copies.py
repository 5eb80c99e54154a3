"""`copy.deepcopy` / `copy.copy` of plain Python data, made while tracing.

NOTE [Copies of plain objects]: library code copies configuration objects on the forward path
(transformers' `get_text_config` deep-copies an encoder-decoder config). For a plain object (a Python
class with the default `__new__`, `__reduce_ex__`, no `__deepcopy__`/`__copy__`/`__getstate__`/
`__setstate__` and no slots), `copy.deepcopy` is `cls.__new__(cls)` plus a deep copy of its `__dict__`:
so the copy is a NewObjectValue whose attributes are copies of the original's, read through
`obj.__dict__` (its keys and each value read are guarded). Containers are copied into new containers,
immutable constants, functions and classes are shared (as deepcopy does); plain tensors are copied as
NOTE [Deep copies of tensors] says; modules and any other object are not modelled (a graph break). Copies
share what the original shares only per value object (the memo is keyed by abstract value).

NOTE [Deep copies of tensors]: `Tensor.__deepcopy__` of a plain strided tensor copies its whole storage
(deduplicated through the memo: two tensors on one storage get one new storage), then views it with the
original's offset, sizes and strides, and copies `.grad` and the tensor's `__dict__`; a non-leaf raises.
That is one `clone()` in the graph exactly when nothing of that is observable otherwise: a plain
`torch.Tensor` (no subclass, no conj/neg bit, strided, not quantized) that does not require grad, is
contiguous with offset 0 and spans its whole storage (so the clone has the same offset, strides and
storage size), and no other tensor of the same copy shares its storage (fake storages compared for tensors
made here; inputs checked now and guarded apart with `___storage_apart`). An input tensor must also have
no `.grad` and no Python attributes, both guarded. Anything else is a graph break at the deepcopy call;
the call then runs as plain Python, not through the frame hook (NOTE [Modelled functions at breaks]).
"""
from __future__ import annotations

import collections
import copy
from typing import Any, Callable

import torch

from .breaks import BreakKind, Unsupported
from .sources import AttrSource
from .values import (BuiltinValue, ClassValue, ConstantValue, DictValue, ListValue, NewObjectValue, NNModuleValue,
                     ObjectValue, PyModuleValue, SetValue, SymFloatValue, SymNodeValue, TensorValue, TupleValue,
                     UserFunctionValue, Value)
from .values.builder import wrap

# ints, floats and bools that changed between calls (symbolic: NOTE [Dynamic ints], [Dynamic floats]) are
# immutable like their constants: copy.deepcopy returns them as they are (dataclasses.asdict of a config
# whose int field changed broke at "copy.deepcopy of SymInt(s18)")
_ATOMIC = (ConstantValue, BuiltinValue, UserFunctionValue, ClassValue, PyModuleValue, SymNodeValue, SymFloatValue)


def _plain_copyable(cls: type) -> bool:
    heap = 1 << 9
    return (bool(cls.__flags__ & heap) and cls.__new__ is object.__new__
            and cls.__reduce_ex__ is object.__reduce_ex__ and cls.__reduce__ is object.__reduce__
            and getattr(cls, "__getstate__", object.__getstate__) is object.__getstate__
            and not hasattr(cls, "__setstate__") and not hasattr(cls, "__deepcopy__") and not hasattr(cls, "__copy__")
            and all(k is object or (k.__flags__ & heap and "__slots__" not in k.__dict__) for k in cls.__mro__))


def _instance_attrs(tx, obj: Value) -> dict[str, Value]:
    if isinstance(obj, NewObjectValue):
        from .dict_objects import STORAGE
        from .list_objects import STORAGE as LIST_STORAGE
        if STORAGE in obj.attrs or LIST_STORAGE in obj.attrs:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copying a {obj.cls.__name__} (a dict or list subclass)")
        return dict(obj.attrs)
    real = obj.obj
    if obj.source is None or any(key[0] == id(real) for key in tx.output.side_effects.attrs):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copying a {type(real).__name__} changed or unsourced here")
    contents = wrap(tx.output, real.__dict__, AttrSource(obj.source, "__dict__"))
    if not isinstance(contents, DictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copying a {type(real).__name__}")
    return dict(contents.items)


def deep(tx, value: Value, memo: dict[int, Value]) -> Value:
    if isinstance(value, _ATOMIC) and not isinstance(value, ObjectValue) or isinstance(value, ClassValue):
        return value
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, TupleValue):
        result: Value = TupleValue([deep(tx, i, memo) for i in value.items], cls=value.cls)
    elif isinstance(value, ListValue) and value.cls is list:
        result = ListValue([])
        memo[id(value)] = result
        result.items = [deep(tx, i, memo) for i in value.items]
    elif isinstance(value, DictValue) and value.cls in (dict, collections.OrderedDict) and \
            not _copies_instance_attrs(tx, value):
        result = DictValue({}, cls=value.cls)
        memo[id(value)] = result
        result.items = {k: deep(tx, v, memo) for k, v in value.items.items()}
    elif isinstance(value, SetValue):
        # NOTE [Set order]: deepcopy reduces a set to cls(list(s)), which adds the elements in order
        result = SetValue(set(list(value.items)), cls=value.cls, exact=value.exact)
    elif isinstance(value, TensorValue):
        result = _tensor_copy(tx, value, memo)
    elif isinstance(value, (ObjectValue, NewObjectValue)) and not isinstance(value, NNModuleValue) \
            and _plain_copyable(value.python_type()):
        result = NewObjectValue(value.python_type())
        memo[id(value)] = result
        result.attrs = {k: deep(tx, v, memo) for k, v in _instance_attrs(tx, value).items()}
    else:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copy.deepcopy of {value.describe()}")
    memo[id(value)] = result
    return result


def _whole_storage(fake) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    if fake.layout != torch.strided or fake.is_sparse or fake.is_quantized or fake.is_conj() or fake.is_neg():
        return False
    nbytes = fake.untyped_storage().nbytes()
    return (statically_known_true(fake.storage_offset() == 0) and statically_known_true(fake.is_contiguous())
            and statically_known_true(nbytes == fake.numel() * fake.element_size()))


def _tensor_copy(tx, value: TensorValue, memo: dict) -> Value:
    """NOTE [Deep copies of tensors]."""
    from torch.multiprocessing.reductions import StorageWeakRef
    fake = value.fake
    why = None
    if value.python_type() is not torch.Tensor or fake.requires_grad:
        why = "a tensor subclass or one that requires grad"
    elif not _whole_storage(fake):
        why = "a view or a tensor that does not span its storage"
    storages = memo.setdefault("storages", [])
    storage = StorageWeakRef(fake.untyped_storage())
    if why is None and storage in storages:
        why = "two tensors that share a storage"
    real = None
    if why is None and value.source is not None:
        real = next((i.tensor for i in tx.output.inputs if i.value is value), None)
        if real is None or real.grad is not None or real.__dict__:
            why = "an input tensor with a .grad or Python attributes"
    if why is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copy.deepcopy of {value.describe()}: {why}")
    storages.append(storage)
    if real is not None:
        out = tx.output
        e = value.source.expr(out.names)
        out.add_guard("TENSOR_GRAD", f"{e}.grad is None", value.source, expected="no .grad", actual=f"{e}.grad")
        out.add_guard("TENSOR_ATTRS", f"not {e}.__dict__", value.source, expected="no Python attributes",
                      actual=f"{e}.__dict__")
        # the clone's storage is the tensor's size; deepcopy copies the whole storage (a prefix view of a
        # larger one is contiguous at offset 0 too), so the storage's size is guarded as read here
        out.add_guard("TENSOR_STORAGE", f"{e}.untyped_storage().nbytes() == {e}.numel() * {e}.element_size()",
                      value.source, expected="a storage the tensor spans", actual=f"{e}.untyped_storage().nbytes()")
        inputs = memo.setdefault("inputs", [])
        for other_value, other in inputs:
            if other.untyped_storage().data_ptr() == real.untyped_storage().data_ptr():
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, "copy.deepcopy of two inputs that share a storage")
            out.add_guard("NO_ALIASING", f"___storage_apart({other_value.source.expr(out.names)}, {e})", None,
                          expected=f"{value.source.describe()} shares no memory with {other_value.source.describe()}")
        inputs.append((value, real))
    return tx.output.call("call_method", "clone", (value,), {})


def _deepcopy(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "copy.deepcopy with a memo")
    return deep(tx, args[0], {})


def _copies_instance_attrs(tx, value: DictValue) -> bool:
    """An OrderedDict with instance attributes (a state dict's `_metadata`), which copy.copy and deepcopy
    carry over (OrderedDict.__reduce__) and the dict value does not: copied in Python (a break). One from
    outside without any is guarded to stay so (NOTE [Attributes of OrderedDicts from outside])."""
    if getattr(value, "extra_attrs", None):  # NOTE [Attributes of OrderedDicts made while tracing]
        return True
    real = getattr(value, "real_object", None)
    if real is None or value.source is None:
        return False
    if vars(real):
        return True
    e = value.source.expr(tx.output.names)
    tx.output.add_guard("DICT_KEYS", f"not {e}.__dict__", value.source, expected="no instance attributes",
                        actual=f"{e}.__dict__")
    return False


def _copy(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "copy.copy with these arguments")
    value = args[0]
    if isinstance(value, _ATOMIC) or isinstance(value, TupleValue):
        return value
    if isinstance(value, ListValue) and value.cls is list:
        return ListValue(list(value.items))
    if isinstance(value, DictValue) and value.cls in (dict, collections.OrderedDict) and \
            not _copies_instance_attrs(tx, value):
        return DictValue(dict(value.items), cls=value.cls)
    if isinstance(value, (ObjectValue, NewObjectValue)) and not isinstance(value, NNModuleValue) \
            and _plain_copyable(value.python_type()):
        return NewObjectValue(value.python_type(), _instance_attrs(tx, value))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"copy.copy of {value.describe()}")


HANDLERS: dict[Any, Callable] = {copy.deepcopy: _deepcopy, copy.copy: _copy}
