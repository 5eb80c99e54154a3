"""Tensor subclasses: which ones are traced as tensors, the class of an op's result, and the graph boundary.

NOTE [Tensor subclasses traced as tensors]: a subclass of torch.Tensor whose `__torch_function__` is torch's
own (`torch.Tensor.__torch_function__`, or `torch._C._disabled_torch_function_impl` as nn.Parameter has) and
whose `__torch_dispatch__` is torch's own is a graph input like any tensor: its data and metadata are plain
tensor data, and what the subclass adds is Python only (attributes in its `__dict__`, methods, properties).
Its TensorValue carries the class (`cls`), which `type()`, `isinstance` and attribute lookup answer. Eager
runs each torch op on such a tensor through the default `__torch_function__`: the op runs on the plain data,
then every Tensor in the result (also inside a returned tuple or list) that is not already an instance of
the winning class is re-wrapped with `as_subclass(cls)`; no other Python code runs, so the trace records the
op as for a plain tensor and gives the result value that class (`result_class`). The winner is the class
torch's dispatch picks among the overloaded arguments (the Tensor-typed arguments, at the top level or in a
top-level list/tuple: a TensorList): a subclass before its bases, else the first; if another subclass is not
a base of the winner, the default `__torch_function__` answers NotImplemented and eager raises TypeError: the
op breaks. A class with the disabled implementation takes no part (its results are plain, as a Parameter's).
An in-place op returns its written argument itself when that is already of the winning class (`x.add_(y)
is x`, with x's attributes); otherwise (a Parameter written with a subclass operand) eager's re-wrap makes
a new object, and tensor identity (comparisons._same_tensor) answers False for values of different classes.
Attribute reads (attributes._tensor_attr) look in the subclass's own classes first (`subclass_attr`: methods
inlined, properties run, class constants read, each found or absent as NOTE [Lookup facts] guards), then as
for a tensor; `t.as_subclass(K)` in the code is an `aten.alias` node of class K. The guards pin the exact
type (the tensor guard) and, as lookup facts on the class dicts (`guard_subclass`), how the class resolves
`__torch_function__`, `__torch_dispatch__` and the attribute hooks: assigning one later fails a class-dict
fact before any guard reads the tensor (NOTE [Guards run no user code]), and the frame is traced again.
A subclass defining `__getattr__`, `__getattribute__` or `__setattr__` is not traced as a tensor.

At run time (`SubclassBoundary`), the graph gets plain tensors (`as_subclass(torch.Tensor)`: the same data,
version counter and autograd history), so backends never see a subclass, and each output whose traced class
is a subclass is re-wrapped with `as_subclass`, in the grad mode eager re-wrapped it in (a leaf that requires
grad re-wrapped under no_grad has no grad_fn). An input returned as it is is reloaded from its source, so it
keeps its identity and attributes. Entries with such a boundary stay in memory (not in the frame cache).

A subclass with its own `__torch_function__` or `__torch_dispatch__` (or a wrapper subclass) is not traced:
it is an opaque object (values/builder.py) guarded by type, and an operation on it, or a read of a Tensor
attribute (`shape`, a method: their getters run the subclass's code), is a graph break whose reason names the
class (`opaque_reason`); the ops run in Python, as eager runs them, and the rest of the frame stays captured.
Its own methods and Python attributes are read as any object's. A subclass whose only departure is its own
`__torch_function__` classmethod is traced, with that function inlined (NOTE [Inlined __torch_function__]).
"""
from __future__ import annotations

from typing import Any

import torch
from ..grad_mode import grad_mode
from .breaks import BreakKind, Unsupported

_DEFAULT_TF = torch.Tensor.__torch_function__.__func__
_DISABLED_TF = torch._C._disabled_torch_function_impl
_DEFAULT_TD = torch.Tensor.__torch_dispatch__
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def torch_function_of(cls: type) -> Any:
    """The function behind `cls.__torch_function__` (a classmethod's __func__, or the plain function)."""
    tf = getattr(cls, "__torch_function__", None)
    return getattr(tf, "__func__", tf)


def torch_dispatch_of(cls: type) -> Any:
    td = getattr(cls, "__torch_dispatch__", None)
    return getattr(td, "__func__", td)


def is_subclass_type(cls: type) -> bool:
    """A tensor class other than Tensor and Parameter."""
    return isinstance(cls, type) and issubclass(cls, torch.Tensor) and cls not in _PLAIN


def opaque_reason(cls: type) -> str | None:
    """Why tensors of `cls` cannot be traced as tensors (NOTE [Tensor subclasses traced as tensors]), or None."""
    if torch_dispatch_of(cls) is not _DEFAULT_TD:
        return f"tensor subclass {cls.__qualname__} defines __torch_dispatch__"
    if torch_function_of(cls) not in (_DEFAULT_TF, _DISABLED_TF):
        return f"tensor subclass {cls.__qualname__} has its own __torch_function__"
    hooks = [n for n in ("__getattribute__", "__getattr__", "__setattr__") if any(n in vars(k) for k in _user_layers(cls))]
    if hooks:
        return f"tensor subclass {cls.__qualname__} defines {hooks[0]}"
    overrides = sorted(n for k in _user_layers(cls) for n in vars(k) if n in _TENSOR_NAMES and n not in _SAFE_NAMES)
    if overrides:  # NOTE [Subclasses that override Tensor's names]
        return f"tensor subclass {cls.__qualname__} overrides Tensor.{overrides[0]}"
    return None


# NOTE [Subclasses that override Tensor's names]: a subclass traced as a tensor has its ops computed by
# framejit's own model of Tensor: CPython's operator protocol (a reflected `__radd__` of the right operand tried
# first, `__eq__`), `len()`, torch's C getters (`shape`, `numel()` ignore a Python `size`) and the Tensor methods
# written in Python (`__iter__` calls `unbind`, `__rtruediv__` calls `reciprocal`, `__len__` reads `dim()`), none of
# which consult the subclass's own overrides of those names (review revP P1, P2, P7, P8: `p + x` gave p + x where
# eager calls x.__radd__; `len(x)` the size where __len__ returns 42). A subclass whose own classes define any name
# torch.Tensor has (other than construction, printing and class metadata) is therefore an opaque object: each
# op on it breaks and runs in Python, as eager runs it. Added methods and attributes of new names stay traced.
_TENSOR_NAMES = frozenset(dir(torch.Tensor))
_SAFE_NAMES = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__",
                         "__annotations__", "__init__", "__new__", "__init_subclass__", "__class_getitem__",
                         "__repr__", "__str__", "__firstlineno__", "__static_attributes__", "__torch_function__",
                         "__torch_dispatch__", "__orig_bases__", "__parameters__", "__type_params__"})


def guard_subclass(out, cls: type) -> None:
    """Pin how the class resolves the hooks the trace relied on (`__torch_function__`, `__torch_dispatch__`,
    attribute hooks) as lookup facts on the class dicts (NOTE [Lookup facts]); the exact type is pinned by
    the value's own type guard. A failed fact stops the guards that would read the tensor (its metadata
    getters run a newly assigned __torch_function__: NOTE [Guards run no user code])."""
    from . import lookup
    for name in _HOOKS:
        lookup.guard_lookup(out, cls, name)


_HOOKS = ("__torch_function__", "__torch_dispatch__", "__getattribute__", "__getattr__", "__setattr__")


# NOTE [Subclass tensors guarded by type]: a subclass that is not traced as a tensor never enters a graph, so
# its type is the only fact; reading its metadata (shape, stride(), is_neg()) in the trace or in the guards ran
# the subclass's __torch_function__, a call eager never makes (a subclass logging its calls logged 7 more per
# call). values/builder.py makes those opaque objects (`opaque_subclass`); one reaching add_input otherwise (a
# source read by another path) is a break there. One with torch's own __torch_function__ is a graph input.
def check_input_class(out, tensor: torch.Tensor, source) -> None:
    if type(tensor) in _PLAIN:
        return
    from .torch_function_inline import _STATE, inlines_torch_function
    inlined = _STATE.making_input and inlines_torch_function(type(tensor))  # NOTE [Inlined __torch_function__]
    reason = None if inlined else opaque_reason(type(tensor))
    if reason is not None:
        from .breaks import BreakKind, Unsupported
        out.guard_type(source, type(tensor))
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{reason} at {source.describe()}")
    guard_subclass(out, type(tensor))


# NOTE [Guards read subclass tensors as Tensors]: each metadata read of a subclass tensor (`x.dtype`, `x.shape`,
# `x.stride()`) goes through torch's default __torch_function__ in Python, about 10 us each: the tensor guard
# of one such input cost ~100 us per call. The guard reads them from `x.as_subclass(torch.Tensor)` (under 1 us,
# no __torch_function__), after its exact type and the class's lookup facts have passed; the type check and
# requires_grad read `x` (an alias made under no_grad does not require grad). Only for subclasses traced as
# tensors (torch's own __torch_function__: the same answers).
def metadata_expr(out, t: torch.Tensor, e: str) -> tuple[str, str, str]:
    """(the expression the type guard reads, the one the metadata guards read, requires_grad's) for `t` at `e`."""
    from .torch_function_inline import inlines_torch_function, requires_grad_of
    if type(t) in _PLAIN:
        return e, e, f"{e}.requires_grad"
    if inlines_torch_function(type(t)):  # NOTE [Inlined __torch_function__]: no user code in guards
        return e, f"{out.name_of(_as_tensor, 'as_tensor')}({e})", f"{out.name_of(requires_grad_of, 'requires_grad')}({e})"
    if opaque_reason(type(t)) is not None:
        return e, e, f"{e}.requires_grad"
    return e, f"{out.name_of(_as_tensor, 'as_tensor')}({e})", f"{e}.requires_grad"


def _as_tensor(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor)


def _overloaded_classes(kind: str, args: tuple, kwargs: dict) -> list[type]:
    from .values.tensor import TensorValue
    found: list[type] = []

    def note(v: Any) -> None:
        if isinstance(v, TensorValue) and is_subclass_type(v.cls) and torch_function_of(v.cls) is _DEFAULT_TF \
                and v.cls not in found:
            found.append(v.cls)
    for v in [*args, *kwargs.values()]:
        note(v)
        for item in _sequence_items(v):
            note(item)
    return found


def _sequence_items(value: Any) -> tuple:
    """The items of a list or tuple value (a TensorList argument, a tuple result), else none."""
    items = getattr(value, "items", None)
    return tuple(items) if type(items) in (list, tuple) else ()


# NOTE [In-place layout ops on subclass tensors]: the boundary hands the graph `t.as_subclass(torch.Tensor)`, an
# alias with its own TensorImpl (the same storage, its own sizes, strides and offset). An op that changes a
# tensor's layout in place (`t_`, `unsqueeze_`, `as_strided_`, `set_`...) changes the alias in the graph, and the
# user's subclass tensor would keep its old shape (review revH HIGH-1). Such an op on a subclass tensor is a break:
# it runs in Python on the user's own object, as eager runs it (its own __torch_function__ included).
_LAYOUT_IN_PLACE = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "resize_",
                              "resize_as_", "as_strided_", "set_"})


def _check_layout_write(kind: str, target: Any, args: tuple) -> None:
    from .values.tensor import TensorValue
    name = target if kind == "call_method" else getattr(target, "__name__", None)
    if name not in _LAYOUT_IN_PLACE or not args:
        return
    self = args[0]
    if isinstance(self, TensorValue) and is_subclass_type(self.cls):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} changes the layout of a {self.cls.__qualname__} "
                          f"in place (NOTE [In-place layout ops on subclass tensors])")


def result_class(kind: str, target: Any, args: tuple, kwargs: dict, out: Any = None) -> type | None:
    """The subclass eager's default __torch_function__ gives the results of `target(*args, **kwargs)`, or None
    when no argument is such a subclass, the target dispatches to none (`_NO_DISPATCH`) or subclass dispatch is
    off (NOTE [Subclass results with dispatch off]); a break when eager would raise TypeError (unrelated
    subclasses) or when the op changes a subclass tensor's layout in place."""
    _check_layout_write(kind, target, args)
    classes = _overloaded_classes(kind, args, kwargs)
    if not classes or target in _NO_DISPATCH:
        return None
    from .torch_function_checks import dispatch_on
    if out is not None and not dispatch_on(out):
        return None
    winner = classes[0]
    for cls in classes[1:]:
        if issubclass(cls, winner):
            winner = cls
    if not all(issubclass(winner, cls) for cls in classes):
        from .breaks import BreakKind, Unsupported
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(target, '__name__', target)} of unrelated tensor "
                          f"subclasses {', '.join(c.__qualname__ for c in classes)} (eager raises TypeError)")
    return winner


# calls whose tensor arguments are data, not overloaded arguments (torch.tensor([t0, t1]) is a plain Tensor): C
# functions that call no __torch_function__ (torch.as_tensor(x, dtype=...) or torch.Tensor(x) of a subclass tensor
# is a plain Tensor in eager; where they return x itself, NOTE [Ops that return their input itself] answers), and
# the legacy tensor classes (torch.FloatTensor(x)). torch.overrides.get_ignored_functions is not the list: it
# names as_strided, rand_like, normal, fill, which dispatch.
_NO_DISPATCH = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor, torch.sparse_coo_tensor,
                torch.sparse_compressed_tensor, torch.sparse_csr_tensor, torch.sparse_csc_tensor,
                torch.sparse_bsr_tensor, torch.sparse_bsc_tensor,
                *(t for t in vars(torch).values() if type(t).__name__ == "tensortype")}


def apply_result_class(value: Any, cls: type, grad_enabled: bool) -> None:
    """Give the tensors of an op's result the class `cls` where eager's `_convert` re-wraps them; the grad mode
    eager re-wrapped them in is kept for the boundary (`as_subclass` of a leaf that requires grad is an
    alias with a grad_fn in grad mode, not under no_grad)."""
    from .values.tensor import TensorValue
    if isinstance(value, TensorValue):
        if not issubclass(value.cls, cls):
            value.cls = cls
            value.wrap_grad = grad_enabled
        return
    for item in _sequence_items(value):
        apply_result_class(item, cls, grad_enabled)


# NOTE [Ops that return their input itself]: `x.contiguous()` of a contiguous x, `x.to(x.dtype)`, `x.float()` of a
# float32 x, `x.type_as(x)`, `x.real` of a real x, `torch.atleast_1d(x)` return the argument's own TensorImpl in
# eager, and Python wraps it as the same object: `y is x`, y of x's class (an nn.Parameter, a subclass), with x's
# attributes, and a write through y is a write of x. The fake op mirrors that (it returns the argument's fake
# object, decided by the metadata the tensor guards fix: dtype, device, layout, strides), so the result is the
# argument's own value, whatever its class, where eager's dispatch does not re-wrap it: no subclass dispatch
# (`cls` None: a plain tensor, a Parameter, subclass dispatch off, the standard own __torch_function__ that runs
# `func` under DisableTorchFunctionSubclass) or an argument already of the winning class. Before, the result was
# a new value of the node's class: a Parameter's `p.contiguous()` and `lin.weight.to(x.dtype)` came back as
# another object, a plain Tensor (revBL PRE-1/PRE-5). An op whose fake result is a new tensor keeps its own value.
def settle_result(value: Any, cls: type | None, mutated: bool, result: Any, call: tuple, grad_enabled: bool) -> Any:
    """The value of an op's result when eager's default __torch_function__ chose `cls` (None: no subclass
    dispatch): an argument the op returned itself (the same object in eager, with its attributes: NOTE [Ops that
    return their input itself]) unless eager re-wraps it; otherwise the result's tensors get the class. `call`:
    the op's (kind, target, args, kwargs)."""
    from .values.tensor import TensorValue
    kind, target, args, kwargs = call
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    # an in-place method keeps its node as the value, also where no version moved (`requires_grad_`, `detach_`);
    # so does a call of framejit's own (a region boundary whose fake passes its outputs through)
    in_place = isinstance(name, str) and name.endswith("_") and not name.endswith("__") or not _torch_op(kind, target)
    if isinstance(value, TensorValue) and (mutated or not in_place if cls is not None else not (mutated or in_place)):
        same = _argument_returned(value, cls, result, args, kwargs)
        if same is not None:
            return same
    elif not (mutated or in_place) and cls is None and _sequence_items(value):
        value.items = [_argument_returned(v, None, v.fake, args, kwargs) or v if isinstance(v, TensorValue) else v
                       for v in value.items]
    if cls is not None:
        apply_result_class(value, cls, grad_enabled)
    return value


def _torch_op(kind: str, target: Any) -> bool:
    return kind == "call_method" or target is getattr or getattr(target, "__objclass__", None) is torch._C.TensorBase or \
        (getattr(target, "__module__", None) or "").startswith("torch")


def _argument_returned(value: Any, cls: type | None, result: Any, args: tuple, kwargs: dict) -> Any:
    """The tensor argument whose fake object the op returned, when eager returns it unwrapped, else None."""
    from .values.tensor import TensorValue
    for arg in [*args, *kwargs.values(), *(i for v in [*args, *kwargs.values()] for i in _sequence_items(v))]:
        if isinstance(arg, TensorValue) and arg.fake is result and result is not None:
            return arg if cls is None or issubclass(arg.cls, cls) else None
    return None


class SubclassBoundary:
    """The compiled graph called with plain tensors, its subclass outputs re-wrapped (NOTE [Tensor subclasses
    traced as tensors])."""

    def __init__(self, compiled: Any, unwrap: tuple[int, ...], wrap: tuple[tuple[int, type], ...]) -> None:
        self.compiled = compiled
        self.unwrap = unwrap
        self.wrap = wrap

    def __call__(self, *args: Any) -> Any:
        originals = {}
        if self.unwrap:
            args = list(args)
            with torch.enable_grad():  # under no_grad the alias would lose requires_grad and the autograd link
                for i in self.unwrap:
                    alias = args[i].as_subclass(torch.Tensor)
                    originals[id(alias)] = (alias, args[i])
                    args[i] = alias
        out = self.compiled(*args)
        if self.wrap:
            out = list(out)
            mode = torch._C.is_grad_enabled()
            for i, cls, grad in self.wrap:
                # an op that returned its input itself (`x.float()` on float32, out=), or one graph result returned
                # twice (`z = y.contiguous()`): that one object, its attributes kept, as eager (review revP P4, P6)
                plain = out[i]
                known = originals.get(id(plain))
                if known is not None and known[0] is plain and type(known[1]) is cls:
                    out[i] = known[1]
                    continue
                if grad is not None and grad is not mode:
                    with grad_mode(grad):
                        out[i] = out[i].as_subclass(cls)
                else:
                    out[i] = out[i].as_subclass(cls)
                originals[id(plain)] = (plain, out[i])
        return out


def subclass_boundary(compiled: Any, output, outputs: list) -> Any:
    """`compiled` (the graph returning `outputs`) wrapped by a SubclassBoundary when a graph input or output is
    of a traced subclass. Such an entry stays in memory (the wrapper is not persisted by the frame cache)."""
    from .values.tensor import TensorValue
    unwrap = tuple(i for i, inp in enumerate(output.inputs)
                   if isinstance(inp.value, TensorValue) and is_subclass_type(type(inp.tensor)))
    wrap = tuple((i, v.cls, getattr(v, "wrap_grad", None)) for i, v in enumerate(outputs)
                 if is_subclass_type(getattr(v, "cls", torch.Tensor)))
    if compiled is None or not (unwrap or wrap):
        return compiled
    output.process_local = "a graph input or output is a tensor subclass"  # frame_cache: NotPersistable
    return SubclassBoundary(compiled, unwrap, wrap)


def _user_layers(cls: type) -> tuple[type, ...]:
    """The classes of `cls.__mro__` a subclass adds before torch's own (Tensor, its C base, object, Parameter)."""
    return tuple(k for k in cls.__mro__ if not (k is torch.nn.Parameter or issubclass(torch.Tensor, k)))


def subclass_attr(tx, t: Any, name: str) -> Any:
    """`t.name` of a traced subclass tensor where the subclass itself defines `name` (a method, property, class
    attribute: NOTE [Lookup facts] as for objects), or None after guarding that it defines none (the read is
    then a Tensor attribute or a Python attribute of the tensor, attributes.py)."""
    from . import lookup
    from .descriptors import class_level_attr, descriptor_attr, is_data_descriptor
    cls = t.python_type()
    layers = _user_layers(cls)
    index, attr = lookup.mro_lookup(cls, name)
    real = next((i.tensor for i in tx.output.inputs if i.value is t), None)  # the input's tensor, if it is one
    if index is None or cls.__mro__[index] not in layers:
        lookup.guard_mro(tx.output, cls)
        lookup.guard_class_absent(tx.output, layers, name)
        if real is not None and name in _TENSOR_NAMES and name in real.__dict__:  # review revP P5
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"the attribute {name!r} of this "
                              f"{cls.__qualname__} shadows Tensor.{name}")
        if real is not None and t.source is not None and name in _TENSOR_NAMES:
            lookup.guard_not_in_instance(tx.output, t.source, real, name)
        from .torch_function_inline import gated_attr  # NOTE [Inlined __torch_function__]
        return gated_attr(tx, t, name)
    entry = lookup.guard_found_on_class(tx.output, cls, name, index)
    if is_data_descriptor(attr):
        lookup.guard_entry_identity(tx.output, entry, attr)
        return descriptor_attr(tx, t, name, attr)
    if real is not None and name in real.__dict__:
        return None  # the instance's own attribute shadows a method or class constant
    if real is not None and t.source is not None:
        lookup.guard_not_in_instance(tx.output, t.source, real, name)
    return class_level_attr(tx, t, cls, name, attr, entry)


def opaque_subclass(out, obj: torch.Tensor, source) -> Any:
    """A tensor of a subclass that is not traced (its own __torch_function__ or __torch_dispatch__): an opaque
    object guarded by its type and those methods, as NOTE [Nested tensors stay out of graphs]; an operation on
    it breaks there and runs in Python, the rest of the frame stays captured. None for other tensors."""
    cls = type(obj)
    if cls in _PLAIN:
        return None
    from .torch_function_inline import inlines_torch_function, make_input
    if inlines_torch_function(cls):  # NOTE [Inlined __torch_function__]
        return make_input(out, obj, source)
    reason = opaque_reason(cls)
    if reason is None:
        return None
    from .values.objects import ObjectValue
    guard_subclass(out, cls)
    out.guard_type(source, cls)
    value = ObjectValue(obj, source)
    value.opaque_tensor = reason
    return value


def opaque_attr_check(obj: Any, name: str) -> None:
    """An attribute of an opaque subclass tensor that torch defines (a method, `shape`, `dtype`) is read by
    eager through the subclass's __torch_function__ (a getter runs it): a break, never read while tracing.
    What the subclass defines, and the tensor's own Python attributes, are read as for any object."""
    from . import lookup
    from .breaks import BreakKind, Unsupported
    cls = type(obj.obj)
    index, _ = lookup.mro_lookup(cls, name)
    if index is not None and cls.__mro__[index] in _user_layers(cls):
        return
    if index is None and name in getattr(obj.obj, "__dict__", {}):
        return
    raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{name} of a {obj.opaque_tensor}")


def as_subclass(tx, t: Any, args: list, kwargs: dict) -> Any:
    """`t.as_subclass(cls)`: a new tensor object over the same data and autograd history (an `aten.alias`
    node) of class `cls`, when `cls` is Tensor or a subclass traced as a tensor; otherwise a break."""
    from .breaks import BreakKind, Unsupported
    from .values import ClassValue
    cls = args[0].obj if len(args) == 1 and not kwargs and isinstance(args[0], ClassValue) else None
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor) and cls is not torch.nn.Parameter):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.as_subclass of anything but a tensor class")
    from .torch_function_inline import gate, inlines_torch_function, ungated
    reason = opaque_reason(cls) if cls is not torch.Tensor and not inlines_torch_function(cls) else None
    if reason is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.as_subclass makes a {reason}")
    if cls is not torch.Tensor:
        if args[0].source is None:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.as_subclass of a class made while tracing")
        guard_subclass(tx.output, cls)
    with ungated():  # eager's as_subclass runs no __torch_function__ (NOTE [Inlined __torch_function__])
        value = tx.output.call("call_function", torch.ops.aten.alias.default, (t,), {})
    value.cls, value.wrap_grad = cls, tx.output.grad_enabled
    return gate(value)


def plain_tensor(value: Any) -> Any:
    """A backend's example input: a traced subclass tensor as the plain tensor the graph gets at run time."""
    if isinstance(value, torch.Tensor) and is_subclass_type(type(value)):
        return value.as_subclass(torch.Tensor)
    return value
