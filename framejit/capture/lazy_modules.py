"""torch's own lazy modules (LazyLinear, LazyConvNd, LazyBatchNormNd, ...) initialised while tracing.

NOTE [Lazy modules initialised while tracing]: the first call of a lazy module runs its forward-pre hook
`_infer_parameters`, which reads the input's shape, materialises the parameters (drawing their initial
values from torch's generator) and turns the module into its `cls_to_become` (LazyLinear -> Linear).
Before this, such a call was always a graph break (NOTE [Module hooks]), so `fullgraph=True` raised on the
first call of any model holding one. Now `call_module` runs that hook at trace time, on meta tensors of the
inputs' shapes, and traces the call of the initialised module; it does so only where this is exactly what
eager does at that call:
- the module is an instance of one of torch's own lazy classes (type defined in torch.nn.modules), whose
  `initialize_parameters` reads nothing but the inputs' shapes and the module itself, and its only hook
  anywhere is its own initialising pre-hook (no other module or global hook: those would run around it);
- every argument is a tensor of concrete sizes (symbolic sizes keep the break, as stock Dynamo fails there);
- the trace so far has no op that draws random numbers (NOTE [Random ops by name]) and no pending side
  effect: the initial values are drawn now, before the graph runs, so they equal eager's only when nothing
  before the call in this graph draws (what ran before the trace, earlier graphs of the frame included,
  has drawn already) and nothing the replay writes after the graph could change what the hook reads;
- no dispatch mode is active (the parameters must be real tensors), and the trace entered no inference-mode
  block (eager would materialise inference tensors inside it; grad mode does not matter: the hooks
  materialise and fill the parameters under no_grad).
A lazy module with nothing to materialise (LazyBatchNorm2d(affine=False, track_running_stats=False)) still
has the pre-hook, which only removes itself and changes the class: it is run the same way (tracing it
failed at the weakref call inside RemovableHandle.remove, so fullgraph=True raised). Otherwise the call
stays the break it was. The next call with an uninitialised module at the same source
fails the entry's NO_HOOKS guard (its pre-hook dict is not empty) and the type guards of its parameters.
Known difference (failing graphs only): a graph op before the call that raises at run time leaves the
module initialised where eager leaves it uninitialised (the exception itself is eager's).
"""
from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules import lazy as _lazy
from torch.nn.modules import module as _torch_module
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .lookup import is_module_default

_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks")
_OTHER_HOOK_DICTS = ("_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


def initialise_at_trace(tx, mod_value, args: list, kwargs: dict) -> None:
    """Run the initialising pre-hook of an uninitialised torch lazy module now when the conditions of
    NOTE [Lazy modules initialised while tracing] hold; otherwise leave the module as it is (its call is
    then a break, module_hooks.plan_module_call)."""
    m = mod_value.obj
    if not (issubclass(type(m), _lazy.LazyModuleMixin) and "_initialize_hook" in m.__dict__):
        return  # initialised (or its hook removed): an ordinary module
    stand_ins = _meta_stand_ins(args, kwargs)
    if stand_ins is None or mod_value.source is None or not _only_own_hook(m) or not _trace_allows(tx):
        return
    lazy_cls = type(m)
    try:
        m._infer_parameters(m, tuple(stand_ins))
    except Exception:  # noqa: BLE001 - eager raises it again at the break (nothing was materialised)
        return
    if type(m) is not lazy_cls:
        _retype_guard(tx.output, mod_value.source, lazy_cls, type(m))


def _retype_guard(output, source, lazy_cls: type, cls: type) -> None:
    """The module's type was guarded as the lazy class when the trace read it; the entry holds code for
    the initialised class (`cls_to_become`), so that is the type its guard checks (an uninitialised
    module at this source fails it and is initialised by a new trace)."""
    e = source.expr(output.names)
    stale = f"___type({e}) is {output.name_of(lazy_cls, lazy_cls.__name__)}"
    output.guards[:] = [g for g in output.guards if not (g.kind == "TYPE_MATCH" and g.expr == stale)]
    output.guard_type(source, cls)


def _meta_stand_ins(args: list, kwargs: dict) -> list[torch.Tensor] | None:
    from .values import TensorValue
    if kwargs or not args or not all(isinstance(a, TensorValue) for a in args):
        return None
    fakes = [a.fake for a in args]
    if not all(isinstance(s, int) for f in fakes for s in f.shape):
        return None  # symbolic sizes: the parameters' shapes would be symbolic
    return [torch.empty(tuple(f.shape), dtype=f.dtype, device="meta") for f in fakes]


def _only_own_hook(m: torch.nn.Module) -> bool:
    cls = type(m)
    if not cls.__module__.startswith("torch.nn.modules.") or \
            cls._infer_parameters is not _lazy.LazyModuleMixin._infer_parameters or \
            not is_module_default(cls.__call__, "__call__") or not is_module_default(cls._call_impl, "_call_impl"):
        return False
    if "_call_impl" in m.__dict__ or "_compiled_call_impl" in m.__dict__:
        return False
    handle = m.__dict__.get("_initialize_hook")
    if handle is None or list(m._forward_pre_hooks) != [handle.id]:
        return False
    if any(getattr(m, d, None) for d in _OTHER_HOOK_DICTS):
        return False
    return not any(getattr(_torch_module, d) for d in _GLOBAL_HOOK_DICTS)


def _trace_allows(tx) -> bool:
    from .requests import draws_random
    if _get_current_dispatch_mode() is not None or tx.output.side_effects:
        return False
    for n in tx.output.graph.nodes:
        if n.op in ("call_function", "call_method") and draws_random(n.target, n.args, n.kwargs):
            return False
        if n.target is torch.autograd.grad_mode._enter_inference_mode:
            return False  # eager would materialise inference tensors inside the block
    return True


__all__: list[Any] = ["initialise_at_trace"]
