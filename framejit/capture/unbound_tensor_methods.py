"""Tensor methods reached through the class and called with the tensor as first argument.

NOTE [Tensor methods called unbound]: `torch.Tensor.size(x)`, `torch._C.TensorBase.data_ptr(x)`, `type(x).size(x)`,
`getattr(torch.Tensor, name)(x)` read the method from the class (a C method descriptor of TensorBase, or a Python
function of torch/_tensor.py such as `Tensor.__reduce_ex__`) and took the path of torch functions: a call_function
node run on the fake tensor, whose non-tensor result was folded as a constant. That answered facts of the fake, not
of the caller's tensor (revBE PRE-2, issue 12): `torch.Tensor.data_ptr(x)` gave 0 (`x.data_ptr()` is a break),
`torch._C.TensorBase.size(x)` a tuple where eager gives torch.Size, `torch.Tensor.__reduce_ex__(x, 2)` the fake's
`_rebuild_wrapper_subclass`. Such a call means the bound call `x.name(...)` when the tensor's class finds that
very function under `name` (guarded: lookup.guard_lookup), so it takes the bound method's path
(calls.call_tensor_method, with its breaks). A class whose lookup finds another function (a subclass or Parameter
overriding it: `torch.Tensor.__repr__(p)` skips Parameter's own) is a graph break: the call runs as Python.
"""
from __future__ import annotations

import types
from typing import Any

import torch

from . import lookup
from .breaks import BreakKind, Unsupported
from .values import ConstantValue, SequenceValue, TensorValue, Value

# NOTE [Object protocol methods of tensors]: `x.__hash__()`, `x.__reduce_ex__(2)`, `x.__reduce__()` and
# `x.__deepcopy__(memo)` called explicitly (or unbound: NOTE [Tensor methods called unbound]) took the path of tensor
# ops: a call_method node run on the fake tensor, whose answer is about the fake object, folded as a constant (revBE
# PRE-1: `x.__hash__()` was the fake's id, not `hash(x)`; `x.__reduce_ex__(2)` of an input traced with symbolic sizes
# gave the fake's `_rebuild_wrapper_subclass`, also through `_reduce_ex_internal` where torch's Python
# `Tensor.__reduce_ex__` is inlined; `x.__deepcopy__({})` of a non-wrapper subclass returned a copy where eager raises
# RuntimeError). They answer about the caller's object (its identity, storage, Python attributes, .grad): a graph break,
# as `hash(x)` is (and `copy.deepcopy(x)` where copies.py cannot model it).
OBJECT_PROTOCOL_BREAKS = {name: BreakKind.UNSUPPORTED_CALL for name in
                          ("__hash__", "__reduce_ex__", "__reduce__", "_reduce_ex_internal", "__deepcopy__")}

# NOTE [Default __torch_function__ read from a class]: `type(x).__torch_function__` of a plain subclass (what torch's
# handle_torch_function calls once has_torch_function is True) is torch.Tensor's classmethod bound to the class, read
# as a torch callable: called, it took the graph-op path and ran on fake tensors, whose TypeError ("no implementation
# found ...") was taken as the program's exception, and `Tensor.__rsub__`'s wrapper turned it into NotImplemented
# (eager: the result). Called with the class bound it is a graph break (NOTE [Inlined __torch_function__] answers the
# calls it routes itself).
_DEFAULT_TF = torch.Tensor.__torch_function__.__func__

_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def tensor_method_name(fn: Any) -> str | None:
    """The name of `fn` when it is a method of torch.Tensor or TensorBase read from the class, else None."""
    if isinstance(fn, _DESCRIPTORS):
        owner = getattr(fn, "__objclass__", None)
        name = getattr(fn, "__name__", None)
        return name if owner in (torch._C.TensorBase, torch.Tensor) and isinstance(name, str) else None
    if isinstance(fn, types.FunctionType) and isinstance(fn.__name__, str) and \
            torch.Tensor.__dict__.get(fn.__name__) is fn:
        return fn.__name__
    return None


def unbound_tensor_method(tx, fn: Any, args: list[Value]) -> str | None:
    """The method name under which `fn(*args)` is `args[0].name(*args[1:])` (NOTE [Tensor methods called unbound]);
    None when `fn` is no Tensor method or its first argument no tensor; a break when the tensor's class has its own."""
    if getattr(fn, "__func__", None) is _DEFAULT_TF:  # NOTE [Default __torch_function__ read from a class]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.__torch_function__ of a class read as a callable")
    if not args or not isinstance(args[0], TensorValue):
        return None
    name = tensor_method_name(fn)
    if name is None:
        return None
    cls = args[0].python_type()
    if lookup.mro_lookup(cls, name)[1] is not fn:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.{name} called unbound on a {cls.__qualname__}, "
                          f"whose class finds another {name}")
    lookup.guard_lookup(tx.output, cls, name)
    _refuse_shadowed(tx, args[0], name)
    return name


# NOTE [Unbound calls past instance attributes]: the unbound call is recorded as the graph op `x.name(...)`, and where
# the graph runs as Python (the eager backend) that op looks `name` up on the tensor itself, where an instance attribute
# (`x.add = f`, `setattr(p, "add", f)` on a parameter) comes first; eager's `torch.Tensor.add(x, 1)` never reads it
# (revBG HIGH-2: -198 where eager gives x + 1, and a parameter's attribute set after the first call went unnoticed).
# A tensor whose own dict or trace-stored attributes hold `name` is a break; an input's dict is guarded not to.
def _refuse_shadowed(tx, t: TensorValue, name: str) -> None:
    from .tensor_attrs import input_of, refuse_changed_dict, stored_or
    found = input_of(tx.output, t)
    real = found.tensor if found is not None else None
    if (real is not None and name in vars(real)) or stored_or(tx.output, t, name, lambda: _ABSENT) is not _ABSENT:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.{name} called unbound on a tensor with its own "
                          f"attribute {name!r}")
    refuse_changed_dict(tx.output, real, name)
    if found is not None:
        lookup.guard_not_in_instance(tx.output, found.value.source, real, name)


_ABSENT = object()


# NOTE [Tensor.new of a torch.Size]: `t.new(size)` makes an uninitialized tensor of that shape when `size` is a
# torch.Size, and a tensor holding the numbers when it is a plain tuple (`t.new((4,))` is tensor([4.])). A graph
# node's arguments are rebuilt by FX (map_aggregate) and graph_calls._python_of, where a torch.Size is a tuple, so it ran
# `new((4,))`: torch.distributions' Exponential/Weibull/Gamma-based rsample (`self.rate.new(shape).exponential_()`
# with shape a torch.Size) returned one number of shape (1,) that broadcast into wrong samples (/tmp/hhuntHF8
# m_exp.py, m_dist.py: Weibull rsample 0.3-1.9 off eager). With a torch.Size (static or symbolic) and no keyword
# but `device`, `t.new(size)` is exactly `t.new_empty(size)` (t's dtype and device, no grad), recorded as that.
def tensor_method_for(name: str, args: list, kwargs: dict) -> str:
    """The tensor method recorded for `Tensor.<name>(*args, **kwargs)` (NOTE above); a break for a `new_*` factory of
    a leaf that requires grad (NOTE [Factories of leaves that require grad] in calls.py: onnxrt lost the flag of
    `x.new_ones(3, requires_grad=True)`, revBG HIGH-1)."""
    from .calls import _makes_a_leaf_that_requires_grad
    if name.startswith("new_") and _makes_a_leaf_that_requires_grad(kwargs):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.{name}(requires_grad=True) makes a leaf that requires grad")
    size = args[0] if name == "new" and len(args) == 1 and set(kwargs) <= {"device"} else None
    if isinstance(size, SequenceValue) and size.cls is torch.Size or \
            isinstance(size, ConstantValue) and type(size.value) is torch.Size:
        return "new_empty"
    return name


# NOTE [detach_ of a tensor from outside]: `t.detach_()` changes the caller's tensor (requires_grad, grad_fn), which a
# backend's compiled graph does not do (onnxrt left it requiring grad): a tensor from outside (a source, a graph
# input) runs it in Python. So does a tensor of a subclass (not Parameter): each op result of a plain subclass is a
# view in eager (torch's _convert re-wraps it by as_subclass), and detach_ of a view raises RuntimeError "Can't detach
# views in-place" (`y = x * 2; y.detach_()` or `y.detach().detach_()` of a MyT x: eager raised, the trace returned a
# tensor; hfixPre): the break lets Python answer.
def check_detach_(tensor: TensorValue) -> None:
    """A graph break where `tensor.detach_()` must run in Python (NOTE above)."""
    if tensor.source is not None or tensor.node.op == "placeholder":
        raise Unsupported(BreakKind.SIDE_EFFECT, "Tensor.detach_() of a tensor from outside the graph")
    if tensor.python_type() not in (torch.Tensor, torch.nn.Parameter):
        raise Unsupported(BreakKind.SIDE_EFFECT, "Tensor.detach_() of a tensor subclass (its op results are views)")
