"""Attribute lookup over abstract values, following Python's order.

For objects: data descriptors of the type (properties are inlined), then the instance `__dict__`
(guarded through an AttrSource), then class attributes (functions become bound methods), then, for
nn.Module, its parameter/buffer/child slots (NOTE [Module slots]). A missing attribute raises the same
AttributeError CPython would (through UserException); a lookup framejit cannot model (a custom
`__getattr__`, an unknown descriptor) is Unsupported. How each attribute was found (or not found) is
guarded: NOTE [Lookup facts] in lookup.py.
"""
from __future__ import annotations

import collections
import enum
import random
import types
from typing import Any

import torch

from ..guards import COST_ID
from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .sources import AttrSource, DictSlotSource, ObjectSource, Ref
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, DictValue, DictViewValue,
                     IteratorValue, NewObjectValue, SetValue, SymNodeValue,
                     NNModuleValue, ObjectValue, PartialValue, PyModuleValue, SequenceValue, SymFloatValue, TensorMethodValue,
                     TensorValue, UserFunctionValue, Value)
from .values.builder import instance_dict as instance_dict_of, is_library_module, wrap, wrap_unguarded
from .descriptors import class_data, class_level_attr, descriptor_attr, is_data_descriptor, method_kind, plain_property_fn
from .tensor_subclasses import is_subclass_type, opaque_attr_check, subclass_attr
from .tensor_attrs import grad_source, input_of, object_method, refuse_changed_dict, stored_or
from .getattribute import (custom_getattribute, guard_metaclass_getattribute, guard_tensor_getattribute,
                           getattr_after_error, inline_getattribute, instance_dict)
from .vmap_capture import check_grad_fact

# Tensor attributes that are metadata: constant for a traced tensor (inputs are guarded on them).
TENSOR_METADATA = {
    "shape": lambda t: torch.Size(t.shape), "dtype": lambda t: t.dtype, "device": lambda t: t.device,
    "ndim": lambda t: t.ndim, "is_cuda": lambda t: t.is_cuda, "requires_grad": lambda t: t.requires_grad,
    "layout": lambda t: t.layout, "is_sparse": lambda t: t.is_sparse, "is_quantized": lambda t: t.is_quantized,
    "is_meta": lambda t: False, "itemsize": lambda t: t.itemsize, "is_nested": lambda t: t.is_nested,
    "is_sparse_csr": lambda t: t.is_sparse_csr, "is_mkldnn": lambda t: t.is_mkldnn, "is_cpu": lambda t: t.is_cpu,
    "is_xpu": lambda t: t.is_xpu, "is_mps": lambda t: t.is_mps,
}
TENSOR_VALUED_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
TENSOR_UNSUPPORTED_ATTRS = {"grad", "_version", "grad_fn", "_base", "is_leaf", "names"}

CONTAINER_METHODS = {
    list: ("append", "extend", "pop", "insert", "index", "count", "reverse", "sort", "copy", "clear", "remove"),
    tuple: ("index", "count"),
    dict: ("keys", "values", "items", "get", "update", "pop", "setdefault", "copy", "clear"),
    set: ("add", "update", "discard", "remove", "clear", "copy", "union", "intersection", "difference",
          "symmetric_difference", "issubset", "issuperset", "isdisjoint", "pop", "difference_update",
          "intersection_update", "symmetric_difference_update"),
    frozenset: ("copy", "union", "intersection", "difference", "symmetric_difference", "issubset",
                "issuperset", "isdisjoint"),
}
# the operator and comparison slots of sets, read as bound methods (`s.__contains__(k)`, `s.__eq__(t)`)
for _owner in (set, frozenset):
    CONTAINER_METHODS[_owner] += ("__contains__", "__len__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                                  "__ge__", "__or__", "__and__", "__sub__", "__xor__")


class SuperValue(Value):
    """`super()` inside a method: attribute lookup starts after `cls` in the MRO of self's type."""

    def __init__(self, cls: type, self_value: Value) -> None:
        self.cls = cls
        self.self_value = self_value

    def python_type(self) -> type:
        return super

    def rebuild_call(self) -> tuple:
        """`super(cls, self)`: the object after the graph (live at a break, returned; codegen's `emit`)."""
        return super, [ClassValue(self.cls), self.self_value]


# NOTE [Attributes of super objects]: super's attribute lookup (super_getattro) skips the MRO walk for
# `__class__` (always `super`), and a name no class after `cls` defines is then looked up on the super object
# itself: `__thisclass__` (cls) and `__self__` (the second argument) are answered; `__self_class__` and
# `__get__` are not modelled (a break), not an AttributeError eager does not raise.
def _super_attr(tx, sup: SuperValue, name: str) -> Value:
    if name == "__class__":
        return ClassValue(super)
    of_class = isinstance(sup.self_value, ClassValue) and isinstance(sup.self_value.obj, type)
    owner = sup.self_value.obj if of_class else sup.self_value.python_type()
    mro = owner.__mro__
    if sup.cls not in mro:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"super() of {sup.cls.__name__} outside {owner.__name__}'s MRO")
    start = mro.index(sup.cls) + 1
    for index in range(start, len(mro)):
        klass = mro[index]
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            entry = lookup.guard_found_on_class(tx.output, owner, name, index, start)  # NOTE [Lookup facts]
            if of_class:
                return _super_class_attr(tx, sup, entry, attr, name)
            if isinstance(attr, types.FunctionType):
                lookup.guard_entry_identity(tx.output, entry, attr)
                return BoundMethodValue(UserFunctionValue(attr), sup.self_value)
            if isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
                lookup.guard_entry_identity(tx.output, entry, attr)
                return BoundMethodValue(BuiltinValue(attr), sup.self_value)
            if (fget := plain_property_fn(tx, attr, "__get__")) is not None:  # NOTE [Property subclasses]
                lookup.guard_entry_identity(tx.output, entry, attr)
                return tx.call(UserFunctionValue(fget), [sup.self_value], {})
            return class_level_attr(tx, sup.self_value, owner, name, attr, entry)
    lookup.guard_mro(tx.output, owner)  # NOTE [MRO guarded]
    lookup.guard_class_absent(tx.output, mro[start:], name)
    if name == "__thisclass__":  # NOTE [Attributes of super objects]
        return ClassValue(sup.cls)
    if name == "__self__":
        return sup.self_value
    if name in vars(super):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"super().{name}")
    raise UserException(AttributeError(f"'super' object has no attribute '{name}'"))


def _super_class_attr(tx, sup: SuperValue, entry, attr: Any, name: str) -> Value:
    """`super()._make(...)` in a classmethod (3.11; 3.12 has LOAD_SUPER_ATTR): super's second argument is the
    class itself, so the lookup walks that class's MRO and a classmethod found there binds to it (a
    staticmethod to nothing). Other descriptors reached this way are not modelled (a break)."""
    if (kind := method_kind(tx, attr)) is not None and isinstance(attr.__func__, types.FunctionType):
        lookup.guard_entry_identity(tx.output, entry, attr)
        func = UserFunctionValue(attr.__func__)
        return BoundMethodValue(func, sup.self_value) if kind is classmethod else func
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"super().{name} of a class ({type(attr).__name__})")


_OBJECT_CLASS = vars(object)["__class__"]
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (its dict can change)


def getattr_value(tx, obj: Value, name: str) -> Value:
    from .context import CtxValue, ctx_method

    if isinstance(obj, SuperValue):
        return _super_attr(tx, obj, name)
    if isinstance(obj, CtxValue) and (method := ctx_method(obj, name)) is not None:
        return method  # `ctx.clone`, `ng.__enter__` (NOTE [Torch managers entered by call])
    if isinstance(obj, TensorValue):
        return _tensor_attr(tx, obj, name)
    if getattr(obj, "opaque_tensor", None):
        opaque_attr_check(obj, name)  # NOTE [Tensor subclasses traced as tensors]
    from .numpy_support import NdarrayValue, ndarray_attr
    if isinstance(obj, NdarrayValue):  # NOTE [NumPy as torch]
        return ndarray_attr(tx, obj, name)
    if isinstance(obj, ConstantValue):
        if hasattr(type(obj), "attr_in_trace") and (found := obj.attr_in_trace(name)) is not None:
            return found  # an unread re.Match's group (NOTE [Strings that change between calls])
        if name == "obj" and getattr(obj, "attr_obj", None) is not None:
            return obj.attr_obj  # a caught AttributeError's object (NOTE [Members of caught exceptions])
        if isinstance(obj.value, enum.Enum) and not lookup.is_fixed_class(type(obj.value)):
            from .enum_attributes import enum_member_attr
            return enum_member_attr(tx, obj, name)  # NOTE [Attributes of enum members]
        return _constant_attr(obj, name)
    if isinstance(obj, SymFloatValue):  # a float method or attribute needs the value: specialised
        return _constant_attr(ConstantValue(obj.as_constant()), name)
    if isinstance(obj, SymNodeValue):  # NOTE [Methods of symbolic ints]
        descriptor = getattr(obj.python_type(), name, None)
        if isinstance(descriptor, types.MethodDescriptorType):
            method = BoundMethodValue(BuiltinValue(descriptor), obj)
            method.symbolic_self = True
            return method
        return _constant_attr(ConstantValue(obj.as_constant()), name)  # an attribute needs the value, guarded
    if isinstance(obj, DictViewValue):  # NOTE [Live dict views]: `mapping` (3.10+) and isdisjoint are rare
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a dict view")
    if name == "__class__" and isinstance(obj, (SequenceValue, DictValue, SetValue)) and \
            lookup.mro_lookup(obj.python_type(), "__class__")[1] is _OBJECT_CLASS:
        if obj.python_type().__flags__ & _HEAPTYPE:
            lookup.guard_lookup(tx.output, obj.python_type(), "__class__")  # a subclass (namedtuple) could add one
        return ClassValue(obj.python_type())  # a container's exact type (functools.singledispatch's wrapper)
    if isinstance(obj, SequenceValue) and obj.cls is collections.deque:
        from .mappings import deque_attr
        return deque_attr(obj, name)
    if isinstance(obj, SequenceValue):
        return _sequence_attr(tx, obj, name)
    if isinstance(obj, DictValue):
        return _dict_attr(tx, obj, name)
    if isinstance(obj, SetValue):
        return _set_attr(tx, obj, name)
    return _namespace_or_object_attr(tx, obj, name)


def _namespace_or_object_attr(tx, obj: Value, name: str) -> Value:
    """getattr_value for modules, backend flags, classes, objects, functions and the remaining kinds of value."""
    if isinstance(obj, PyModuleValue):
        return _module_attr(tx, obj, name)
    from .compile_state import BackendFlagsValue, flag_attr
    if isinstance(obj, BackendFlagsValue):
        return flag_attr(tx, obj, name)
    if isinstance(obj, ClassValue):
        if name == "apply":
            from .autograd_function import apply_attr
            found = apply_attr(tx, obj)  # NOTE [Custom autograd functions without grad]
            if found is not None:
                return found
        return _class_attr(tx, obj, name)
    if isinstance(obj, (ObjectValue, NewObjectValue)):
        if isinstance(obj, ObjectValue) and name not in ("__enter__", "__exit__", "__class__") and \
                id(obj.obj) in tx.output.__dict__.get("adopted_generator_cms", ()):
            # NOTE [Generator context managers from outside]: the real object still holds what the traced
            # __enter__ deleted (args, kwds, func) and a generator that has not run
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of an outside generator "
                              "context manager the trace entered")
        return object_attr(tx, obj, name)
    if isinstance(obj, (UserFunctionValue, BoundMethodValue)):
        from .function_attrs import function_attr_value
        return function_attr_value(tx, obj, name)
    if isinstance(obj, PartialValue):
        from .partials import partial_attr
        return partial_attr(tx, obj, name)
    from .generator_ctx import GenCtxValue, gen_attr
    if isinstance(obj, GenCtxValue):
        return gen_attr(obj, name)
    if isinstance(obj, BuiltinValue):
        return _builtin_attr(tx, obj, name)
    from .state_blocks import OpaqueProfilerValue
    if isinstance(obj, OpaqueProfilerValue):  # NOTE [Profiler objects used]
        raise obj.used(f"attribute {name!r} of {obj.describe()}")
    from .values.containers import SliceValue
    if isinstance(obj, SliceValue) and name in ("start", "stop", "step"):  # NOTE [Slices from outside]
        return obj.parts[("start", "stop", "step").index(name)]
    if isinstance(obj, IteratorValue) and name in ("__iter__", "__next__"):  # `it.__next__()` is next(it)
        return BoundMethodValue(BuiltinValue(iter if name == "__iter__" else next), obj)
    from .generator_ends import end_method, method_value_attr  # NOTE [Generators ended by close or throw]
    if isinstance(obj, IteratorValue) and name in ("close", "throw"):
        return end_method(obj, name)
    return method_value_attr(obj, name)  # NOTE [Names of generator methods], or a break


_BOUND_C = (types.BuiltinMethodType, types.MethodWrapperType)


def _dict_attr(tx, obj: DictValue, name: str) -> Value:
    if name in (getattr(obj, "extra_attrs", None) or {}):  # NOTE [Attributes of OrderedDicts made while tracing]
        return obj.extra_attrs[name]
    real = getattr(obj, "real_object", None)
    if real is not None and obj.source is not None and name in vars(real):
        return _ordered_dict_instance_attr(tx, obj, real, name)
    if obj.cls is types.MappingProxyType and name not in ("keys", "values", "items", "get", "copy"):
        raise UserException(AttributeError(f"'mappingproxy' object has no attribute '{name}'"))
    from .mappings import mapping_attr
    try:
        return mapping_attr(obj, name) or _container_method(obj, dict, name)
    except UserException as e:
        if real is not None and obj.source is not None and isinstance(e.exc, AttributeError):
            lookup.guard_not_in_instance(tx.output, obj.source, real, name)  # absent: stays absent
        raise


def _set_attr(tx, obj: SetValue, name: str) -> Value:
    """The subclass's own methods, then the base's (NOTE [Plain set subclasses])."""
    index, attr = lookup.mro_lookup(obj.cls, name)
    if index is not None and obj.cls.__mro__[index] not in (set, frozenset, object) and \
            isinstance(attr, types.FunctionType):
        lookup.guard_lookup(tx.output, obj.cls, name)
        return BoundMethodValue(UserFunctionValue(attr), obj)
    return _container_method(obj, set if issubclass(obj.cls, set) else frozenset, name)


def _builtin_attr(tx, obj: BuiltinValue, name: str) -> Value:
    if name == "__self__" and getattr(obj, "bound_owner", None) is not None:
        return obj.bound_owner  # the value it was read from (`_constant_attr`)
    if name == "__self__" and obj.source is not None and isinstance(obj.obj, _BOUND_C):
        # the object it is bound to, reloaded from where the method came from (guarded there, NOTE [Bound
        # builtin methods by their parts]), so `m.__self__ is t` after a break compares the real objects
        return wrap(tx.output, obj.obj.__self__, AttrSource(obj.source, "__self__"))
    try:
        return wrap_unguarded(getattr(obj.obj, name))
    except AttributeError as e:
        raise UserException(e) from None


def _tensor_attr(tx, t: TensorValue, name: str) -> Value:
    if is_subclass_type(t.cls):  # NOTE [Tensor subclasses traced as tensors]: the subclass's own methods first
        found = subclass_attr(tx, t, name)
        if found is not None:
            return found
    if name == "grad" and _input_leaf(tx, t) is not None:
        return wrap(tx.output, _input_leaf(tx, t).grad, grad_source(t))  # NOTE [Gradients of inputs]
    if name in TENSOR_UNSUPPORTED_ATTRS:
        if name == "grad_fn":
            from .tensor_hooks import grad_fn_value  # NOTE [Autograd nodes known absent or present]
            return grad_fn_value(tx, t)
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{name} is state outside the graph")
    check_grad_fact(tx.output, name)  # NOTE [vmap regions]
    getter = TENSOR_METADATA.get(name)
    if name == "shape" and any(isinstance(s, torch.SymInt) for s in t.fake.shape):
        return tx.output.call("call_method", "size", (t,), {})  # NOTE [Symbolic shapes] in shapes.py
    if getter is not None:
        return ConstantValue(getter(t.fake))
    if name == "__class__":
        return ClassValue(t.python_type())
    if name in TENSOR_VALUED_ATTRS:
        return tx.output.call("call_function", getattr, (t, ConstantValue(name)), {})
    if name == "data":  # the same memory, outside autograd (NOTE [Writes through the .data of inputs])
        from .data_alias import data_of_input
        data = data_of_input(tx, t)
        data = _input_data(tx, t) if data is None else data
        return tx.output.call("call_method", "detach", (t,), {}) if data is None else data
    attr = getattr(torch.Tensor, name, None)
    if attr is None:  # stored in the trace first: NOTE [Attributes stored on tensors]
        return stored_or(tx.output, t, name, lambda: _tensor_python_attr(tx, t, name))
    if callable(attr):
        _guard_tensor_method(tx, t, name)
        if _patched_tensor_method(attr):
            return BoundMethodValue(UserFunctionValue(attr), t)
        return object_method(t, attr) or TensorMethodValue(t, name)
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{name}")


def _patched_tensor_method(attr) -> bool:
    """NOTE [Patched tensor methods]: `torch.Tensor.add = f` (a Python function from outside torch) is
    inlined as the user's function, as eager calls it (its identity is guarded by _guard_tensor_method).
    Recorded as the graph op `x.add(...)`, it ran f only where the graph runs as Python (the eager backend)
    and the real op where a backend lowers the graph (onnxrt gave x + 1 for a patched `x.add(1) = x - 1`)."""
    return isinstance(attr, types.FunctionType) and not (attr.__module__ or "").startswith("torch")


# NOTE [Gradients of inputs]: `p.grad` of a leaf tensor that came in from a source (a parameter read from
# an optimizer's param_groups, a module's weight) is that source's `.grad`: None (guarded `is None`) or a
# tensor that becomes a graph input of its own (guarded like any input, deduplicated by identity). While
# tracing nothing else can change it: a store to a tensor attribute (`p.grad = g`) is a graph break, and
# `backward()` is one too; in-place updates of the grad tensor are ops on that input. A tensor made in the
# graph, or a non-leaf (whose `.grad` warns), still breaks.
# NOTE [Data of inputs]: `t.data` is t's memory outside autograd like `t.detach()`, but with a version
# counter of its own: an in-place write through `.data` does not bump t's version (eager's manual SGD
# `p.data.add_(...)`), where one through a detach() alias does. Traced as detach(), such a write made a later
# backward through a graph that saved `p` raise "modified by an inplace operation" where eager does not (red
# team 6). The `.data` of an inference input (no counter), while the graph wrote no input yet, is therefore read
# from its source (`x.data`): a graph input of its own, sharing t's memory, so an in-place op on either is a break
# (NOTE [Input mutation] in graph.py). Other inputs: NOTE [Writes through the .data of inputs] in data_alias.py.
def _input_data(tx, t: TensorValue) -> Value | None:
    if t.source is None:
        return None
    entry = next((i for i in tx.output.inputs if i.value is t), None)
    if entry is None or tx.output.mutated_inputs:
        return None  # an input written by the graph already: its memory is the graph's value (detach() below)
    return wrap(tx.output, entry.tensor.data, AttrSource(t.source, "data"))


def _input_leaf(tx, t: TensorValue) -> torch.Tensor | None:
    if t.source is None:
        return None
    real = next((i.tensor for i in tx.output.inputs if i.value is t), None)
    return real if real is not None and real.is_leaf else None


def _guard_tensor_method(tx, t: TensorValue, name: str) -> None:
    """`t.name` is the Tensor method the graph op stands for: not replaced on the class (a monkeypatched
    `torch.Tensor.add`, NOTE [Library class attributes]) nor shadowed by a Python attribute of an input
    tensor (`x.size = f` sets an instance attribute: methods are non-data descriptors)."""
    lookup.guard_lookup(tx.output, t.python_type(), name)
    if t.source is not None:
        if (real := next((i.tensor for i in tx.output.inputs if i.value is t), None)) is not None:
            refuse_changed_dict(tx.output, real, name)  # `vars(x)["new"] = 1` shadows the method
            lookup.guard_not_in_instance(tx.output, t.source, real, name)


def _tensor_python_attr(tx, t: TensorValue, name: str) -> Value:
    """A name torch.Tensor does not define: a Python attribute in the tensor's own `__dict__`, or absent (guarded:
    NOTE [Lookup facts]); either way no class of its MRO has `name` (`torch.Tensor.name = f` after the first call)."""
    cls = t.python_type()
    guard_tensor_getattribute(tx, cls)  # NOTE [Python attributes of tensors past a patched __getattribute__]
    lookup.guard_mro(tx.output, cls)
    lookup.guard_class_absent(tx.output, cls.__mro__, name)
    refuse_changed_dict(tx.output, (found := input_of(tx.output, t)) and found.tensor, name)  # x.contiguous() is x
    if found is not None and found.value.source is not None and found.value.python_type() is cls:
        if name in found.tensor.__dict__:
            return wrap(tx.output, found.tensor.__dict__[name], AttrSource(found.value.source, name))
        lookup.guard_not_in_instance(tx.output, found.value.source, found.tensor, name)
    elif t.source is not None or found is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Python attribute {name!r} of a tensor")
    lookup.guard_class_absent(tx.output, cls.__mro__, "__getattr__")
    raise UserException(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'"))


# NOTE [Methods of symbolic ints]: `b = n.bit_length` of an int that went symbolic specialised n where it was
# read (a SHAPE_ENV guard `n == 1008`), so a function that only holds the method across a break recompiled its
# top frame on every call (review revW W6: [4, 2, 2, 2, 2, 2] traces per call where stock makes
# [4, 2, 1, 1, 1, 1]). The read gives the C method bound to the symbolic value; calling it specialises then
# (calls._call_bound_method), and at a break it is rebuilt bound to the caller's int (codegen's bound_c_method).
def _constant_attr(obj: ConstantValue, name: str) -> Value:
    if name in (known := getattr(obj, "known_members", {})):  # NOTE [Contexts of exceptions raised while handling],
        return known[name]  # [New exceptions leaving callees' handlers] (caught_exceptions.py)
    if isinstance(obj.value, BaseException) and name in ("__traceback__", "__context__"):
        # NOTE [Exceptions caught while tracing]: an exception the trace made or caught was never raised
        # by CPython, so it has no traceback and no context where eager's has them
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name} of {type(obj.value).__name__}")
    try:
        value = getattr(obj.value, name)
    except AttributeError as e:
        raise UserException(e) from None
    if isinstance(obj.value, BaseException) and getattr(value, "__self__", None) is obj.value:
        # NOTE [Exceptions made while tracing]: a method of the exception is bound to the object each call
        # makes, not to the traced template (`e.add_note(...)` at a break noted the template, every call)
        return BoundMethodValue(BuiltinValue(getattr(type(obj.value), name)), obj)
    result = wrap_unguarded(value)
    if obj.source is not None and type(obj.value) in _VALUE_TYPES and isinstance(result, BuiltinValue) and \
            getattr(value, "__self__", None) is obj.value and \
            isinstance(getattr(type(obj.value), name, None), _C_METHOD_DESCRIPTORS):
        # `k.__mul__` of a number, string or tuple from outside is bound to the caller's object, not to the
        # equal object of the call that traced it: `__self__` answers the value itself, and the method is
        # rebuilt (returned, live at a break) bound to the value's source (codegen), so `m = k.__mul__;
        # print(); m.__self__ is k` answers as eager for every equal k
        result.bound_owner = obj
    return result


_VALUE_TYPES = (int, float, complex, str, bytes, tuple)
_C_METHOD_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def _sequence_attr(tx, obj: SequenceValue, name: str) -> Value:
    fields = getattr(obj.cls, "_fields", None)
    if fields and name in fields and _field_getter(tx, obj.cls, name) == fields.index(name):
        return obj.items[fields.index(name)]
    if fields and name in ("_fields", "_field_defaults"):
        return wrap_unguarded(getattr(obj.cls, name))  # class data of the namedtuple (type is guarded)
    if hasattr(obj.cls, "n_fields") and name in _structseq_fields(obj.cls):
        return obj.items[_structseq_fields(obj.cls).index(name)]
    base = list if obj.cls is list else tuple
    if obj.cls is torch.Size and name == "numel":  # NOTE [Size arithmetic stays symbolic] in sym_arith.py
        return BoundMethodValue(BuiltinValue(torch.Size.numel), obj)
    if obj.cls not in (list, tuple):
        return _sequence_class_attr(tx, obj, base, name)
    return _container_method(obj, base, name)


# NOTE [Namedtuple fields on the class]: `t.a` of a namedtuple reads item 0 only because `NT.__dict__['a']`
# is the field's `_tuplegetter`; `NT.a = property(...)` (or a subclass defining `a`) changes what the read
# returns while the instance's type stays the same. So a field read pins the getter where the MRO finds it
# (NOTE [Lookup facts]); a class whose field name resolves to something else is read as a class attribute.
_TUPLEGETTER = type(collections.namedtuple("_Probe", "a").a)


def _field_getter(tx, cls: type, name: str) -> int | None:
    """The item index `cls.<name>` reads, when it is a field getter (guarded to stay that getter)."""
    index, attr = lookup.mro_lookup(cls, name)
    if index is None or type(attr) is not _TUPLEGETTER:
        return None
    if not lookup.is_immutable_class(cls):
        lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, name, index), attr)
    return attr.__reduce__()[1][0]


def _sequence_class_attr(tx, obj: SequenceValue, base: type, name: str) -> Value:
    """An attribute of a namedtuple (or other tuple subclass) instance that is not a field: looked up on
    its class first (methods, class constants), with the lookup facts guarded (NOTE [Lookup facts])."""
    index, attr = lookup.mro_lookup(obj.cls, name)
    if index is not None and not lookup.is_fixed_class(obj.cls.__mro__[index]):
        entry = lookup.guard_found_on_class(tx.output, obj.cls, name, index)
        return class_level_attr(tx, obj, obj.cls, name, attr, entry)
    lookup.guard_mro(tx.output, obj.cls)  # NOTE [MRO guarded]
    lookup.guard_class_absent(tx.output, obj.cls.__mro__[:index], name)
    return _container_method(obj, base, name)


def _structseq_fields(cls: type) -> list[str]:
    """Field names of a struct sequence (e.g. torch.return_types.max) in positional order."""
    return list(getattr(cls, "__match_args__", ()))


def _container_method(obj: Value, base: type, name: str) -> Value:
    from .container_slots import is_container_slot  # NOTE [Container slots called as methods]
    from .dict_slots import is_subclass_dict_slot as slot  # NOTE [Dict slots of subclasses]
    if name in CONTAINER_METHODS.get(base, ()) or is_container_slot(base, name, obj) or slot(base, name, obj):
        return BoundMethodValue(BuiltinValue(getattr(base, name)), obj)
    if hasattr(base, name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{base.__name__}.{name}")
    raise UserException(AttributeError(f"'{base.__name__}' object has no attribute '{name}'"))


def _module_attr(tx, obj: PyModuleValue, name: str) -> Value:
    stored = tx.output.side_effects.global_value(_module_dict(obj.obj), name)
    if stored is not None:  # NOTE [Module attribute stores]
        return stored
    if name == "__dict__" and any(key[0] == id(_module_dict(obj.obj)) for key in tx.output.side_effects.globals):
        raise Unsupported(BreakKind.SIDE_EFFECT, "the __dict__ of a module with stores not yet replayed")
    raw = _module_dict(obj.obj)
    if type(raw) is dict:
        tx.output.side_effects.check_namespace_read(raw, name)  # NOTE [Reads past writes through a namespace dict]
    if type(raw) is dict and name not in raw and "__getattr__" in raw and not is_library_module(obj.obj):
        # NOTE [Module __getattr__]: a name the module's dict lacks is computed by its PEP 562 `__getattr__`,
        # user code that may answer differently (or count) on each call: read in Python, never folded (the
        # trace ran it, and its value guard ran it again on every call)
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name!r} of module "
                                                           f"{getattr(obj.obj, '__name__', '?')} (its __getattr__)")
    try:
        value = getattr(obj.obj, name)
    except AttributeError as e:
        # absent (a failed hasattr, a getattr default): guarded absent, with no module __getattr__ (PEP 562)
        module = ObjectSource(Ref(obj.obj, (getattr(obj.obj, "__name__", "") or "module").replace(".", "_")))
        lookup.guard_not_in_instance(tx.output, module, obj.obj, name)
        lookup.guard_not_in_instance(tx.output, module, obj.obj, "__getattr__")
        raise UserException(e) from None
    if is_library_module(obj.obj) or obj.source is None:
        _guard_library_attr(tx, obj.obj, name, value)
        from .compile_state import BackendFlagsValue, is_flag_object
        if is_flag_object(value):  # NOTE [Backend flag objects]
            return BackendFlagsValue(value, f"{getattr(obj.obj, '__name__', 'module')}.{name}".replace(".", "_"))
        return _library_attr_value(tx, obj.obj, name, value)
    return wrap(tx.output, value, AttrSource(obj.source, name))


# NOTE [Objects held by library modules]: an attribute of a library module (NOTE [Library modules]) is
# wrapped without a source when it is a function, class, constant or the like. A plain object a library
# keeps at module level (`torch.distributions.constraints.real`, a `_Real` instance returned by every
# Transform's `domain`/`codomain`) has no unguarded model: it is wrapped like any object, with the module
# attribute as its source (the same source _guard_library_attr pins by identity), so it is reloaded from
# there when the graph's output or a resume function needs it. It was a break at every such read (the
# TimeSeriesTransformer/Informer/Autoformer likelihood head: 8 graphs where stock has 1).
def _library_attr_value(tx, module: types.ModuleType, name: str, value: Any) -> Value:
    try:
        return wrap_unguarded(value)
    except Unsupported:
        label = (getattr(module, "__name__", "") or "module").replace(".", "_")
        return wrap(tx.output, value, AttrSource(ObjectSource(Ref(module, label)), name))


def _module_dict(module: types.ModuleType) -> Any:
    try:
        return object.__getattribute__(module, "__dict__")
    except AttributeError:
        return None


def store_module_attr(tx, obj: PyModuleValue, name: str, value: Value) -> None:
    """NOTE [Module attribute stores]: `setattr(sys, "stdout", s)` / `mod.x = v` on a plain module (its class
    is ModuleType, guarded: a module's class can be reassigned) writes the module's `__dict__`, exactly
    as a global store of a function defined in that module does; it is recorded and replayed as one
    (side_effects.store_global), and reads of the attribute later in the trace see it (`_module_attr`,
    as LOAD_GLOBAL does). A name that is a data descriptor of the module's class (`__dict__`,
    `__annotations__`, `__class__`) is a graph break."""
    module = obj.obj
    if type(module) is not types.ModuleType or _module_dict(module) is None or not isinstance(name, str):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"an attribute store on a module of class {type(module).__name__}")
    if any(hasattr(type(k.__dict__.get(name)), "__set__") for k in type(module).__mro__ if name in k.__dict__):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"a store to the module attribute {name!r} (a descriptor)")
    label = (getattr(module, "__name__", "") or "module").replace(".", "_")
    tx.output.guard_type(ObjectSource(Ref(module, label)), types.ModuleType)
    tx.output.side_effects.store_global(_module_dict(module), name, value)


def _guard_library_attr(tx, module: types.ModuleType, name: str, value: Any) -> None:
    """NOTE [Library modules] takes library functions as fixed while tracing, but a user may still
    monkeypatch one (`F.gelu = my_gelu`): the attribute read is pinned by identity (by value for
    scalars) on the module object itself. Submodules (`torch.nn`) are not guarded."""
    if isinstance(value, types.ModuleType):
        return
    label = (getattr(module, "__name__", "") or "module").replace(".", "_")
    source = AttrSource(ObjectSource(Ref(module, label)), name)
    if type(value) in (bool, int, float, str, type(None)):
        tx.output.guard_constant(source, value)
    else:
        tx.output.guard_id(source, value)


def _lookup_class(cls: type, name: str) -> tuple[bool, Any]:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return True, klass.__dict__[name]
    return False, None


def _class_attr(tx, obj: ClassValue, name: str) -> Value:
    cls = obj.obj
    guard_metaclass_getattribute(tx, type(cls))  # NOTE [Metaclass __getattribute__ guarded]
    index, attr = lookup.mro_lookup(cls, name)
    if index is None:
        lookup.guard_mro(tx.output, cls)  # NOTE [MRO guarded]
        lookup.guard_class_absent(tx.output, cls.__mro__, name)  # NOTE [Lookup facts]
        _refuse_user_metaclass_code(type(cls), name)
        try:
            value = getattr(cls, name)  # metaclass attributes (e.g. Enum members)
        except AttributeError as e:
            lookup.guard_mro(tx.output, type(cls))
            lookup.guard_class_absent(tx.output, type(cls).__mro__, name)
            lookup.guard_class_absent(tx.output, type(cls).__mro__, "__getattr__")
            raise UserException(e) from None
        if obj.source is None and name in _TYPE_NAMES and not lookup.is_immutable_class(cls):
            # NOTE [Class names guarded]: `type(o).__name__` of a class reached without a source (type(),
            # __class__) was folded unguarded; `K.__name__ = "Z"` after the first call was not seen
            return wrap(tx.output, value, AttrSource(ObjectSource(Ref(cls, cls.__name__)), name))
        return _guarded_or_plain(tx, obj, name, value)
    _guard_no_metaclass_descriptor(tx, type(cls), name)
    entry = lookup.guard_found_on_class(tx.output, cls, name, index)
    if (kind := method_kind(tx, attr, refuse=True)) is not None or isinstance(attr, types.FunctionType):
        lookup.guard_entry_identity(tx.output, entry, attr)
    if kind is staticmethod:
        return wrap_unguarded(attr.__func__)
    if kind is classmethod:
        return BoundMethodValue(wrap_unguarded(attr.__func__), obj)
    if isinstance(attr, types.FunctionType):
        return UserFunctionValue(attr)
    if entry is not None and not hasattr(type(attr), "__get__"):
        return class_data(tx, attr, entry)  # plain class data, read raw from the owner's dict
    if name == "__dict__" and obj.source is None and not lookup.is_fixed_class(cls):
        # NOTE [Class names guarded], for the class's dict: `len(type(o).__dict__)`, `"k" in type(o).__dict__`
        # were folded from an unguarded snapshot; read through the class itself, the proxy is guarded
        return wrap(tx.output, cls.__dict__, AttrSource(ObjectSource(Ref(cls, cls.__name__)), name))
    value = getattr(cls, name)
    if isinstance(value, type(attr)) and hasattr(type(attr), "__get__") and not callable(value) and \
            not isinstance(attr, type) and obj.source is None:
        # a descriptor read from a class reached without a source (`type(self)`) that answers with a descriptor
        # of its own kind: itself (a property) or a new one (torch.distributions' lazy_property, read by its
        # argument validation, `isinstance(getattr(type(self), p), lazy_property)`). The entry is guarded or,
        # on a library class, pinned; the answer is an object only asked about its type here.
        return wrap(tx.output, attr, entry) if value is attr and entry is not None else ObjectValue(value)
    return _guarded_or_plain(tx, obj, name, value)


_TYPE_NAMES = frozenset({"__name__", "__qualname__", "__doc__"})  # type's getsets a user may assign


def _refuse_user_metaclass_code(meta: type, name: str) -> None:
    """NOTE [Metaclass code]: `K.name` absent from K's MRO is looked up on the metaclass. A descriptor there
    (a `@property` of a user metaclass) or a user metaclass's `__getattr__` is user code that may answer
    differently on each call: reading it while tracing and again as a value guard ran it twice per call
    (a counting property returned 14 on the second call where eager returns 2). Functions, class and static
    methods of the metaclass are plain lookups; library metaclasses (EnumType, ABCMeta) are fixed code."""
    index, attr = lookup.mro_lookup(meta, name)
    if index is not None:
        owner = meta.__mro__[index]
        user_code = hasattr(type(attr), "__get__") and \
            not isinstance(attr, (types.FunctionType, staticmethod, classmethod))
    else:
        index = lookup.mro_lookup(meta, "__getattr__")[0]
        owner, user_code = (meta.__mro__[index], True) if index is not None else (meta, False)
    if user_code and not lookup.is_fixed_class(owner):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name!r} of a class is computed by its metaclass "
                                                           f"{meta.__name__} (user code)")


def _guard_no_metaclass_descriptor(tx, meta: type, name: str) -> None:
    """`K.name` found in K's MRO is what CPython returns unless the metaclass's MRO has a data descriptor
    `name`, which takes precedence (`type.__getattribute__`): a user metaclass's one is not modelled (a
    break); otherwise the metaclass lookup is guarded to stay as it is (NOTE [Lookup facts]). `type`'s own
    getsets (`__doc__`, `__module__`, ...) return the class's entry and cannot change."""
    index, attr = lookup.mro_lookup(meta, name)
    if index is not None and is_data_descriptor(attr) and not lookup.is_immutable_class(meta.__mro__[index]):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{name!r} is a data descriptor of the metaclass "
                                                           f"{meta.__name__}")
    if index is None or not lookup.is_immutable_class(meta.__mro__[index]):
        lookup.guard_lookup(tx.output, meta, name)


def _guarded_or_plain(tx, owner: Value, name: str, value: Any) -> Value:
    if owner.source is not None:
        return wrap(tx.output, value, AttrSource(owner.source, name))
    return wrap_unguarded(value)


def object_attr(tx, obj: Value, name: str, default_lookup: bool = False) -> Value:
    """Attribute of a user object or module, in Python's lookup order; how it was found is guarded
    (NOTE [Lookup facts]). `default_lookup`: object.__getattribute__ itself (NOTE [Custom __getattribute__])."""
    real = obj.obj if isinstance(obj, ObjectValue) else None
    cls = type(real) if real is not None else obj.cls
    if real is not None and issubclass(cls, random.Random):  # by type: isinstance reads a user __class__ (redteam4)
        from .python_draws import check_state_read  # NOTE [Generator state read after a draw]
        check_state_read(tx, real, name)
    if not default_lookup:
        impl = custom_getattribute(tx, cls)
        if impl is not None:
            return inline_getattribute(tx, impl, obj, name)
    if name in ("__dict__", "__class__") and isinstance(obj, NewObjectValue):
        if name == "__dict__":
            from .hook_handles import note_id_read  # NOTE [Hook ids that never leave the trace]
            note_id_read(tx, obj, whole_dict=True)
        return instance_dict(obj) if name == "__dict__" else ClassValue(obj.cls)
    index, attr = lookup.mro_lookup(cls, name)
    found = index is not None
    guarded = isinstance(obj, ObjectValue) and obj.source is not None
    if found and is_data_descriptor(attr):
        entry = lookup.guard_found_on_class(tx.output, cls, name, index)
        lookup.guard_entry_identity(tx.output, entry, attr)  # NOTE [__getattr__ after a getter's AttributeError]
        return getattr_after_error(tx, obj, name, cls, default_lookup, lambda: descriptor_attr(tx, obj, name, attr))
    if isinstance(obj, NewObjectValue):
        if name == "id":
            from .hook_handles import note_id_read  # NOTE [Hook ids that never leave the trace]
            note_id_read(tx, obj)
        if name in obj.attrs:
            return obj.attrs[name]
    elif tx.output.side_effects.attr(real, name) is not None:
        return tx.output.side_effects.attr(real, name)
    elif name in (raw_dict := instance_dict_of(real) or {}):  # read past a Python __getattribute__
        if obj.source is None:
            if isinstance(obj, NNModuleValue):  # NOTE [Modules with their own __init__ made while tracing]
                from .modules import made_module_attr
                return made_module_attr(obj, raw_dict[name])
            return wrap_unguarded(raw_dict[name])
        lookup.guard_instance_entry(tx.output, obj.source, real, cls, name)  # NOTE [Guards run no user code]
        return wrap(tx.output, raw_dict[name], lookup.attr_source(obj.source, real, name))
    if found:
        if guarded and tx.output.side_effects.attr(real, name) is None:
            lookup.guard_not_in_instance(tx.output, obj.source, real, name)
        entry = lookup.guard_found_on_class(tx.output, cls, name, index)
        return getattr_after_error(tx, obj, name, cls, default_lookup, lambda: class_level_attr(tx, obj, cls, name,
                                                                                                attr, entry))
    return _attr_not_found(tx, obj, name, cls, real, guarded, default_lookup)


def _attr_not_found(tx, obj: Value, name: str, cls: type, real, guarded: bool, default_lookup: bool) -> Value:
    """object_attr where `name` is on no class of the MRO and not in the instance: nn.Module's slots, a user
    __getattr__ (inlined), or AttributeError (absence guarded)."""
    if default_lookup:  # NOTE [object.__getattribute__ calls no __getattr__]
        lookup.guard_not_in_instance(tx.output, obj.source if guarded else None, real, name)
        lookup.guard_mro(tx.output, cls)
        lookup.guard_class_absent(tx.output, cls.__mro__, name)
        raise UserException(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'"))
    getattr_index, getattr_impl = lookup.mro_lookup(cls, "__getattr__")
    if issubclass(cls, torch.nn.Module) and lookup.is_module_default(getattr_impl, "__getattr__"):
        lookup.guard_class_absent(tx.output, cls.__mro__, name)
        lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, "__getattr__",
                                                                           getattr_index), getattr_impl)
        if guarded:  # `object.__setattr__(m, name, v)` puts v in __dict__, where it shadows the slots
            lookup.guard_not_in_instance(tx.output, obj.source, real, name)
        return _module_slot(tx, obj, name)
    if getattr_index is not None and isinstance(getattr_impl, types.FunctionType):
        # NOTE [User __getattr__ inlined]: the name is on no class of the MRO and not in the instance (both
        # guarded, as for nn.Module's slots above), so Python calls the class's own __getattr__ (a config
        # module's `self.scale` served from a dict): it is traced like a property getter, its entry guarded
        # by identity. object.__getattribute__ never calls it (NOTE [object.__getattribute__ calls no __getattr__]).
        lookup.guard_class_absent(tx.output, cls.__mro__, name)
        lookup.guard_entry_identity(tx.output, lookup.guard_found_on_class(tx.output, cls, "__getattr__",
                                                                           getattr_index), getattr_impl)
        if guarded:
            lookup.guard_not_in_instance(tx.output, obj.source, real, name)
        return tx.call(UserFunctionValue(getattr_impl), [obj, ConstantValue(name)], {})
    if getattr_index is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"{cls.__name__}.__getattr__ for {name!r}")
    if isinstance(obj, NewObjectValue) or tx.output.side_effects.attr(real, name) is None:
        lookup.guard_absent(tx.output, obj.source if guarded else None, real, cls, name)
    raise UserException(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'"))


# NOTE [Attributes of OrderedDicts from outside]: an OrderedDict instance has a __dict__ (`Module.state_dict()`
# returns one with `_metadata`); a dict value from outside answered every attribute read as a dict's, so
# `hasattr(sd, "_metadata")` was False (eager True) and `sd._metadata` raised. An OrderedDict from outside
# keeps its real object (builder._wrap_dict): a name in its instance dict is read through `sd.name`
# (guarded by value, and the class's entry by lookup, as for objects); a name it lacks that is no dict
# method either is guarded absent from the instance dict before the AttributeError is raised.
def _ordered_dict_instance_attr(tx, obj: Value, real: Any, name: str) -> Value:
    lookup.guard_lookup(tx.output, type(real), name)
    return wrap(tx.output, vars(real)[name], lookup.attr_source(obj.source, real, name))


def traced_slot(tx, obj: Value, slot: str) -> Value | None:
    """NOTE [Module slots written while tracing]: the abstract value of a module's `_parameters`,
    `_buffers` or `_modules` dict when the trace already holds one (it read the dict as an object, e.g.
    `module._parameters[name] = t` in torch.func.functional_call's swap), else None. Reads of the
    module's entries then go through that value, so they see the trace's own writes (the real dict is
    only written when the side effects are replayed after the graph)."""
    seen = tx.output._by_object.get(id(table := obj.obj.__dict__.get(slot)))
    if obj.source is None or seen is None or seen[0] is not table:
        return None
    from .reentrant_reads import region_saw  # NOTE [State the frame writes around a reentrant call]
    return region_saw(tx.output.side_effects, tx.output.alias_of(table, AttrSource(obj.source, slot)))


def _module_slot(tx, obj: Value, name: str) -> Value:
    from .comparisons import contains
    from .protocol import getitem
    mod = obj.obj
    for slot in ("_parameters", "_buffers", "_modules"):
        traced = traced_slot(tx, obj, slot)
        if traced is not None:  # NOTE [Module slots written while tracing]
            if contains(tx, ConstantValue(name), traced):
                return getitem(tx, traced, ConstantValue(name))
            continue
        table = mod.__dict__.get(slot, {})
        if name in table:
            value = table[name]
            if value is None:
                if obj.source is not None:
                    tx.output.guard_constant(DictSlotSource(obj.source, slot, name), None)
                return ConstantValue(None)
            if obj.source is None:
                return _unsourced_submodule(obj, value) if slot == "_modules" else _unsourced(name)
            return wrap(tx.output, value, DictSlotSource(obj.source, slot, name))
    if obj.source is not None:  # absent (hasattr, getattr default): in no slot, not in __dict__ (NOTE [Lookup facts])
        lookup.guard_not_in_instance(tx.output, obj.source, mod, name)
        for slot in ("_parameters", "_buffers", "_modules"):
            e = f"{obj.source.expr(tx.output.names)}.{slot}"
            tx.output.add_guard("MODULE_ATTR_ABSENT", f"{name!r} not in {e}", obj.source,
                                expected=f"no {slot[1:-1]} {name!r}", actual=f"{e}.get({name!r})", cost=COST_ID)
    raise UserException(AttributeError(f"'{type(mod).__name__}' object has no attribute '{name}'"))


def _unsourced_submodule(owner: Value, module: Any) -> Value:
    value = NNModuleValue(module)
    if getattr(owner, "made_in_trace", False):  # NOTE [Modules made while tracing that outlive the trace]
        value.made_in_trace, value.made_at = True, getattr(owner, "made_at", None)
    return value


def _unsourced(name: str) -> Value:
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"parameter {name!r} of a module without a source")
