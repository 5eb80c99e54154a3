"""Writes through the `.data` of graph inputs, kept in the graph.

NOTE [Writes through the .data of inputs]: `p.data` is p's memory outside autograd, with a version counter
of its own: an in-place write through it (a hand-written SGD step `p.data.add_(p.grad, alpha=-lr)`, an EMA
`pe.data.mul_(d).add_(pm.data, alpha=1 - d)`, `p.grad.data.zero_()`, `pe.data.copy_(pm.data)`) changes p's
values but not `p._version`, and is allowed on a leaf that requires grad. It was read as a graph input of
its own (NOTE [Data of inputs] in attributes.py), so every such write was a graph break (two inputs, one
memory), and a loop over parameters ran as Python: 0 graphs where stock torch.compile makes one (review
hhuntG MED-1). The `.data` of a tensor sharing memory with a graph input is now the graph node
`torch._C._autograd._get_data_attr(t)` (as in stock dynamo): on the eager backend that is `t.data` itself;
a functionalizing backend (onnxrt, triton) sees a detach alias of the input, whose writes it writes back
into the input. Its fake has its own version counter, as the real one, so the input's own counter check
(OutputGraph._check_input_mutation) does not see the write: `check_data_writes` compares the counters of
these aliases after every writing op and records a write of the input with no version bump, so the
written input gets its counter back after a functionalizing backend's write-back (KeptVersions in
input_versions.py: `input_writes` lists it with its own bumps, 0 for writes through `.data` alone).

Autograd: eager's write through `.data` is invisible to autograd, so a graph that saved the input for its
backward (`loss = (w * x).sum(); w.data.add_(1)`) sees the new value in eager's backward, and an op on the
input after the write differentiates to the input itself; a functionalized graph differentiates its
functional values instead. A graph with such a write therefore records no autograd at all (no op result
requires grad): the write is a break when the graph already records some (`check_data_writes`), and when
an op after it does, the frame breaks at the first such write (`check_data_autograd`, as NOTE [Aliased
inputs written before the alias is read] in graph.py). Inputs without a version counter (inference
tensors) keep NOTE [Data of inputs].
"""
from __future__ import annotations

from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .graph_calls import _target_name, _version
from .input_aliases import fake_sharers
from .values import TensorValue, Value

_DATA = torch._C._autograd._get_data_attr
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a subclass may define its own `.data` or `__setattr__`


def _storage_key(fake: torch.Tensor) -> int:
    return fake.untyped_storage()._cdata


def data_of_input(tx, t: TensorValue) -> Value | None:
    """`t.data` as the graph node `_get_data_attr(t)` when t shares memory with graph inputs that all have a
    version counter; None otherwise (the caller's older ways)."""
    out = tx.output
    if t.fake is None or t.fake.is_inference():
        return None
    key = _storage_key(t.fake)
    entries = fake_sharers(out, key)  # NOTE [Inputs sharing memory, indexed]
    if not entries or any(i.version is None or type(i.tensor) not in _PLAIN for i in entries):
        return None
    value = out.call("call_function", _DATA, (t,), {})
    if not isinstance(value, TensorValue) or _version(value.fake) is None:
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "Tensor.data of an input gave no tensor with a version")
    site = out._write_site()  # NOTE [.data aliases live after the graph]
    out.__dict__.setdefault("data_aliases", []).append([value.fake, _version(value.fake), entries[0], site])
    return value


def check_data_writes(out, target: Any, fakes: list) -> None:
    """After an op that bumped version counters: a write through the `.data` alias of an input is a write
    of that input which bumps no version of it (NOTE [Writes through the .data of inputs])."""
    for alias in out.__dict__.get("data_aliases", ()):
        fake, version, entry, _ = alias
        if fake._version == version:
            continue
        alias[1] = fake._version
        if _records_autograd(out) or (out.grad_enabled and any(f.requires_grad for f in fakes)):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} through the .data of "
                              f"{entry.source.describe()} in a graph that records autograd")
        if entry.tensor.requires_grad and entry.tensor._is_view():  # NOTE [Writes through .data run under no_grad]
            raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} through the .data of "
                              f"{entry.source.describe()}, a view that requires grad")
        out.input_written(entry, target)
        if out.grad_enabled:  # NOTE [Writes through .data run under no_grad]
            anchors = out.__dict__.setdefault("data_write_anchors", {})
            last = next(iter(reversed(out.graph.nodes)))
            anchors.setdefault(id(last), (last, target))
        written = out.__dict__.setdefault("data_written", {})
        if id(entry) not in written:
            written[id(entry)] = out._write_site()


def check_data_outputs(out, values: list) -> None:
    """At the end of the graph: no `.data` alias is an output (NOTE [.data aliases live after the graph]);
    writes through `.data` under no_grad (NOTE [Writes through .data run under no_grad])."""
    _writes_without_grad(out)
    aliases = out.__dict__.get("data_aliases")
    if not aliases:
        return
    keys = {_storage_key(v.fake): v for v in values if isinstance(v, TensorValue) and v.fake is not None
            and v.node.op != "placeholder"}
    for fake, _, entry, site in aliases:
        if _storage_key(fake) in keys:
            _break_at(site, f"the .data of {entry.source.describe()} (or a view of it) is live after the graph")


# NOTE [.data aliases live after the graph]: a `.data` alias that outlives the graph (a value on the stack or in
# a local at a break: `d = p.data; print(d); d.add_(1)`) is a graph output, which a functionalizing backend
# returns as an alias of the input p sharing p's version counter, so the write after the break bumped
# `p._version` where eager's `.data` does not. The frame breaks where the alias is read: that instruction
# runs as Python (the real `p.data`), and the code after it sees the real alias.
def _break_at(site: tuple, why: str) -> None:
    e = Unsupported(BreakKind.SIDE_EFFECT, why)
    e.root_index, stack = site
    raise e.with_stack(stack)


# NOTE [Writes through .data run under no_grad]: a functionalizing backend (AOT autograd) writes a mutated
# input back after the graph with `x.copy_(new)`, under autograd unless every write of x was made under no_grad:
# a non-leaf input written through `.data` got the grad_fn CopyBackwards (eager keeps its own), and a view of a
# leaf that requires grad raised "a view of a leaf Variable that requires grad is being used in an in-place
# operation". Eager's write through `.data` is invisible to autograd, as one under no_grad is: each such op
# (whose arguments require no grad: it records nothing, checked in check_data_writes) runs between
# `_set_grad_enabled(False)` and `_set_grad_enabled(True)` nodes, put around it when the graph ends. A view that
# requires grad, written back under no_grad, gets a new grad_fn (AsStridedBackward0, as eager's own write under
# no_grad gives it) where eager's write through `.data` keeps its ViewBackward0: such a write is a break.
def _writes_without_grad(out) -> None:
    for anchor, target in out.__dict__.pop("data_write_anchors", {}).values():
        node = anchor.next
        if node.op not in ("call_function", "call_method") or node.target != target:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} through .data: its node "
                              "was not found")
        for place, mode in ((out.graph.inserting_before, False), (out.graph.inserting_after, True)):
            with place(node):  # (an insert point is set when it is made, and put back on exit)
                switch = out.graph.call_function(torch._C._set_grad_enabled, (mode,))
            switch.meta.update(effect=True, stack_trace=node.meta.get("stack_trace"))


def data_written(out) -> set[int]:
    """ids of the graph inputs written through their `.data`."""
    return set(out.__dict__.get("data_written", ()))


def _records_autograd(out) -> bool:
    """Whether an op of the graph so far recorded autograd: ran with grad enabled and made a tensor that requires
    grad (an in-place op under no_grad returns its argument, which may have a grad_fn: it records nothing)."""
    mode = out.entry_grad_enabled
    for node in out.graph.nodes:
        if node.target is torch._C._set_grad_enabled:
            mode = node.args[0]
        elif mode and node.op in ("call_function", "call_method") and \
                isinstance(node.meta.get("val"), torch.Tensor) and node.meta["val"].requires_grad:
            return True
    return False


# NOTE [Stores to the .data of inputs]: `p.data = p.data * 0.5` over a module's parameters was a graph break per
# store ("assignment to the attribute 'data'"), and the break inside the loop made each later step run as
# Python (4 graphs, 5 breaks for two layers, where stock torch.compile makes one graph). The store of a tensor
# the graph made, into a graph input of the same shape, strides, offset, dtype and device, is recorded as an
# attribute store replayed after the graph (`p.data = v` on the real p, reloaded from its source: eager's own
# store, which keeps p's identity, version counter, requires_grad and grad_fn). The trace's metadata of p stays
# right (nothing of it changes), but its values are the graph's old input: an op reading p after the store
# (`check_stored_data`, a `.data` read included) is a graph break, where the graph ends, the store is replayed,
# and the code after it reads the real p. A store of another shape, dtype or layout, of a graph input, or of a
# tensor sharing memory with one, stays a break (runs as Python).
def store_data(out, obj: Value, value: Value) -> bool:
    """`obj.data = value` recorded for the replay after the graph; False: not such a store (the caller breaks)."""
    entry = next((i for i in out.inputs if i.value is obj), None) if isinstance(obj, TensorValue) else None
    if entry is None or entry.version is None or obj.source is None or not isinstance(value, TensorValue) or \
            value.fake is None or value.node.op == "placeholder" or type(entry.tensor) not in _PLAIN:
        return False
    old, new = obj.fake, value.fake
    if new.layout is not torch.strided or new.is_inference() or \
            (old.shape, old.stride(), old.storage_offset(), old.dtype, old.device) != \
            (new.shape, new.stride(), new.storage_offset(), new.dtype, new.device):
        return False
    key = _storage_key(new)
    if any(_storage_key(i.value.fake) == key for i in out.inputs if isinstance(i.value, TensorValue)
           and i.value.fake is not None) or any(_storage_key(a[0]) == key for a in out.__dict__.get("data_aliases", ())):
        return False
    se = out.side_effects
    se.version += 1
    se.module_flag_stores += 1  # NOTE [Flag stores during module walks]: parameters() yields the same tensors
    se._mark(("attr", id(entry.tensor), "data"))
    se.attrs[(id(entry.tensor), "data")] = (obj, "data", value)
    se.raw_attrs.discard((id(entry.tensor), "data"))
    out.__dict__.setdefault("data_stored", {})[id(old)] = entry
    return True


def check_stored_data(out, fakes: list) -> None:
    """Before an op: none of its tensors is an input whose `.data` the graph stored (NOTE [Stores to the .data
    of inputs])."""
    stored = out.__dict__.get("data_stored")
    if stored:
        for fake in fakes:
            entry = stored.get(id(fake))
            if entry is not None and entry.value.fake is fake:
                raise Unsupported(BreakKind.SIDE_EFFECT, f"{entry.source.describe()} read after a store to its "
                                  ".data (replayed after the graph)")
