"""Calls of torch.fx GraphModules (`torch.fx.symbolic_trace(m)`, GraphModules made by FX passes).

NOTE [GraphModule calls]: a GraphModule's class (the per-instance `GraphModuleImpl` subclass) gets
`__call__ = call_wrapped` from `GraphModule.recompile`, a function `self._wrapped_call(self, *args)` over
a `_WrappedCall` object stored on the class. That object is an instance of a class from torch.fx, so the
trace took it for a torch function and recorded the module as an argument of a graph op: a graph break
("NNModuleValue(...) cannot be passed to a graph op") at every call, so `framejit.compile(gm)` captured no
graph at all and `lambda a, b: gm(a, b) + 1` broke before the add (fullgraph raised).

`_WrappedCall.__call__(obj, *args)` is `super(cls, obj).__call__(*args)` (when the GraphModule class
had no `__call__` of its own: `cls_call` None) inside a try that only rewrites the message of an
exception raised in the generated code. When that `super` lookup reaches nn.Module's own `__call__`, the
call is exactly nn.Module's (hooks, then `forward`, the code FX generated), so it is traced as such.
Guarded: the class's `_wrapped_call` entry (identity; its `cls`/`cls_call` are set once by recompile and
read at trace time) and the instance not shadowing it; `__call__` is already guarded by the module call
(calls._guard_call_path). An exception raised in the generated forward while tracing follows the usual
paths (the frame or the break runs it as Python, where `_WrappedCall` prints its message as in eager).
Anything else (a GraphModule subclass with its own `__call__`, a patched `_wrapped_call`) keeps the
previous handling.
"""
from __future__ import annotations

from typing import Any

import torch

_CALL_WRAPPED_CODES = frozenset(c for c in torch.fx.GraphModule.recompile.__code__.co_consts
                                if getattr(c, "co_name", None) == "call_wrapped")


def calls_module_call(tx, mod_value, module_call: Any) -> bool:
    """`type(m).__call__` is FX's `call_wrapped` whose `_WrappedCall` ends in `module_call` (nn.Module's
    `__call__`): guards what that relies on and answers True (NOTE [GraphModule calls])."""
    from . import lookup
    obj = mod_value.obj
    cls = type(obj)
    call = cls.__call__
    if getattr(call, "__code__", None) not in _CALL_WRAPPED_CODES or call.__closure__ is not None:
        return False
    index, wrapped = lookup.mro_lookup(cls, "_wrapped_call")
    if index is None or type(wrapped) is not torch.fx.graph_module._WrappedCall or wrapped.cls_call is not None:
        return False
    if wrapped.cls is not cls or lookup.mro_lookup(cls.__mro__[1], "__call__")[1] is not module_call:
        return False  # `super(cls, obj).__call__` is not nn.Module's (a subclass of a GraphModule class)
    if "_wrapped_call" in getattr(obj, "__dict__", {}):
        return False
    lookup.guard_lookup(tx.output, cls, "_wrapped_call")
    lookup.guard_lookup(tx.output, cls.__mro__[1], "__call__")
    if mod_value.source is not None:
        lookup.guard_not_in_instance(tx.output, mod_value.source, obj, "_wrapped_call")
    return True
