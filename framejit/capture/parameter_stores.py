"""`module.name = nn.Parameter(...)` registering a new parameter on a module from outside, inside the graph.

NOTE [Parameters registered in the trace]: Module.__setattr__ files a Parameter in `module._parameters`
(register_parameter). Replayed after the graph as a plain attribute store, the trace's own later reads of
`_parameters` (`named_parameters()`, `has_uninitialized_params()`, `m._parameters[...]`) would miss it, so
such a store was a break (NOTE [Registering stores into modules]). That made every user-defined lazy module
(LazyModuleMixin with an `initialize_parameters` that does `self.w = nn.Parameter(torch.empty(...))`) break
at its first call: fullgraph=True raised. Where the store is exactly `module._parameters[name] = value` in
eager, it is now made as that dict write in the trace (handlers' `_store_item` on the trace's value of
`module._parameters`, replayed after the graph like any write into a dict from outside), so every later
read in the trace goes through the dict as the trace left it (NOTE [Module slots written while tracing]:
`m.name` answers the new parameter, a walk over the written dict breaks). Exactly, when:
- the module has torch's own `__setattr__` (a custom one is inlined before this) and `__getattr__`, its
  `_parameters` is a plain dict, and the value is a Parameter (Module.__setattr__'s isinstance check);
- `name` is a non-empty str without '.', in none of `__dict__`, `_buffers`, `_modules`,
  `_non_persistent_buffers_set` (remove_from would take it out of them), and `hasattr(module, name)` is
  False: read through the trace, which guards the absence (instance dict, class, every slot), so a later
  call where the name exists retraces; register_parameter's KeyError for a class attribute is eager's;
- torch's global parameter-registration hooks are empty (guarded): they would run, and may replace the value.
A Parameter replacing a registered one (`self.w = nn.Parameter(self.w.detach() * 2)`) is the same dict write
(register_parameter asks no hasattr for a registered name): made so while the trace has not taken `_parameters`
as a dict, the name's presence guarded. Otherwise the store breaks as before.
"""
from __future__ import annotations

import torch
from torch.nn.modules import module as _torch_module

from .breaks import UserException
from . import lookup
from .lookup import is_module_default
from .values import ConstantValue, NNModuleValue, Value


def register_parameter_store(tx, module: NNModuleValue, name: str, value: Value) -> bool:
    """`module.name = value` made as `module._parameters[name] = value` when that is what eager does (module
    docstring); False when the store is left to the usual path (which breaks for a Parameter)."""
    m = module.obj
    try:
        kind = value.python_type()
    except Exception:  # noqa: BLE001 - a value without a known type: the usual path
        return False
    if not (isinstance(kind, type) and issubclass(kind, torch.nn.Parameter)) or module.source is None:
        return False
    if not _made_leaf(value):  # eager's register_parameter raises for a non-leaf: left to the usual path
        return False
    cls = type(m)
    params = m.__dict__.get("_parameters")
    if type(params) is not dict or not isinstance(name, str) or not name or "." in name or \
            not is_module_default(getattr(cls, "__getattr__", None), "__getattr__") or \
            not is_module_default(getattr(cls, "__setattr__", None), "__setattr__"):
        return False
    if name in m.__dict__ or name in (m.__dict__.get("_buffers") or {}) or \
            name in (m.__dict__.get("_modules") or {}) or \
            name in (m.__dict__.get("_non_persistent_buffers_set") or ()):
        return False
    if _torch_module._global_parameter_registration_hooks:
        return False
    if name in params:  # a replacement: register_parameter asks no hasattr then
        if not _replaceable(tx, module, name):
            return False
    elif not _absent(tx, module, name):
        return False
    _guard_no_registration_hooks(tx)
    _guard_not_in(tx, module, name, "_non_persistent_buffers_set")
    from .handlers.arith import _store_item
    _store_item(tx, tx.getattr(module, "_parameters"), ConstantValue(name), value)
    return True


def _made_leaf(value: Value) -> bool:
    """A Parameter made by the traced code whose fake tensor has no grad_fn (`nn.Parameter(t)` detaches).
    One from outside is not taken: its leafness is not a guarded fact (a `t.as_subclass(Parameter)` of a
    tensor with a grad_fn is a non-leaf Parameter, which register_parameter refuses)."""
    fake = getattr(value, "fake", None)
    return getattr(value, "source", None) is None and isinstance(fake, torch.Tensor) and fake.grad_fn is None


def _absent(tx, module: NNModuleValue, name: str) -> bool:
    """`hasattr(module, name)` is False, read through the trace (its absence guarded)."""
    try:
        tx.getattr(module, name)
        return False
    except UserException as e:
        return isinstance(e.exc, AttributeError)


def _replaceable(tx, module: NNModuleValue, name: str) -> bool:
    """`name` is a registered parameter and the trace has not taken `_parameters` as a dict (whose view, not
    the real dict, would decide); guarded with the other slots and the instance dict staying without it."""
    from .attributes import traced_slot
    if traced_slot(tx, module, "_parameters") is not None:
        return False
    e = f"{module.source.expr(tx.output.names)}._parameters"
    tx.output.add_guard("MODULE_ATTR_PRESENT", f"{name!r} in {e}", module.source, expected=f"a parameter {name!r}",
                        actual=f"{name!r} in {e}")
    lookup.guard_not_in_instance(tx.output, module.source, module.obj, name)
    for slot in ("_buffers", "_modules"):
        _guard_not_in(tx, module, name, slot)
    return True


def _guard_no_registration_hooks(tx) -> None:
    hooks = tx.output.name_of(_torch_module._global_parameter_registration_hooks, "PARAM_HOOKS")
    tx.output.add_guard("NO_GLOBAL_HOOKS", f"not {hooks}", None, expected="no parameter registration hooks",
                        actual=hooks)


def _guard_not_in(tx, module: NNModuleValue, name: str, slot: str) -> None:
    e = f"{module.source.expr(tx.output.names)}.{slot}"
    tx.output.add_guard("MODULE_ATTR_ABSENT", f"{name!r} not in {e}", module.source,
                        expected=f"{name!r} not in {slot}", actual=e)


__all__ = ["register_parameter_store"]
