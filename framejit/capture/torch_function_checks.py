"""`has_torch_function*` asked about tensors of a subclass, answered as eager answers them.

NOTE [Protocol checks of subclass tensors]: torch's Python code asks `has_torch_function_unary(self)` /
`has_torch_function((x,))` / `has_torch_function_variadic(...)` before doing its work (every Python method of
torch.Tensor: `__repr__`, `__format__`, `__deepcopy__`, `__reduce_ex__`, ...; nn.MultiheadAttention's fast path).
With a traced tensor among the arguments the check took the graph-op path: run on the fake tensor (FakeTensor
disables the protocol), it answered False for a tensor subclass where eager answers True (issue 12:
`torch.Tensor.__repr__(sub)` then ran torch's `_str` with subclass dispatch on: TypeError "unsupported format
string passed to MyT.__format__", eager the repr; `torch.Tensor.__deepcopy__(sub, {})` returned a copy where eager
raises RuntimeError). The answer depends on the class of each tensor (exact type guarded for inputs, known for
tensors the graph made), on the class's `__torch_function__` (its lookup guarded) and on the process state:
torch-function modes (guarded for every entry) and whether subclass dispatch is on. It is asked of the real
function with stand-ins: an empty tensor of each argument's class (`Tensor._make_subclass`, which runs no user
code). Subclass dispatch state: off inside a block of the trace (NOTE [Inlined __torch_function__]: off for real
then too); otherwise the real state is guarded as make_input guards it. An input tensor with its own
`__torch_function__` in its instance dict, a value that is neither a tensor, a constant nor a list/tuple of those,
and a class that is not a plain Python subclass of torch.Tensor are left to the ordinary path (None). A False
answer is a constant of the trace; a True one is a graph break: what follows in torch's code is
`handle_torch_function`, whose call of `type(x).__torch_function__` (a torch Python classmethod) took the graph-op
path on fakes and raised TypeError, which `Tensor.__rsub__`'s wrapper turned into NotImplemented (eager: the result),
so it runs as Python, as it did when the check ran on a gated tensor (NOTE [Inlined __torch_function__]). For the
same reason a call of `handle_torch_function` reaching the graph-op path (a resume function after that break:
`Tensor.__rsub__`'s wrapper compiled as a frame of its own) is a graph break.
"""
from __future__ import annotations

from typing import Any

import torch

from . import lookup
from .values import SequenceValue, TensorValue, Value

_PROTOCOL = (torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
             torch.overrides.has_torch_function_variadic)


def is_protocol_check(fn: Any) -> bool:
    try:
        return any(fn is p for p in _PROTOCOL)  # by identity: never a user object's __eq__
    except TypeError:
        return False


def _subclass_tensors(v: Value) -> list[TensorValue]:
    if isinstance(v, SequenceValue) and v.cls in (tuple, list):
        return [t for i in v.items for t in _subclass_tensors(i)]
    return [v] if isinstance(v, TensorValue) and v.python_type() is not torch.Tensor else []


def protocol_answer(tx, fn: Any, args: list[Value], kwargs: dict) -> Value | None:
    """`fn(*args)` for a protocol check with a subclass tensor among `args` (NOTE [Protocol checks of subclass
    tensors]); None when no argument is one or the stand-ins cannot answer."""
    if fn is torch.overrides.handle_torch_function:  # run on fakes, it raised TypeError: "no implementation found"
        from .breaks import BreakKind, Unsupported
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "handle_torch_function runs as Python")
    if kwargs or not is_protocol_check(fn) or not any(_subclass_tensors(a) for a in args):
        return None
    leaves = [_stand_in(tx, a) for a in args]
    if any(leaf is _NONE for leaf in leaves):
        return None
    dispatch_on(tx.output)
    if fn(*leaves):
        from .breaks import BreakKind, Unsupported
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} of a tensor subclass is True: torch's "
                          "handle_torch_function path runs as Python")
    from .values import ConstantValue
    return ConstantValue(False)


_NONE = object()


def _stand_in(tx, v: Value) -> Any:
    if isinstance(v, SequenceValue) and v.cls in (tuple, list):
        items = [_stand_in(tx, i) for i in v.items]
        return _NONE if any(i is _NONE for i in items) else v.cls(items)
    if v.is_constant():
        return v.as_constant()
    if not isinstance(v, TensorValue):
        return _NONE
    cls = v.python_type()
    if cls is torch.Tensor:
        return torch.empty(0)
    if not isinstance(cls, type) or not issubclass(cls, torch.Tensor) or type(cls) not in (type, torch._C._TensorMeta):
        return _NONE
    from .tensor_attrs import input_of
    found = input_of(tx.output, v)
    if found is not None and "__torch_function__" in getattr(found.tensor, "__dict__", {}):
        return _NONE
    lookup.guard_lookup(tx.output, cls, "__torch_function__")
    if found is not None and v.source is not None:
        lookup.guard_not_in_instance(tx.output, v.source, found.tensor, "__torch_function__")
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor._make_subclass(cls, torch.empty(0))


# NOTE [Subclass results with dispatch off]: a frame called under an outside `DisableTorchFunctionSubclass` (torch's
# own code does so around `func` in Tensor.__torch_function__, and user code around a block) runs no subclass
# __torch_function__, so eager's op results on a plain Python subclass are plain Tensors; result_class gave them the
# subclass regardless (`type(x.sum())` MyT where eager gives Tensor: issue 12 follow-up). The state is read once per
# trace and guarded (on or off) for every call the entry serves; inside a block the trace itself turned off
# (NOTE [Inlined __torch_function__]: off for real then too) it is the trace's, not guarded.
def dispatch_on(out) -> bool:
    """Whether subclass __torch_function__ dispatch is on where the trace is; guarded when it is the caller's state
    (NOTE [Subclass results with dispatch off])."""
    from .torch_function_inline import _STATE
    enabled = torch._C._is_torch_function_enabled()
    if _STATE.real:
        return enabled
    from ..guards import COST_ID
    on = out.name_of(torch._C._is_torch_function_enabled, "torch_function_enabled")
    expr = f"{on}()" if enabled else f"not {on}()"
    if not any(g.expr == expr for g in out.guards):
        out.add_guard("TORCH_FUNCTION_STATE", expr, None, cost=COST_ID,
                      expected=f"subclass __torch_function__ dispatch {'on' if enabled else 'off'}")
    return enabled
