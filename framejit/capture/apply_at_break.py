"""Callees of a graph break's Python step that framejit routes itself: torch's checkpoint, `warnings.warn`
and a custom autograd Function's `apply` (graph_break.BreakCodegen._hooked asks `routed_callee` first).

NOTE [Custom Function forwards at breaks]: a break inside `MyFunction.forward` surfaces at the CALL of
`MyFunction.apply` in the compiled frame (NOTE [Nested graph breaks]), whose Python step then runs the
apply. Python has no frame-evaluation hook, so torch's C++ apply calling `forward` directly ran it, and
every user function it calls, wholly as Python, uncompiled and unrecorded (hhuntHF6 MED-3: reformer's
reversible layers, 4 graphs of 24 ops vs stock 16 graphs of ~350). The step instead runs the apply with the class's `forward` set, for that call only, to the user's
forward function through its frame hook, in a wrapper with the forward's parameter names (torch's C apply
places keywords by the forward's code, so its errors and placements stay eager's) and `__wrapped__` (so
`inspect.signature` binds `apply`'s defaults as before); the class's own entry (or its absence) is put back
after the apply. The forward's frame is then traced, guarded, broken and resumed like any other; torch's own
apply, ctx, backward, `setup_context`, `vjp`/`jvp`, `once_differentiable`, `mark_dirty`, `save_for_backward`
and `needs_input_grad` are eager's, and so are the identities user code reads: `type(ctx)`, `type(grad_fn)`,
`grad_fn._forward_cls` are the class's own (a subclass made for the call, tried first, changed them, and with
them the values of code testing `isinstance(ctx, F._backward_cls)` or writing `ctx._forward_cls.calls`: revAR
HIGH-1). What differs: code run during the forward that reads `F.forward` or `F.__dict__` sees the wrapper.
Where the class might run user code of its own on such a write or lookup (an `__init_subclass__` or a metaclass
other than torch's), where the forward is not a staticmethod
function of the class, and while a forward-AD level or a functorch transform is active (the apply then
pushes through paths the hooked frame's guards do not model), the original `apply` runs, and the forward's
frame is recorded as run eagerly (NOTE [Eager frames]) once per class and reason; so it is for a forward
with keyword-only, positional-only or ** parameters. A traceback through the forward shows one more
`forward` line (the wrapper's).
"""
from __future__ import annotations

import functools
import inspect
import types
import warnings

from . import eager_frames
from .autograd_function import function_class
from .values import BuiltinValue


def routed_callee(hooks, callee):
    """(what the step calls, the value passed first) for the callees routed here, or None."""
    if isinstance(callee, BuiltinValue) and callee.obj is _torch_checkpoint():
        return hooks.checkpoint_through_hook(), None  # NOTE [Reentrant checkpoint at a break]
    if isinstance(callee, BuiltinValue) and callee.obj is warnings.warn:
        from .caller_frames import warn
        return warn, None  # NOTE [Warnings past the hook]
    if function_class(callee) is not None:
        return hooks.apply_through_hook(), callee  # NOTE [Custom Function forwards at breaks]
    return None


def _torch_checkpoint():
    import torch.utils.checkpoint
    return torch.utils.checkpoint.checkpoint


def apply_hooked(hooks, apply, args: tuple, kwargs: dict):
    """`apply(*args, **kwargs)` (a Function's bound `apply`) with the forward through its frame hook."""
    import torch
    import torch.autograd.forward_ad as forward_ad
    cls = getattr(apply, "__self__", None)
    if not isinstance(cls, type):
        return apply(*args, **kwargs)
    if forward_ad._current_level >= 0 or torch._C._are_functorch_transforms_active():
        _eager_once(hooks, cls, "a forward-AD level or functorch transform is active")
        return apply(*args, **kwargs)
    forward = _hooked_forward(hooks, cls)
    if forward is None:
        return apply(*args, **kwargs)
    had, old = "forward" in cls.__dict__, cls.__dict__.get("forward")
    type.__setattr__(cls, "forward", forward)  # NOTE [Custom Function forwards at breaks]: for this apply only
    try:
        return apply(*args, **kwargs)
    finally:
        if had:
            type.__setattr__(cls, "forward", old)
        else:
            type.__delattr__(cls, "forward")


def _forward(cls: type):
    """The user's forward function (a staticmethod of a class of `cls`'s mro), its class, or (None, None)."""
    for klass in cls.__mro__:
        if "forward" in klass.__dict__:
            found = klass.__dict__["forward"]
            if isinstance(found, staticmethod) and isinstance(found.__func__, types.FunctionType):
                return found.__func__, klass
            return None, klass
    return None, None


def _why_plain(cls: type, forward) -> str | None:
    from torch.autograd.function import FunctionMeta
    if forward is None:
        return "its forward is not a staticmethod function"
    if type(cls) is not FunctionMeta:
        return f"its metaclass {type(cls).__qualname__} is not torch's FunctionMeta"
    if any("__init_subclass__" in k.__dict__ for k in cls.__mro__ if k is not object):
        return "a class of its mro defines __init_subclass__"
    return None


def _hooked_forward(hooks, cls: type):
    """The staticmethod `cls.forward` is for one apply, its forward through its frame hook, or None."""
    table = hooks.__dict__.setdefault("function_classes", {})
    forward, owner = _forward(cls)
    key = (cls, forward, getattr(forward, "__code__", None), len(getattr(forward, "__defaults__", None) or ()))
    if key in table:
        return table[key]
    if owner is not None and (owner.__module__ or "").split(".")[0] == "torch":
        table[key] = None  # torch's own Functions run as torch's code (break_callees.torch_internals)
        return None
    why = _why_plain(cls, forward)
    hooked = None if why else hooks.function(forward)
    wrapper = None if why or hooked is forward else _same_parameters(forward, hooked)
    if wrapper is None:  # a disabled forward (framejit.disable) runs as Python by request
        if why or hooked is not forward:
            _eager_once(hooks, cls, why or "its forward has keyword-only, positional-only or ** parameters")
        table[key] = None
        return None
    table[key] = staticmethod(wrapper)
    return table[key]


_MISSING = object()


def _same_parameters(forward: types.FunctionType, hooked):
    """A function with `forward`'s parameter names (torch's C apply places keywords by the forward's code)
    that calls `hooked` with the arguments it was given; the defaults are forward's own, applied by the
    hook's binding as Python applies them. None for keyword-only, positional-only or ** parameters."""
    code = forward.__code__
    if code.co_posonlyargcount or code.co_kwonlyargcount or code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    names = code.co_varnames[:code.co_argcount]
    star = code.co_varnames[code.co_argcount] if code.co_flags & inspect.CO_VARARGS else None
    first_default = len(names) - len(forward.__defaults__ or ())
    params = [name if i < first_default else f"{name}=_fj_missing_" for i, name in enumerate(names)]
    params += [f"*{star}"] if star else []
    source = (f"def {code.co_name if code.co_name.isidentifier() else 'forward'}({', '.join(params)}):\n"
              f"    return _fj_call_(({''.join(n + ', ' for n in names)}), {star or '()'})\n")

    def call(values, rest):
        given = next((i for i, v in enumerate(values) if v is _MISSING), len(values))
        kwargs = {names[i]: v for i, v in enumerate(values) if i > given and v is not _MISSING}
        return hooked(*values[:given], *rest, **kwargs)

    namespace = {"_fj_call_": call, "_fj_missing_": _MISSING}
    exec(source, namespace)  # noqa: S102 - the names are the forward's own identifiers
    wrapper = next(v for k, v in namespace.items() if isinstance(v, types.FunctionType) and v is not call)
    return functools.wraps(forward)(wrapper)


def _eager_once(hooks, cls: type, why: str) -> None:
    seen = hooks.__dict__.setdefault("function_classes_eager", set())
    if (cls, why) in seen:
        return
    seen.add((cls, why))
    forward = getattr(cls, "forward", None)
    code = getattr(forward, "__code__", None)
    if code is not None:
        eager_frames.record(code, f"{cls.__qualname__}.apply at a graph break runs its forward as Python: {why}")
