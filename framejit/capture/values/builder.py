"""`wrap`: turn a real Python object read through a Source into an abstract value, adding the guards that
make every later use of it sound.

Each kind of object gets the cheapest guard that pins what tracing relies on: tensors their metadata,
Python scalars their value, functions, classes and modules their identity, other objects their type
(their attributes are guarded one by one when read), containers their type and length (or keys).
Objects reached without a Source (e.g. attributes of `torch` itself, see NOTE [Library modules]) are
wrapped unguarded.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import enum
import functools
import inspect
import re
import sys
import types
from typing import Any

import torch

from ...guards.plain_reads import is_a
from ...guards.same_values import exact_key, has_zero, same_items, typed_items
from ...guards.same_values import same_exact_keys as _same_exact_keys, same_keys as _same_keys
from ..breaks import BreakKind, Unsupported
from ..parametrized_classes import rely_on_identity
from ..sources import AttrSource, ItemSource, LocalSource, Source
from ..tensor_subclasses import opaque_subclass
from .base import ConstantValue, Value
from .callables import BoundMethodValue, BuiltinValue, PartialValue, TensorMethodValue, UserFunctionValue
from .containers import DictValue, ListValue, SetValue, TupleValue
from .objects import ClassValue, NNModuleValue, ObjectValue, PyModuleValue
from .plain_bases import plain_namedtuple
from .iterator_wrap import (_LIST_ITERATOR, _LIST_REVERSE_ITERATOR, _SEQUENCE_ITERATORS, _wrap_list_iterator,
                            _wrap_list_reverse_iterator, _wrap_sequence_iterator)

_SCALARS = (bool, int, float, str, bytes, complex, type(None))
_ID_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format, type(Ellipsis), type(NotImplemented),
                 type(dataclasses.MISSING), type(dataclasses._HAS_DEFAULT_FACTORY),  # dataclass __init__ sentinels
                 types.GetSetDescriptorType, types.MemberDescriptorType,  # C-level descriptors (a class __dict__)
                 torch.nn.attention.SDPBackend)  # NOTE [SDPA backend flags] (pybind enum members are singletons)
_IMMUTABLE_OBJECTS = (types.CodeType, inspect.Signature, inspect.Parameter)
_OPAQUE_CONTAINERS = (list, tuple, dict, set, frozenset, type({}.keys()), type({}.values()), type({}.items()), enumerate,
                      zip, reversed, type(iter(set())), *{type(f(c)) for f in (iter, reversed) for c in ([], (), {}, {}.values(), {}.items())})
_BUILTIN_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                      types.MethodDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType,
                      torch._ops.OpOverload, torch._ops.OpOverloadPacket)

# NOTE [Library modules]: attributes of these modules are treated as fixed for the life of the process
# (as TorchDynamo does): reading `torch.relu` or `math.pi` adds no guard. Attributes of any other module
# (the user's own) are guarded by identity or value like any global.
LIBRARY_MODULE_PREFIXES = ("torch", "math", "operator", "functools", "itertools", "builtins", "typing",
                           "collections", "dataclasses", "enum", "numbers", "abc", "types", "numpy")


def is_library_module(module: types.ModuleType) -> bool:
    name = getattr(module, "__name__", "") or ""
    return name.split(".")[0] in LIBRARY_MODULE_PREFIXES or name.startswith("torch.")


def wrap(out, obj: Any, source: Source | None) -> Value:
    """The abstract value of `obj`, guarded through `source` (unguarded when source is None)."""
    if source is not None:
        cached = out.cached(source)
        if cached is not None:
            return cached
        mutable = _has_identity(obj)
        value = out.alias_of(obj, source) if mutable else None
        if value is None:
            if type(obj) is dict:
                out.side_effects.check_dict_read(obj)  # NOTE [Stores under a buffer's name]
            value = _wrap_guarded(out, obj, source)
            if mutable:
                out.remember_object(obj, source, value)
                _link_instance_dict(out, obj, source, value)
            elif issubclass(type(obj), (types.FunctionType, types.ModuleType)):  # not isinstance: no __class__ read
                from ..namespace_owners import link_namespace_owner
                link_namespace_owner(out, obj, source)  # NOTE [Functions and modules beside their dicts]
        return out.remember(source, value)
    return wrap_unguarded(obj)


def instance_dict(obj: Any) -> dict | None:
    """The object's own `__dict__` (read past any `__getattr__` or property), if it is a plain dict; no code of
    the class runs (NOTE [Instance dicts read without user code] in codegen_runtime.py)."""
    from ..codegen_runtime import real_instance_dict
    return real_instance_dict(obj)


def _link_instance_dict(out, obj: Any, source: Source, value: Value) -> None:
    """NOTE [Instance dicts as dicts]: an object's `__dict__` reached as a dict (`o.__dict__`, `vars(o)`
    before a break, a dict passed in that is some object's `__dict__`) and the object's attributes are two
    abstract values over one storage: a write through the dict would not be seen by `o.a`. The dict value
    is marked (`instance_dict_of`) so that a write through it is a graph break (it runs in Python, and
    later reads come after it); `OutputGraph.distinct_objects_guard` also pins on later calls that the
    outside dicts of the trace are not instance dicts of its objects."""
    owners = out.__dict__.setdefault("instance_dict_owners", {})
    if type(obj) is dict:
        owner = owners.get(id(obj))
        if owner is not None and owner[0] is obj:
            if len(owner) > 2:  # a function's or module's (NOTE [Functions and modules beside their dicts])
                from ..namespace_owners import check_owner_stores
                check_owner_stores(out, owner[2], owner[1])
            out.side_effects.apply_pending_attrs(obj, value)  # NOTE [Stores under a dict the trace holds]
            value.instance_dict_of = owner[1]
        return
    d = instance_dict(obj)
    if d is None:
        return
    owners[id(d)] = (d, source)
    from ..namespace_owners import mark_held_dict
    mark_held_dict(out, d, source, "the instance dict")



def _symbolic_size(out, obj: torch.Size, source: Source) -> Value:
    """A torch.Size that changed between calls (`shape = x.shape` carried into a resume function): its
    items are symbolic ints (NOTE [Dynamic ints]), guarded by type and length, as the tensor's sizes were in
    the frame that read them."""
    e = source.expr(out.names)
    out.guard_type(source, torch.Size)
    out.add_guard("LENGTH", f"___len({e}) == {len(obj)}", source, expected=str(len(obj)), actual=f"___len({e})")
    return TupleValue([out.add_int_input(v, ItemSource(source, i)) for i, v in enumerate(obj)], cls=torch.Size)


def _nested_tensor(out, obj: torch.Tensor, source: Source) -> Value:
    """NOTE [Nested tensors stay out of graphs]: fake tensors cannot describe a strided nested tensor (its
    sizes are per component: `size()` raises), so one never becomes a graph input. It is an opaque object,
    guarded by type and nestedness, that code can store and pass on; an operation on it breaks there (a
    resume function that merely receives one keeps the rest of its code captured)."""
    e = source.expr(out.names)
    out.guard_type(source, torch.Tensor)
    out.add_guard("NESTED", f"{e}.is_nested", source, expected="a nested tensor", actual=f"{e}.is_nested")
    return ObjectValue(obj, source)


def _is_argument(source: Source) -> bool:
    """An int argument of the frame (NOTE [Dynamic ints]: symbolic from the first call under dynamic=True,
    as torch.compile's unspecialised ints; attributes and globals become symbolic when they change). An
    item of an argument counts too: a compiled module's arguments are items of module_call's *args and
    **kwargs (a position offset passed to model(x, past, offset) was static at first, one more compile)."""
    from ..sources import ItemSource, LocalSource
    if type(source) is ItemSource and source.key_source is None and type(source.key) in (int, str):
        source = source.base
    return type(source) is LocalSource


def _floats_dynamic() -> bool:
    """Whether float arguments may become graph inputs (the dynamic_floats knob); under dynamic=True they
    are from the first call, as torch.compile(dynamic=True) makes them (NOTE [Dynamic floats])."""
    from ... import config
    return config.dynamic_floats


def _wrap_guarded(out, obj: Any, source: Source) -> Value:
    if _lookup_runs_user_code(obj) and not issubclass(type(obj), torch.Tensor):
        out.guard_type(source, type(obj))  # NOTE [Wrapping without running user code]
        return NNModuleValue(obj, source) if issubclass(type(obj), torch.nn.Module) else ObjectValue(obj, source)
    if isinstance(obj, torch.Tensor):
        if type(obj) is torch.Tensor and obj.is_nested:
            return _nested_tensor(out, obj, source)
        return opaque_subclass(out, obj, source) or out.add_input(obj, source)  # NOTE [Tensor subclasses traced
        # as tensors]: one with its own __torch_function__ or __torch_dispatch__ is an opaque object
    if type(obj).__module__.startswith("numpy"):
        from ..numpy_scalars import wrap_dynamic_scalar
        from ..numpy_support import wrap_numpy
        value = wrap_dynamic_scalar(out, obj, source, _is_argument(source))  # NOTE [Dynamic NumPy scalars]
        if value is None:
            value = wrap_numpy(out, obj, source)  # NOTE [NumPy as torch]
        if value is not None:
            return value
    for rule in (_wrap_number_or_constant, _wrap_container):
        wrapped = rule(out, obj, source)
        if wrapped is not None:
            return wrapped
    if isinstance(obj, torch.nn.Module):
        out.guard_type(source, type(obj))
        return NNModuleValue(obj, source)
    wrapped = _wrap_view_or_iterator(out, obj, source)
    if wrapped is not None:
        return wrapped
    from ..context import (AUTOCAST_CLASSES, BLOCK_CLASSES, DEVICE_AUTOCAST, GRAD_CLASSES, ctx_from_object,
                           plain_ctx_class)
    from ..getitem_mode import is_mode_object
    if isinstance(obj, BLOCK_CLASSES) or isinstance(obj, GRAD_CLASSES) and plain_ctx_class(type(obj)) or \
            type(obj) in AUTOCAST_CLASSES or type(obj) in DEVICE_AUTOCAST or \
            is_mode_object(obj):  # NOTE [Subclasses of torch context classes], [Getitem-to-index blocks]
        return ctx_from_object(out, obj, source)
    return _wrap_callable_or_object(out, obj, source)


def _wrap_number_or_constant(out, obj: Any, source: Source) -> Value | None:
    """Numbers (dynamic or guarded constants), strings and sequences carried as changing, immutable objects,
    devices and sizes (None: none of them)."""
    if type(obj) is float and (out.dynamic_floats and source.describe() in out.dynamic_floats or (
            out.dynamic is True and _is_argument(source) and _floats_dynamic())):
        return out.add_float_input(obj, source)  # NOTE [Dynamic floats] in values/scalars.py
    if type(obj) is int and (out.dynamic_ints and source.describe() in out.dynamic_ints or (
            out.dynamic is True and _is_argument(source))):
        return out.add_int_input(obj, source)  # NOTE [Dynamic ints] in capture/shapes.py
    if type(obj) is str and (out.dynamic_ints or out.dynamic_floats) and source.describe() in {
            *out.dynamic_ints, *out.dynamic_floats} or type(obj) is re.Match:  # NOTE [Strings carried across breaks]
        from ..changing_strings import changing_string  # NOTE [Strings that change between calls]
        return changing_string(out, obj, source)
    if type(obj) in _OPAQUE_CONTAINERS and out.dynamic_ints and source.describe() in out.dynamic_ints or \
            type(obj) in (bytearray, memoryview):  # NOTE [Mutable buffers carried across breaks]: from any source
        from ..carried_loops import opaque_sequence  # a dict or set: NOTE [Dict and set results of changing size]
        return opaque_sequence(out, obj, source)  # NOTE [Sequences of changing length carried across breaks]
    if type(obj) in _SCALARS:
        out.guard_constant(source, obj)
        return ConstantValue(obj, source)
    if isinstance(obj, _ID_CONSTANTS) or isinstance(obj, enum.Enum) or type(obj) in _IMMUTABLE_OBJECTS:
        out.guard_id(source, obj)  # immutable objects, e.g. a code object carried across a graph break
        return ConstantValue(obj, source)
    if isinstance(obj, torch.device):
        out.guard_type(source, torch.device)
        e = source.expr(out.names)
        out.add_guard("CONSTANT_MATCH", f"{e} == {out.name_of(obj, 'dev')}", source, expected=str(obj), actual=e)
        return ConstantValue(obj, source)
    if isinstance(obj, torch.Size):
        if out.dynamic_ints and source.describe() in out.dynamic_ints or (
                out.dynamic is True and _is_argument(source) and all(type(v) is int for v in obj)):
            return _symbolic_size(out, obj, source)
        out.guard_constant(source, obj)
        return ConstantValue(obj, source)
    return None


def _wrap_container(out, obj: Any, source: Source) -> Value | None:
    """Lists, tuples, namedtuples, dicts and sets read from outside (None: none of them)."""
    if isinstance(obj, (tuple, list)) and type(obj) in (tuple, list) or plain_namedtuple(out, obj):
        return _wrap_sequence(out, obj, source)
    from .outside import lazy_dict, outside_dict
    if lazy_dict(obj):
        return outside_dict(out, obj, source)  # NOTE [Dicts from outside]
    if type(obj) in (dict, collections.OrderedDict, collections.defaultdict):
        return _wrap_dict(out, obj, source)
    from ..mappings import plain_mappingproxy, wrap_mappingproxy
    if plain_mappingproxy(obj):
        return wrap_mappingproxy(out, obj, source)  # NOTE [Mappingproxies] in capture/mappings.py
    from ..identity_keys import is_set_element  # NOTE [Sets of functions from outside]
    if type(obj) in (set, frozenset) and all(is_set_element(i) for i in obj):
        if type(obj) is set:
            from .outside import outside_set  # NOTE [Sets from outside]
            return outside_set(out, obj, source)
        guard_set(out, obj, source)
        value = SetValue(obj, source, type(obj))
        value.order = list(obj)  # NOTE [Set order]
        value.frozen = obj if type(obj) is frozenset else None
        return value
    return None


def _wrap_view_or_iterator(out, obj: Any, source: Source) -> Value | None:
    """Live dict views and list, reversed-list and sequence iterators (None: none of them)."""
    from ..mappings_runtime import VIEW_KINDS
    if type(obj) in VIEW_KINDS:  # NOTE [Live dict views]
        from ..mappings import wrap_view
        return wrap_view(out, obj, source)
    if type(obj) is _LIST_ITERATOR:
        return _wrap_list_iterator(out, obj, source)
    if type(obj) is _LIST_REVERSE_ITERATOR:
        return _wrap_list_reverse_iterator(out, obj, source)
    if type(obj) in _SEQUENCE_ITERATORS:
        return _wrap_sequence_iterator(out, obj, source)
    return None


def guard_set(out, obj: Any, source: Source) -> None:
    """A set or frozenset of constants: its type, its elements and their types in iteration order (NOTE [Set order])."""
    out.guard_type(source, type(obj))
    e, items = source.expr(out.names), out.name_of(list(obj), "set")  # NOTE [Float guards are bitwise]: zeros
    check = f"{out.name_of(same_items, 'same_items')}({e}, {items})" if has_zero(obj) else f"___list({e}) == {items}"
    out.add_guard("CONSTANT_MATCH", check, source, expected=repr(list(obj)), actual=f"___list({e})")
    out.add_guard("CONSTANT_MATCH", f"___list(map(___type, {e})) == {out.name_of([type(v) for v in obj], 'types')}",
                  source, expected=repr([type(v).__name__ for v in obj]), actual=f"___list(map(___type, {e}))")


def _wrap_callable_or_object(out, obj: Any, source: Source) -> Value:
    """Wrap a callable (bound method, builtin, function, class, partial) or another object read from outside."""
    wrapped = _wrap_bound_or_builtin(out, obj, source)
    if wrapped is not None:
        return wrapped
    if isinstance(obj, types.FunctionType):
        return _wrap_function(out, obj, source)
    if isinstance(obj, types.ModuleType):
        out.guard_id(source, obj)
        return PyModuleValue(obj, source)
    if isinstance(obj, type):
        out.guard_id(source, obj)
        rely_on_identity(out, obj)  # NOTE [Parametrized classes alike]
        return ClassValue(obj, source)
    if type(obj) is functools.partial:  # a subclass may have its own __call__: an object (NOTE [Subclasses
        return _wrap_partial(out, obj, source)  # modelled as their base])
    from ..carried_loops import opaque_iterator
    if (stepped := opaque_iterator(out, obj, source)) is not None:  # NOTE [Iterators stepped as Python]
        return stepped
    if type(obj) is object:
        # NOTE [Sentinel objects]: a bare `object()` (`_MISSING = object()` in torch.func.functional_call,
        # `_sentinel` defaults) has no state but its identity: guarded by identity, compared with `is`.
        out.guard_id(source, obj)
        return ObjectValue(obj, source)
    if type(obj) is range:
        # NOTE [Ranges from outside]: a range is immutable; one live at a graph break (`r = range(n)` before a
        # print(), random.sample's `population`) is a constant of the resume function, guarded by its type and
        # its start, stop and step (== on ranges compares their items: range(0) == range(5, 5)). It was
        # "L['r'] is a range", and the resume function ran wholly eagerly.
        out.guard_type(source, range)
        for part in ("start", "stop", "step"):
            out.guard_constant(AttrSource(source, part), getattr(obj, part))
        return ConstantValue(obj, source)
    if type(obj) is slice and all(type(p) in (int, bool, type(None)) for p in (obj.start, obj.stop, obj.step)):
        from .containers import outside_slice
        return outside_slice(out, obj, source)  # NOTE [Slices from outside] in values/containers.py
    if type(obj) in (re.Pattern, re.Match):  # immutable (NOTE [Regular expressions on constants])
        out.guard_id(source, obj)
        return ConstantValue(obj, source)
    if type(obj) is collections.deque:
        from ..mappings import outside_deque  # NOTE [Deques from outside]
        return outside_deque(out, obj, source)
    if type(obj).__module__ == "builtins" and not hasattr(obj, "__dict__"):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{source.describe()} is a {type(obj).__name__}")
    out.guard_type(source, type(obj))
    return ObjectValue(obj, source)


def _wrap_bound_or_builtin(out, obj: Any, source: Source) -> Value | None:
    """Bound methods, super objects, bound tensor and builtin methods, custom ops and torch/builtin callables
    (None: `obj` is none of them)."""
    if isinstance(obj, types.MethodType):
        out.guard_type(source, types.MethodType)
        func = wrap(out, obj.__func__, AttrSource(source, "__func__"))
        self_value = wrap(out, obj.__self__, AttrSource(source, "__self__"))
        return BoundMethodValue(func, self_value, source)
    if type(obj) is super and obj.__self__ is not None:  # e.g. `s = super()` carried across a graph break:
        out.guard_type(source, super)  # looked up as super looks up (NOTE [Attributes of super objects])
        out.guard_id(AttrSource(source, "__thisclass__"), obj.__thisclass__)
        from ..attributes import SuperValue
        return SuperValue(obj.__thisclass__, wrap(out, obj.__self__, AttrSource(source, "__self__")))
    if isinstance(obj, types.BuiltinMethodType) and is_a(getattr(obj, "__self__", None), torch.Tensor):
        # a bound tensor method, e.g. `x.mul` left on the stack at a graph break
        out.guard_type(source, types.BuiltinMethodType)
        out.guard_constant(AttrSource(source, "__name__"), obj.__name__)
        tensor = wrap(out, obj.__self__, AttrSource(source, "__self__"))
        method = TensorMethodValue(tensor, obj.__name__)
        method.source = source  # rebuilt as itself: rebuilt as `tensor.<name>`, the read ran a subclass's Python
        return method  # __getattribute__ once more than eager at the break (review revO O12)
    if _fresh_bound_builtin(obj):
        return _bound_builtin(out, obj, source)  # NOTE [Bound builtin methods by their parts]
    overload = _custom_op_overload(obj)
    if overload is not None:  # NOTE [Custom ops]: by its type and what its call runs (persistable by name)
        out.guard_type(source, type(obj))
        out.guard_id(AttrSource(source, "_opoverload"), overload)
        return BuiltinValue(overload)
    if isinstance(obj, _BUILTIN_CALLABLES) or _is_torch_callable(obj):
        out.guard_id(source, obj)
        return BuiltinValue(obj, source)
    return None


def _wrap_function(out, obj: types.FunctionType, source: Source) -> Value:
    from ..compiled_callees import torch_compiled_original  # NOTE [torch.compile'd functions called while tracing]
    if (original := torch_compiled_original(out, obj, source)) is not None:
        return original
    if obj.__closure__ or "<" in obj.__qualname__:
        # NOTE [Closures guarded by code]: a nested function is often made anew on every call (a lambda
        # built by the caller, a closure rebuilt after a graph break); guarded by its code and globals,
        # its cells' contents and defaults read (and guarded) through `source` (NOTE [Defaults of
        # closures guarded by code]). Module-level functions keep their one identity guard, except
        # lambdas (`m.register_forward_hook(lambda mod, args, out: out + 1)` at a script's top level):
        # no name imports them, so an identity guard kept every entry that read one in memory only and
        # a warm process traced it again (tools/warm_gaps.py module_hooks).
        out.guard_type(source, types.FunctionType)
        out.guard_id(AttrSource(source, "__code__"), obj.__code__)
        out.guard_id(AttrSource(source, "__globals__"), obj.__globals__)
        from ..call_located import record_code_source  # NOTE [Code found through the call's arguments]
        record_code_source(out, obj, source)
        from ..function_attrs import guard_defaults_shape  # (function_attrs imports this module)
        guard_defaults_shape(out, source, obj)
        value = UserFunctionValue(obj, source)
        value.by_code = True
        return value
    out.guard_id(source, obj)
    return UserFunctionValue(obj, source)


def _wrap_partial(out, obj: functools.partial, source: Source) -> Value:
    out.guard_type(source, functools.partial)
    func = wrap(out, obj.func, AttrSource(source, "func"))
    args = [wrap(out, a, ItemSource(AttrSource(source, "args"), i)) for i, a in enumerate(obj.args)]
    keywords = AttrSource(source, "keywords")
    # the partial's args and keywords can change after the call (`p.keywords["b"] = 2`, __setstate__):
    # their length and key list are facts of the trace like their items
    a, k = AttrSource(source, "args").expr(out.names), keywords.expr(out.names)
    out.add_guard("LENGTH", f"___len({a}) == {len(obj.args)}", source, expected=str(len(obj.args)),
                  actual=f"___len({a})")
    out.add_guard("DICT_KEYS", f"___list({k}) == {list(obj.keywords)!r}", source,
                  expected=repr(list(obj.keywords)), actual=f"___list({k})")
    kwargs = {k: wrap(out, v, ItemSource(keywords, k)) for k, v in obj.keywords.items()}
    return PartialValue(func, args, kwargs, source, obj.keywords, obj)


def _wrap_sequence(out, obj: Any, source: Source) -> Value:
    if type(obj) is list:
        from .outside import outside_list  # NOTE [Lists from outside]
        return outside_list(out, obj, source)
    out.guard_type(source, type(obj))
    e = source.expr(out.names)
    out.add_guard("LENGTH", f"___len({e}) == {len(obj)}", source, expected=str(len(obj)), actual=f"___len({e})")
    items = [wrap(out, item, ItemSource(source, i)) for i, item in enumerate(obj)]
    cls = type(obj)
    return (ListValue if cls is list else TupleValue)(items, source, cls)


# NOTE [Torch enums as dict keys]: dtypes, devices, layouts and memory formats are immutable values compared by
# value (a dtype is a singleton); library tables keyed by them (diffusers' `_DTYPE_UNSUPPORTED_DEVICES.get(dtype)`
# in every UNet2DConditionModel/ControlNet/Flux forward, AMP's dtype tables) were "non-constant keys": a break
# in the helper, whose resume function then ran wholly eagerly.
_KEY_SCALARS = (str, int, bool, float, bytes, type(None), torch.Size, torch.dtype, torch.device, torch.layout,
                torch.memory_format)


def _constant_key(key: Any) -> bool:
    """Keys modelled as constants: scalars (not NaN, which equals no copy of itself), torch.Size, enum
    members, classes (NOTE [Classes as dict keys]), functions (NOTE [Functions as dict keys]) and tuples of these."""
    if type(key) is tuple:
        return all(_constant_key(k) for k in key)
    if type(key) is float:
        return key == key
    return type(key) in _KEY_SCALARS or isinstance(key, enum.Enum) or _class_key(key) or _function_key(key) or \
        value_key_fields(key) is not None


# NOTE [Frozen dataclasses as dict keys]: an instance of a frozen dataclass whose `__eq__` and `__hash__` are the
# ones dataclasses generated (eq=True, frozen=True) hashes and compares by its fields' values, so a table keyed
# by them (`{Key(1, "x"): ...}`, a cache keyed by a config) is keyed by those values. With fields that are
# constant keys themselves it is a constant key: from outside, guarded by `==` with a copy (not the object
# itself, which a bypassing `object.__setattr__` could change), and as a key made or passed in the trace, a
# real instance built from the field values the trace reads (identity_keys.set_element). It was "non-constant
# keys" (the frame, or the resume function holding the dict, ran wholly eagerly) or a break at the lookup.
def value_key_class(cls: type) -> bool:
    """A frozen dataclass whose __eq__ and __hash__ are the generated ones over all its compared fields."""
    params = getattr(cls, "__dataclass_params__", None) if isinstance(cls, type) else None
    if params is None or not params.frozen or not params.eq:
        return False
    if not all(getattr(fn, "__qualname__", "") == f"{cls.__qualname__}.{fn.__name__}" and
               fn.__code__.co_filename == "<string>" for fn in (cls.__eq__, cls.__hash__)):
        return False  # a hand-written (or inherited) __eq__/__hash__: not the generated ones
    return not any(f.hash is False for f in dataclasses.fields(cls) if f.compare)


def value_key_fields(key: Any) -> tuple | None:
    """The instance attributes of a value-hashed frozen dataclass instance whose fields are all constant
    keys, else None."""
    if isinstance(key, type) or not value_key_class(type(key)) or not hasattr(key, "__dict__"):
        return None
    names = tuple(vars(key))
    return names if all(_constant_key(getattr(key, name)) for name in names) else None


def _function_key(key: Any) -> bool:
    """A plain function, an unbound method of a C class (`torch.Tensor.mul`, a __torch_function__ table's key), or a
    builtin function that is no method of an object (`torch.relu`; not `lst.append`: NOTE [Functions as dict keys])."""
    if type(key) is not types.BuiltinFunctionType:  # no getattr on other keys: a class's __getattr__ would run
        return type(key) in (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
    owner = key.__self__
    return owner is None or isinstance(owner, (types.ModuleType, type))


# NOTE [Classes as dict keys]: registries keyed by classes or tuples of classes are common library code
# (torch.distributions.kl's `_KL_MEMOIZE[type(p), type(q)]`, dispatch tables keyed by config or module
# classes); such a dict was "non-constant keys", and when it was on the stack at the break the resume
# function ran wholly eagerly. A class whose metaclass keeps type's identity equality and hash is a
# constant key: the keys guard (`_same_keys`) compares it by `==`, which is identity for it.
# NOTE [Functions as dict keys]: dispatch tables keyed by functions (`{torch.relu: 1.0, F.gelu: 2.0, my_act: ..}`,
# a registry of loss or activation functions) hash and compare by identity, like classes: a plain or builtin
# function is a constant key, compared by `==` (identity) in the keys guard. Such a dict was "non-constant
# keys" and the frame (or the resume function holding it) ran wholly eagerly. A key read back (iteration,
# `list(d)`) is the function itself as a callable value (values/mappings.key_value), rebuilt as that object.
def _class_key(key: Any) -> bool:
    meta = type(key)
    return isinstance(key, type) and meta.__eq__ is type.__eq__ and meta.__hash__ is type.__hash__


def _key_types(d: dict) -> tuple:
    return tuple(type(k) for k in d)


def _keys_check(out, e: str, keys: list) -> str:
    """The guard expression of `_same_keys` on the dict named `e`: every name in it has a locator when the
    keys do (a tensor key is `...`, not the object)."""
    from ..identity_keys import identity_hashed  # a key whose identity its own source's guard pins
    expected = ["..." if isinstance(k, torch.Tensor) or identity_hashed(k) else repr(k) if _literal_key(k) else
                out.name_of(copy.copy(k) if value_key_fields(k) is not None else k, "key")
                for k in keys]
    types = [out.name_of(type(k), type(k).__name__) for k in keys]
    exact = tuple(x != "..." and exact_key(k) for x, k in zip(expected, keys))
    fn = out.name_of(_same_exact_keys, 'same_exact_keys') if any(exact) else out.name_of(_same_keys, 'same_keys')
    return (f"{fn}({e}, ({''.join(x + ', ' for x in expected)}), ({''.join(t + ', ' for t in types)})"
            + (f", {exact!r})" if any(exact) else ")"))


def _sound_ordered(od: collections.OrderedDict) -> bool:
    """Whether the OrderedDict's order list holds exactly its table's keys (NOTE [OrderedDicts out of order])."""
    try:
        return len(list(od)) == len(od)
    except (KeyError, RuntimeError):  # a key deleted from the table only
        return False


def _wrap_dict(out, obj: dict, source: Source) -> Value:
    """A dict, OrderedDict or defaultdict: its type and its keys (in order) are guarded; keys that are
    not all strings also have their types guarded (`1 == True == 1.0`, `torch.Size([2]) == (2,)`).
    Tensor keys (a dict keyed by parameters) are guarded by identity and become graph inputs, read as
    `list(d)[i]` (NOTE [Sets of tensors])."""
    # NOTE [OrderedDicts out of order]: `dict.__setitem__(od, k, v)` (or __delitem__) on an OrderedDict stores
    # in its table and bypasses its order list: `len(od)` and `od[k]` then see the key, iteration does not
    # (or raises KeyError). No dict value models that: such an OrderedDict is an object whose operations
    # read its table (NOTE [Dict subclasses] in dict_objects.py) or break (iteration: plain Python does it).
    # The key guard of a sound OrderedDict also checks its length, so its entry never serves a damaged one.
    ordered = isinstance(obj, collections.OrderedDict)
    if ordered and not _sound_ordered(obj):
        out.guard_type(source, type(obj))
        e = source.expr(out.names)
        out.add_guard("DICT_KEYS", f"not {out.name_of(_sound_ordered, 'sound_ordered')}({e})", source,
                      expected="an OrderedDict whose order list and table disagree", actual=e)
        return ObjectValue(obj, source)
    keys = list(obj.keys())
    from ..identity_keys import identity_hashed  # NOTE [Objects as dict keys]
    if not all(_constant_key(k) or type(k) in (torch.Tensor, torch.nn.Parameter) or identity_hashed(k) for k in keys):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"dict {source.describe()} has non-constant keys")
    out.guard_type(source, type(obj))
    e = source.expr(out.names)
    if all(_literal_key(k) for k in keys):
        out.add_guard("DICT_KEYS", f"___list({e}) == {keys!r}" + (f" and ___len({e}) == {len(keys)}" if ordered else ""),
                      source, expected=repr(keys), actual=f"___list({e})")
    if any(type(k) is not str for k in keys):
        check = (f"{out.name_of(_key_types, 'key_types')}({e}) == {out.name_of(_key_types(obj), 'types')}"
                 if all(_literal_key(k) and not typed_items(k) for k in keys) else  # NOTE [Exact keys decided ..]
                 _keys_check(out, e, keys))
        out.add_guard("DICT_KEYS", check, source, expected=repr(keys))
    # NOTE [defaultdict items in guards]: `d[k]` on a defaultdict inserts a missing key, so a guard (or a
    # reload) of an item read through `d[k]` would change the user's dict when the key is gone (a cleared
    # dict got the keys of an older entry's guards); its items are read from a plain copy instead.
    base = source
    if type(obj) is collections.defaultdict:
        from ..dict_objects import _RAW_ITEMS
        from ..sources import CallSource
        base = CallSource(_RAW_ITEMS, source)
    items = {}
    for i, (k, v) in enumerate(obj.items()):
        key, key_source = _dict_key(out, k, source, i)  # NOTE [Keys by their source]
        items[key] = wrap(out, v, ItemSource(base, k) if key_source is None else ItemSource(base, None, key_source))
    if type(obj) is collections.defaultdict:
        from .mappings import DefaultDictValue
        factory = obj.default_factory
        factory_value = None if factory is None else wrap(out, factory, AttrSource(source, "default_factory"))
        if factory is None:
            out.guard_constant(AttrSource(source, "default_factory"), None)
        return DefaultDictValue(items, factory_value, source)
    value = DictValue(items, source, type(obj))
    if type(obj) is collections.OrderedDict:  # NOTE [Attributes of OrderedDicts from outside] in attributes.py
        value.real_object = obj
    return value


def _dict_key(out, key: Any, source: Source, index: int) -> tuple[Any, Source | None]:
    """The dict key as the trace holds it, and for a tensor key the source it is read through: the first
    place the trace saw that tensor (NOTE [Keys by their source])."""
    from ..identity_keys import identity_hashed, set_element
    if not isinstance(key, torch.Tensor) and not identity_hashed(key):  # NOTE [Objects as dict keys]
        return key, None
    from ..sources import CallSource, Ref
    value = wrap(out, key, ItemSource(CallSource(Ref(list, "list"), source), index))
    return set_element(types.SimpleNamespace(output=out), value), value.source


def _literal_key(key: Any) -> bool:
    return type(key) in (str, int, bool, bytes, type(None)) or (type(key) is tuple and all(map(_literal_key, key)))


def _has_identity(obj: Any) -> bool:
    """Objects whose identity matters because they can be mutated (NOTE [Objects by identity] in
    graph.py): containers, modules and user objects; not tensors (graph inputs are deduplicated on their
    own), scalars, functions, classes or Python modules."""
    if _lookup_runs_user_code(obj):
        return not issubclass(type(obj), torch.Tensor)
    if type(obj) in (list, dict, set, collections.OrderedDict, collections.deque, _LIST_ITERATOR,
                     _LIST_REVERSE_ITERATOR, *_SEQUENCE_ITERATORS) or isinstance(obj, torch.nn.Module):
        return True
    return not isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType, torch.Tensor,
                                functools.partial, enum.Enum)) and hasattr(obj, "__dict__")  # NOTE [Partials..]


def _lookup_runs_user_code(obj: Any) -> bool:
    """NOTE [Wrapping without running user code]: `isinstance(obj, T)` with a `T` that `type(obj)` does not
    derive from reads `obj.__class__`, and `hasattr(obj, "__dict__")` reads `obj.__dict__`, both through
    `type(obj).__getattribute__` (and a `__class__` property, if the class defines one). For an object
    whose class has a Python `__getattribute__` (or such a property), wrapping it through the usual chain
    of type tests called that user code dozens of times while tracing (a counting `__getattribute__` gave
    51 on the first call where eager gives 1). Such an object is wrapped as a plain object, guarded by its
    exact type, after only the tests that look at `type(obj)`."""
    cls = type(obj)
    from ..codegen_runtime import dict_overridden
    from ..lookup import has_custom_getattribute  # a function or any object a user class holds (revA A3)
    # a `__dict__` of the class's own (a property): `hasattr(obj, "__dict__")` would run it (NOTE [Instance
    # dicts read without user code] in codegen_runtime.py)
    return has_custom_getattribute(cls) or any("__class__" in vars(k) for k in cls.__mro__[:-1]) or \
        dict_overridden(cls)


def wrap_unguarded(obj: Any) -> Value:
    """A value for an object that needs no guard (a library attribute, or a constant of the code)."""
    if type(obj) in _SCALARS or isinstance(obj, (*_ID_CONSTANTS, torch.device, torch.Size, enum.Enum, slice,
                                                 range, frozenset, types.CodeType)):
        return ConstantValue(obj)
    if type(obj) is tuple:
        return TupleValue([wrap_unguarded(o) for o in obj])
    if isinstance(obj, (inspect.Signature, inspect.Parameter, types.UnionType, types.GenericAlias)):  # immutable
        return ConstantValue(obj)
    if type(obj) is types.MappingProxyType and all(type(k) is str for k in obj):
        return DictValue({k: wrap_unguarded(v) for k, v in obj.items()}, cls=types.MappingProxyType)
    if isinstance(obj, types.ModuleType):
        return PyModuleValue(obj)
    if isinstance(obj, type):
        return ClassValue(obj)
    if isinstance(obj, types.FunctionType) and not _is_torch_callable(obj):
        return UserFunctionValue(obj)
    if callable(obj):
        return BuiltinValue(obj)
    from ..numpy_support import is_numpy_constant
    if is_numpy_constant(obj):  # NumPy scalars, dtypes, finfo/iinfo (NOTE [NumPy as torch])
        return ConstantValue(obj)
    raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"cannot model the object {type(obj).__name__}")


# NOTE [Compiled optimizer steps]: torch.optim's functions and methods are Python over lists of tensors,
# dicts and the optimizer object (state created lazily, foreach ops, `_get_value`): inlined like module
# code, so `framejit.compile(opt.step)` records the update's tensor ops, not one opaque call that neither
# the guards nor the lowering backends could see into. tests/capture/test_compiled_optimizers.py.
# torch.nn.utils likewise (NOTE [Gradient clipping]), its rnn helpers included (NOTE [Packed sequences]).
_INLINED_TORCH_PACKAGES = ("torch.nn.modules", "torch.distributions", "torch.optim", "torch.nn.utils",
                           "torch.utils._ordered_set")  # and OrderedSet, a MutableSet over a dict: no tensors


def _packing_functions() -> frozenset:
    from ..packed_sequences import PACKING_FUNCTIONS
    return PACKING_FUNCTIONS


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a C type (static, or a heap type made immutable)
# C objects whose bound methods the trace models (they read or change the object's contents)
_OPAQUE_OWNER_EXCLUDED = frozenset({list, dict, set, frozenset, tuple, bytearray, str, bytes, int, float, complex,
                                    collections.deque, collections.OrderedDict, collections.defaultdict,
                                    collections.Counter, types.SimpleNamespace, torch.Size})


def _bound_builtin(out, obj: Any, source: Source) -> Value:
    """A C method bound to an object, read from outside: guarded by its parts (the NOTE below)."""
    # NOTE [Bound builtin methods by their parts]: `lock.__exit__` (what BEFORE_WITH leaves for a C
    # manager, passed to a resume function), `d.get`, `obj.__add__`: every attribute read makes a new
    # bound object, so an identity guard on it failed on every call and recompiled until the limit.
    # It is guarded by what it is made of: its type, its name, and the object it is bound to. Bound to
    # a container (`d.get`, `items.append`), which calls may read or change, that object's identity is
    # guarded (a number's value: `k.__add__`) and the method is a builtin the trace models. Bound to an
    # opaque C object (a lock, a file, a StringIO: often made anew per call) only that object's type is
    # guarded (a C type's methods cannot be replaced), and the method stays an opaque object: calling it
    # breaks, and the break passes the real bound method on from the frame, never the one seen while tracing.
    out.guard_type(source, type(obj))
    out.guard_constant(AttrSource(source, "__name__"), obj.__name__)
    if type(obj.__self__) not in _OPAQUE_OWNER_EXCLUDED and type(obj.__self__).__flags__ & _IMMUTABLE_TYPE:
        out.guard_type(AttrSource(source, "__self__"), type(obj.__self__))
        return ObjectValue(obj, source)
    if type(obj.__self__) in _SCALARS:  # `k.__add__`: an equal number behaves the same, whatever its object
        out.guard_constant(AttrSource(source, "__self__"), obj.__self__)
    elif _container_method_of(obj) is not None and isinstance(source, LocalSource):
        # NOTE [Container methods from outside]: `out.append` on the stack at a break (`out.append(f(x))` where
        # f breaks) reached the resume function as this bound method of a list made anew on every call: its
        # identity guard failed on every call, so the resume function was traced again on each one and ran
        # eagerly from the recompile limit on (vilt's `select.append(...)`). Bound to an exact list, dict or
        # set, a resume function's stack value is now what `out.append` is in the trace: the container's method
        # over the container, read (and guarded: type, length, items; aliasing with other reads of it) through
        # `__self__`, answering type() as the builtin method (its `==`, hash and repr are the builtin method's:
        # test_redteam18). Named locals and arguments too (`add = seen.add` before a break, the stdlib's dedup
        # idiom; `f(x, out.append)`): each call of it was a break, traced again on each call. Its attributes are
        # the builtin method's (NOTE [Attributes of bound C methods] in function_attrs.py) and it is a key as
        # eager hashes it (NOTE [Bound C methods as keys] in identity_keys.py): reviews revR R1/R5/R6. Not one
        # held by a global or an attribute (`_log = LOG.append` at module level, LOG growing on every call): its
        # length and items would be guarded where the identity guard kept one entry.
        return _BoundContainerMethod(BuiltinValue(_container_method_of(obj)),
                                     wrap(out, obj.__self__, AttrSource(source, "__self__")), source)
    else:
        out.guard_id(AttrSource(source, "__self__"), obj.__self__)
    return BuiltinValue(obj, source)


class _BoundContainerMethod(BoundMethodValue):
    """A list, dict or set method bound to its container, read from outside (NOTE [Container methods from
    outside]): type() answers the builtin method's type."""

    def python_type(self) -> type:
        return types.BuiltinMethodType


def _container_method_of(obj: Any) -> Any:
    """The method descriptor of a builtin method bound to an exact list, dict or set that the trace models on
    its abstract container (attributes.CONTAINER_METHODS), else None."""
    from ..attributes import CONTAINER_METHODS
    owner = type(obj.__self__)
    if owner not in (list, dict, set) or obj.__name__ not in CONTAINER_METHODS.get(owner, ()):
        return None
    return getattr(owner, obj.__name__)


def _fresh_bound_builtin(obj: Any) -> bool:
    """A C method bound to an object (NOTE [Bound builtin methods by their parts]): its type's attribute of
    that name is a method descriptor or slot wrapper, so each read of it makes a new bound object."""
    if not isinstance(obj, (types.BuiltinMethodType, types.MethodWrapperType)):
        return False
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", None)
    if owner is None or is_a(owner, (type, types.ModuleType)) or not isinstance(name, str):
        return False
    return isinstance(getattr(type(owner), name, None), (types.MethodDescriptorType, types.WrapperDescriptorType))


def _custom_op_overload(obj: Any) -> Any:
    """NOTE [Custom ops]: an op made with `torch.library.custom_op` is a CustomOpDef object whose call is its
    OpOverload's (`torch.ops.<ns>.<name>.default`): the graph calls that overload (FX can name it; the
    CustomOpDef has no `__name__`, and using it as a node target was an internal error that ran the whole
    frame eagerly), and fake tensors run the op's registered fake. The CustomOpDef is guarded by its type and
    the identity of its `_opoverload`: a warm process finds the overload by name, not the CustomOpDef."""
    custom_ops = sys.modules.get("torch._library.custom_ops")
    if custom_ops is None or not isinstance(obj, custom_ops.CustomOpDef):
        return None
    return getattr(obj, "_opoverload", None)


def _is_torch_callable(obj: Any) -> bool:
    """torch functions (C and Python, e.g. torch.add, F.relu) become graph ops rather than being inlined;
    the Python code of nn.Module classes (torch.nn.modules.*) is inlined like user code."""
    if not callable(obj):  # before reading `__module__`: a PEP 562 module's __getattr__ would run
        return False
    module = getattr(obj, "__module__", None) or ""
    if module == "torch.nn.utils.rnn" and getattr(obj, "__name__", None) in _packing_functions():
        return True  # one call, a break: NOTE [Packed sequences]
    if isinstance(obj, type) or not callable(obj) or module.startswith(_INLINED_TORCH_PACKAGES):
        return False  # Python code over tensors and plain objects: inlined (torch.distributions' helpers too)
    code = getattr(obj, "__code__", None)
    if code in _DECORATOR_WRAPPER_CODES or (isinstance(code, types.CodeType) and code.co_flags & inspect.CO_GENERATOR):
        return False  # NOTE [Decorated torch functions]
    if not (module == "torch" or module.startswith("torch.") or module.startswith("torch._C")):
        return False
    return not (isinstance(obj, types.FunctionType) and hasattr(obj, "__wrapped__")) or _named_as_itself(obj)


# NOTE [Torch names that are not the function]: FX writes a call of a function whose `__module__` is a
# torch module by its module and `__name__` (torch.fx.node._get_qualified_name), not through the graph's
# globals. A Python function that functools.wraps gave a torch function's names (it has `__wrapped__`) is
# another object under that name: `torch.vmap(torch.sum)` returns vmap's `wrapped`, named `torch.sum`, so a
# graph calling it called torch.sum on the whole batch (a scalar where eager gives one sum per row), and
# `torch.vmap(torch.Tensor.acos_)` gave `torch._functorch.apis.acos_`, which does not exist (AttributeError
# at the call). Such a wrapper is a graph op only when that name is the function itself (a torch function
# decorated in its own module, whose code is torch's); else it is inlined like user code. A user's wrapper installed
# under the name (`torch.is_grad_enabled = wraps(orig)(f)`) ran only at trace time and in a guard (hsound7 g3.py).
def _named_as_itself(fn: types.FunctionType) -> bool:
    if not fn.__code__.co_filename.startswith(torch.__path__[0] + "/"):
        return False
    try:
        name = torch.fx.node._get_qualified_name(fn)
    except Exception:  # a lambda without source
        return False
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        obj = sys.modules.get(".".join(parts[:cut]))
        if obj is not None:
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
            return obj is fn
    return False


# NOTE [Decorated torch functions]: a torch function decorated with a grad-mode manager
# (`@torch.no_grad()`, e.g. spectral_norm's `_power_method`) or made by `@contextlib.contextmanager`
# (e.g. `torch.nn.utils.parametrize.cached`) is a Python wrapper that functools.wraps gave the torch
# module's name; it takes modules and returns context managers, so it is no graph op. Its code is the
# decorator's (shared by every function so decorated): such wrappers are inlined like user code, and so
# are generator functions (a generator is never a graph op). A torch Python function called with a
# module argument is inlined too (calls.call_builtin).
_DECORATOR_WRAPPER_CODES = (torch.no_grad()(lambda: None).__code__,
                            contextlib.contextmanager(lambda: (yield)).__code__)
