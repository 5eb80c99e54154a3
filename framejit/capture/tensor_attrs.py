"""Python attributes stored on tensors in the trace (NOTE [Attributes stored on tensors]).

NOTE [Attributes stored on tensors]: `y.tag = v` on a tensor (made by the graph, or a graph input) was a graph
break for every tensor, so a tensor subclass whose `__torch_function__` tags its results (`out.tag =
func.__name__`, inlined: NOTE [Inlined __torch_function__]) broke at every op, and so did user code that marks
a tensor (`y.scale = s`). A store of a name that no class of the tensor's MRO defines (a data descriptor such as
`grad` or `requires_grad`, a method, a `__slots__` entry: those keep their own paths or break), through a class
whose `__setattr__` is Tensor's own, is a plain write into the tensor's instance dict: it is recorded as an
attribute store (side_effects.attrs) replayed after the graph on the tensor itself (a graph output, loaded as
the value it is: NOTE [Write targets bound before the writes]; an input reloaded from its source), so the
object eager returns or keeps has the attribute. The facts it relies on are guarded: the class's `__setattr__`
and the absence of `name` on every class of the MRO (lookup.guard_plain_store). A later read of the name in
the same trace (`y.tag`, `getattr(y, "tag", d)`, `hasattr`) answers the stored value (`stored_attr`, called
first by attributes._tensor_python_attr). The store is keyed by the tensor's identity in the trace: its fake
tensor for a tensor the graph made (an in-place op, `x.float()` of a float32 x and torch's `_convert` of an
argument return the same fake, as eager returns the same object), the real object for an input, also when it
is reached through another name: `z = x.contiguous()`, `x.clamp_()`, `x.add_(1)` of an input give a value
without a source over the input's very fake, and eager's `z is x`. Such a store is recorded on the input's own
value (reloaded from its source, one entry per name, so stores through both names replay in eager's order),
and a read through either name answers it, or the input's own attribute (guarded). Were they keyed apart
(review revM HIGH-1), `hasattr(x, "tag")` after `z.tag = 1` answered False, and the replay of the result of
`x.add_(1)` had no graph output to write to (MED-1). Two names whose classes differ: a break. A read of the
tensor's whole `__dict__` (`vars(y)`) is a break as before; so is `del y.tag`.
A tagged tensor the graph made is a graph output only when something after the frame can reach it
(NOTE [Stores on tensors that die in the frame]).
"""
from __future__ import annotations

from typing import Any

import torch

from .sources import AttrSource, CallSource, Ref, Source
from .values.base import Value
from .values.tensor import TensorValue


def _fake_of(t: TensorValue) -> Any:
    """The fake tensor of `t`, read past the gate of an inlined subclass (no user code runs for it)."""
    return t.__dict__.get("_fake", t.__dict__.get("fake"))


def refuse_changed_dict(out, real: Any, name: str) -> None:
    """Break at a read of `name` on the input tensor `real` when the trace holds its `__dict__` (`x.__dict__.pop(k)`,
    `vars(x)[k] = v` earlier in the frame): the real dict is not what this point of the program sees, through `x`
    or another name of it (`x.contiguous()`, `x.add_(1)`; review revQ HIGH-1, PRE-A)."""
    if real is not None and out.side_effects._held_dict(real.__dict__) is not None:
        from .breaks import BreakKind, Unsupported
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"attribute {name!r} of a tensor whose __dict__ the frame "
                          "changed")


def input_of(out, t: TensorValue) -> Any:
    """The graph input `t` is (an entry of out.inputs), also through another name for it: an op that returns
    its argument itself (`x.contiguous()`, `x.float()` of a float32 x, `x.clamp_()`) gives a source-less value
    over the input's very fake tensor, and eager's result `is` x (NOTE [Attributes stored on tensors]). None
    for a tensor the graph made."""
    found = next((i for i in out.inputs if i.value is t), None)
    if found is not None or t.source is not None:
        return found
    fake = _fake_of(t)
    return next((i for i in out.inputs if isinstance(i.value, TensorValue) and _fake_of(i.value) is fake), None)


def _key_object(out, t: TensorValue) -> Any:
    """What identifies the object `t` stands for: the real tensor of an input (through any name for it), the
    fake of a tensor the graph made; None when neither is known or the names disagree on the class (the caller
    breaks)."""
    found = input_of(out, t)
    if found is not None:
        return found.tensor if found.value.python_type() is t.python_type() else None
    if t.source is not None:
        return None
    return _fake_of(t)


def store_on_tensor(out, t: Value, name: str, value: Value) -> bool:
    """`t.name = value` on a tensor recorded for the replay after the graph (`.data`: NOTE [Stores to the .data
    of inputs]); False when it is not such a store (the caller takes its own path, a break)."""
    from . import lookup
    if not isinstance(t, TensorValue):
        return False
    if name == "data":
        from .data_alias import store_data
        return store_data(out, t, value)
    cls = t.python_type()
    if not isinstance(name, str) or (name.startswith("__") and name.endswith("__")) or \
            not issubclass(cls, torch.Tensor) or lookup.mro_lookup(cls, name)[0] is not None:
        return False
    if lookup.mro_lookup(cls, "__setattr__")[1] is not object.__setattr__:
        return False  # a class of the tensor defines __setattr__: NOTE [Custom __setattr__] paths or a break
    if cls.__dictoffset__ == 0:
        return False
    key_object = _key_object(out, t)
    if key_object is None:
        return False
    found = input_of(out, t)
    if found is not None and found.value is not t:
        if found.value.source is None:
            return False
        t = found.value  # the input itself is the target: reloaded from its source, one entry per name
    if t.source is not None and out.side_effects._held_dict(getattr(key_object, "__dict__", None)) is not None:
        return False  # the trace holds the input's __dict__ as a dict (NOTE [Stores under a dict the trace holds])
    lookup.guard_plain_store(out, cls, name)
    se = out.side_effects
    se.version += 1
    key = (id(key_object), name)
    se._mark(("attr",) + key)
    se.attrs[key] = (t, name, value)  # a store again keeps its first place: the instance dict's order
    se.raw_attrs.discard(key)
    se.__dict__.setdefault("tensor_attr_objects", {})[id(key_object)] = key_object  # kept alive: ids stay unique
    return True


def stored_or(out, t: TensorValue, name: str, otherwise) -> Value:
    """The value the trace stored under `t.name` (NOTE [Attributes stored on tensors]), else `otherwise()`."""
    objects = out.side_effects.__dict__.get("tensor_attr_objects")
    key_object = _key_object(out, t) if objects else None
    entry = out.side_effects.attrs.get((id(key_object), name)) if key_object is not None else None
    if entry is None or objects.get(id(key_object)) is not key_object:
        return otherwise()
    if out.side_effects.region_reads is not None:  # NOTE [State the frame writes around a reentrant call]
        out.side_effects.region_reads.read("attrs", (id(key_object), name), entry, checkable=False)
    return entry[2]


# NOTE [object's methods of tensors]: `x.__setattr__("a", v)` is `object.__setattr__(x, "a", v)` (Tensor keeps
# object's slot), but it was read as a Tensor method and called as an FX call_method on the fake tensor: the
# store landed on the fake at trace time, the caller's tensor never got it, and a read back raised
# AttributeError eager does not (review revM PRE-1). It is the bound builtin, whose handler records the store
# (NOTE [Attributes stored on tensors]); `x.__delattr__("a")` likewise takes object's path (a break), and
# `x.__getattribute__("a")` object's read (it ran on the fake, which has no stored attribute: the frame ran eagerly).
def object_method(t: TensorValue, attr: Any) -> Value | None:
    """`t.__setattr__` / `t.__delattr__` / `t.__getattribute__` as object's method bound to `t`; None for any
    other method."""
    if attr is object.__setattr__ or attr is object.__delattr__ or attr is object.__getattribute__:
        from .values import BoundMethodValue, BuiltinValue
        return BoundMethodValue(BuiltinValue(attr), t)
    return None


# NOTE [Stores on tensors that die in the frame]: each tensor the graph made and tagged was a graph output, kept
# alive until the replay: a tagging subclass over 80 ops of 8 MB peaked at 1006 MB where eager takes 262 (review
# revM MED-4). A store on a tensor that dies inside the frame is seen by nothing after it (reads in the trace
# answered the stored value already), so at the frame's return its stores are dropped. Live: a tensor the return
# value, the locals kept for a traceback or the other replayed effects reach (live_tensors), the values stored on
# a live tensor (to a fixpoint), and, to be safe, a tensor that requires grad (its autograd graph may hold it)
# or shares memory with a live tensor or an input (a view's `_base`). At a break the stores stay (the live
# locals of the resume function are not walked here).
def drop_dead_stores(out, roots: list) -> None:
    """Drop the stores on made tensors that nothing after the frame can reach."""
    from .break_sites import live_tensors
    from .data_alias import _storage_key
    se = out.side_effects
    made = {k: e for k, e in se.attrs.items() if e[0].source is None and isinstance(e[0], TensorValue)}
    if not made:
        return
    saved = dict(se.attrs)
    for key in made:
        del se.attrs[key]
    try:
        live_values = list(roots) + se.values()
    finally:
        se.attrs.clear()
        se.attrs.update(saved)
    while True:
        fakes = [_fake_of(t) for t in live_tensors(live_values, inputs=True) if isinstance(t, TensorValue)]
        fakes += [_fake_of(i.value) for i in out.inputs if isinstance(i.value, TensorValue)]
        ids = {id(f) for f in fakes if f is not None}
        storages = {_storage_key(f) for f in fakes if f is not None}
        reached = [k for k, (t, _, _) in made.items() if id(_fake_of(t)) in ids or _kept(_fake_of(t), storages)]
        if not reached:
            break
        for key in reached:
            live_values += [made[key][0], made[key][2]]
            del made[key]
    for key in made:
        del se.attrs[key]


def _kept(fake: Any, storages: set) -> bool:
    from .data_alias import _storage_key
    try:
        return fake is None or fake.requires_grad or _storage_key(fake) in storages
    except Exception:  # noqa: BLE001 - a fake without a plain storage (sparse, nested): keep its stores
        return True


def _grad_read(t: torch.Tensor) -> Any:
    with torch._C.DisableTorchFunctionSubclass():
        return t.grad


def grad_source(t: TensorValue) -> Source:
    """Where `t.grad` of an input leaf is reloaded and guarded from: `t.grad`, or for a class with its own
    __torch_function__ (NOTE [Inlined __torch_function__]) a read with subclass dispatch off, so no guard or
    reload calls the user's function (eager's read calls it once, inlined in the trace)."""
    from .torch_function_inline import inlines_torch_function
    if not inlines_torch_function(t.python_type()):
        return AttrSource(t.source, "grad")
    return CallSource(Ref(_grad_read, "grad_without_torch_function"), t.source)
