"""`MyFunction.apply(...)` of a custom torch.autograd.Function while gradients are off.

NOTE [Custom autograd functions without grad]: with grad mode off (the tracer's grad mode at the call:
the frame's GRAD_MODE guard plus the with-blocks traced so far), `Function.apply(*args)` records no backward: it runs `forward(ctx, *args)` and returns its
outputs. That is traced by inlining `forward` with a stand-in `ctx` (save_for_backward and the
non-differentiable/materialize markers are accepted and kept; `needs_input_grad` is all False).
Inside a forward-AD dual level every apply is a break (NOTE [Custom Functions under forward-mode AD]).
Functions using `setup_context` or `mark_dirty` are graph breaks here: the call then runs as Python at the
break, with the rest captured. With grad mode on, autograd_grad.py traces the call and keeps the user's
backward (NOTE [Custom autograd functions in the graph] in function_regions.py).
"""
from __future__ import annotations

from torch.autograd.function import Function, _SingleLevelFunction

from .breaks import BreakKind, Unsupported
from .values import BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, NewObjectValue, TupleValue, Value
from .values.builder import wrap_unguarded

_APPLY = getattr(Function.__dict__.get("apply"), "__func__", None)  # a Python classmethod in torch 2.13; C in 2.14


class TracedCtx:
    """The `ctx` a traced forward sees (never built at run time: it does not escape the forward)."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass

    def save_for_forward(self, *tensors):
        pass  # NOTE [Custom Functions under forward-mode AD]: no dual level is open


def apply_attr(tx, cls_value: ClassValue) -> Value | None:
    """`MyFunction.apply` read from a (guarded) Function subclass: a fresh bound method on every read, so
    it is not guarded by identity; that no class before torch's own defines `apply` is."""
    from . import lookup
    cls = cls_value.obj
    if not (isinstance(cls, type) and issubclass(cls, Function) and cls is not Function):
        return None
    index, _ = lookup.mro_lookup(cls, "apply")
    if index is None or not lookup.is_fixed_class(cls.__mro__[index]):
        return None
    lookup.guard_found_on_class(tx.output, cls, "apply", index)
    return BuiltinValue(cls.apply)


def function_class(fn: Value) -> type | None:
    """The Function subclass whose `apply` `fn` is, or None."""
    if (isinstance(fn, BoundMethodValue) and isinstance(fn.func, BuiltinValue) and _APPLY is not None
            and fn.func.obj is _APPLY and isinstance(fn.self_value, ClassValue)):
        cls = fn.self_value.obj
    elif isinstance(fn, BuiltinValue) and getattr(fn.obj, "__name__", None) == "apply":
        cls = getattr(fn.obj, "__self__", None)  # torch 2.14: a C classmethod bound to the class
    else:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, Function) and cls is not Function else None


def is_function_apply(fn: Value) -> bool:
    return function_class(fn) is not None


def call_apply(tx, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    cls = function_class(fn)
    from .reentrant_checkpoint import check_grad_read  # NOTE [Reentrant checkpoint in the graph]
    check_grad_read(tx.output, f"{cls.__name__}.apply (a custom Function)")
    _no_forward_ad(tx, cls)
    if tx.output.grad_enabled:  # the grad mode at this point of the trace (with-blocks included)
        from .autograd_grad import call_with_grad  # NOTE [Custom autograd functions in the graph]
        return call_with_grad(tx, cls, args, kwargs)
    if kwargs or cls.setup_context is not _SingleLevelFunction.setup_context:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.apply with setup_context or keywords")
    ctx = NewObjectValue(TracedCtx, {"needs_input_grad": TupleValue([ConstantValue(False) for _ in args])})
    forward = wrap_unguarded(cls.__dict__["forward"].__func__) if isinstance(cls.__dict__.get("forward"), staticmethod) \
        else None
    if forward is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.forward is not a staticmethod of the class")
    return tx.call(forward, [ctx, *args], {})


def _no_forward_ad(tx, cls: type) -> None:
    """NOTE [Custom Functions under forward-mode AD]: inside `forward_ad.dual_level()` eager's apply pushes
    tangents through the user's `jvp` (or raises NotImplementedError where there is none, even with grad
    mode off), while a traced forward run as plain ops would get autograd's own derivative of what it
    computes: another tangent, silently. So an apply is captured only while no dual level is open (guarded:
    `forward_ad._current_level`, which `dual_level`/`enter_dual_level` set); inside one it is a graph
    break and runs as eager runs it."""
    import torch.autograd.forward_ad as forward_ad
    level = forward_ad._current_level
    if level >= 0:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.apply under forward-mode AD (a dual level "
                                                      "is open: the user's jvp, or eager's error, is not traced)")
    name = tx.output.name_of(forward_ad, "forward_ad")
    tx.output.add_guard("GLOBAL_STATE", f"{name}._current_level == -1", None, expected="no forward-AD dual level",
                        actual=f"{name}._current_level")
