"""`delattr(obj, name)` / `del obj.name` of an instance attribute of an object (or module) from outside.

NOTE [Attribute deletes on objects from outside]: a delete of an attribute of an object the frame did not make
was always a graph break. torch's own `LazyModuleMixin._infer_parameters` ends with
`delattr(module, '_initialize_hook')` and `delattr(module, '_load_hook')`, so the first call of every
user-defined lazy module broke there (fullgraph=True raised), and `del self.cache` in a forward split it.
Where the delete is exactly `del obj.__dict__[name]` in eager it is now recorded like an attribute store
(side_effects.delete_attr; replayed after the graph as DELETE_ATTR on the object reloaded from its source):
- the class's `__delattr__` is object's or nn.Module's own (found on the class and pinned by identity);
- `name` is in the object's plain instance dict and the class has no data descriptor of that name (nor
  gains one: the class lookup is guarded), and for a module it is in none of `_parameters`, `_buffers`,
  `_modules` (Module.__delattr__ deletes from those first); the entry's presence and the slots' absence are
  guarded, so a later call where the attribute is gone retraces (eager raises AttributeError there);
- no store or delete of the same name is pending in the trace and the trace does not hold the object's
  `__dict__` as a dict value (it would not see the delete).
A later read of the name in the same trace (`obj.name`, `hasattr`, `getattr(obj, name, d)`, the instance
dict) is a break, so the replay deletes it first and Python answers (the class attribute it may now reach,
Module.__getattr__, AttributeError). A registered parameter, buffer or submodule of a module with torch's own
__delattr__ (`del self.w`) is deleted by that __delattr__ inlined: a `del` from the trace's view of the slot
dict, replayed after the graph (NOTE [Module slots written while tracing]). Any other delete is still a break.
A finalizer (`__del__`, a weakref callback) that the delete runs is run by the replay, after the replayed
container writes the frame made later (review revAL MED-1: known, not handled).

NOTE [Stores after a delete of the same name]: `del o.a; o.a = v` leaves `a` at the END of the instance dict in
eager. The store used to overwrite the recorded delete in place, so the replay stored `a` at its old position
(review revAL HIGH-1). Such a store (side_effects.store_attr) now moves the key to the end of the recorded
writes and marks it `readded_attrs`: the replay is DELETE_ATTR then the store, the trace's view of the dict
(apply_pending_attrs) drops the name and appends it, and graph_errors does not make it as an early effect.
"""
from __future__ import annotations

from typing import Any

import torch

from ..guards import COST_ID
from . import lookup
from .breaks import BreakKind, Unsupported
from .values import ConstantValue, ObjectValue, TensorValue, Value

_SLOTS = ("_parameters", "_buffers", "_modules")


def delete_outside_attr(tx, obj: Value, name: Any) -> Value:
    """`delattr(obj, name)` recorded for the replay (module docstring), or the break it was."""
    if not isinstance(obj, ObjectValue) or isinstance(obj, TensorValue) or obj.source is None or \
            not isinstance(name, str):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "delattr of an object from outside")
    real = obj.obj
    cls = type(real)
    index, impl = lookup.mro_lookup(cls, "__delattr__")
    is_module = isinstance(real, torch.nn.Module)
    if impl is not object.__delattr__ and not (is_module and lookup.is_module_default(impl, "__delattr__")):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"delattr on a {cls.__name__} with its own __delattr__")
    d = real.__dict__ if type(getattr(real, "__dict__", None)) is dict else None
    if is_module and d is not None and impl is not object.__delattr__ and name not in d and \
            any(name in (d.get(slot) or {}) for slot in _SLOTS):
        return _delete_registered(tx, obj, name, index, impl)
    _, attr = lookup.mro_lookup(cls, name)
    se = tx.output.side_effects
    if d is None or name not in d or _takes_delete(attr) or \
            (is_module and any(name in (d.get(slot) or {}) for slot in _SLOTS)) or \
            (id(real), name) in se.attrs or se._held_dict(d) is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"delattr of {name!r} of {obj.describe()}")
    out = tx.output
    lookup.guard_entry_identity(out, lookup.guard_found_on_class(out, cls, "__delattr__", index), impl)
    lookup.guard_plain_store(out, cls, name)  # the class attribute `name`, if any, stays that object
    e = lookup.instance_dict_source(obj.source, real).expr(out.names)
    out.add_guard("INSTANCE_ATTR_PRESENT", f"{name!r} in {e}", obj.source,
                  expected=f"an instance attribute {name!r}", actual=f"{name!r} in {e}", cost=COST_ID)
    if is_module:
        m = obj.source.expr(out.names)
        for slot in _SLOTS:
            out.add_guard("MODULE_ATTR_ABSENT", f"{name!r} not in {m}.{slot}", obj.source,
                          expected=f"no {slot[1:-1]} {name!r}", actual=f"{m}.{slot}.get({name!r})",
                          cost=COST_ID)
    se.delete_attr(obj, name)
    return ConstantValue(None)


def _delete_registered(tx, module: ObjectValue, name: str, index: Any, impl: Any) -> Value:
    """`del module.name` for a registered parameter, buffer or submodule: torch's Module.__delattr__ (pinned
    by identity) inlined, so its `del self._parameters[name]` (or _buffers, _modules) is a write into the
    trace's view of that dict, replayed after the graph (NOTE [Module slots written while tracing])."""
    from .values import UserFunctionValue
    out = tx.output
    lookup.guard_entry_identity(out, lookup.guard_found_on_class(out, type(module.obj), "__delattr__", index), impl)
    return tx.inline(UserFunctionValue(impl), [module, ConstantValue(name)], {})


def _takes_delete(attr: Any) -> bool:
    """A class attribute whose type defines `__set__` or `__delete__`: object.__delattr__ calls it instead."""
    return attr is not None and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__"))


__all__ = ["delete_outside_attr"]
