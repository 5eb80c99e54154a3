"""Which graph inputs share memory, found through indexes instead of scans of every input.

NOTE [Inputs sharing memory, indexed]: a manual SGD step over a model's parameters
(`for p in params: p.data.add_(p.grad, alpha=-lr)`) makes a graph with 2N inputs and 2N ops. After each writing
op the trace asked which inputs it wrote (a version read of every input), which inputs share memory with the one
written (a storage read of every input's real tensor), and each `.data` read which inputs share its storage
(every input's fake storage): O(N^2) reads, about 25 s of a 40 s trace of 800 parameters (cProfile). Inputs are
only ever appended to `OutputGraph.inputs`, so two indexes kept up to date by the inputs added since their last
use answer those questions in the order of the inputs (the order the scans had):
- by the real tensor's storage (real tensors do not change while tracing: no real op runs);
- by the fake tensor's storage. A write bumps the version counter of the tensor written, shared exactly with its
  views (autograd views share the storage of their base; `.detach()`, `.data` get a counter of their own on the
  same storage), so the inputs an op can have bumped are among those on the storage of one of its tensor
  arguments. An op that moves a tensor onto another storage (graph_errors.METADATA_WRITES: `set_`, `resize_`,
  ...) makes the fake index stale: it is rebuilt, and that op's inputs are all compared as before. A fake whose
  storage cannot be read (a wrapper subclass) is compared after every op, as before.

NOTE [One guard for the inputs written in place] (guards/codegen.py): `alias_guard` here.
"""
from __future__ import annotations

from typing import Any

from ..guards import COST_TENSOR
from ..guards.codegen import _storage_pointer
from .breaks import BreakKind, Unsupported
from .values import TensorValue

_UNKEYED = object()  # the fake-index key of inputs whose storage cannot be read


def _fake_key(fake: Any) -> Any:
    try:
        return fake.untyped_storage()._cdata
    except Exception:
        return _UNKEYED


def _fake_key_of(entry: Any) -> Any:
    return _fake_key(entry.value.fake)


def _index(out, name: str, key_of) -> dict:
    """The index `name` of the tensor inputs of `out`: `key_of(entry)` -> [(position, entry)] in input order,
    brought up to date."""
    state = out.__dict__.get(name)
    if state is None:
        state = out.__dict__[name] = [0, {}]
    done, index = state
    inputs = out.inputs
    for position in range(done, len(inputs)):
        entry = inputs[position]
        if isinstance(entry.value, TensorValue) and entry.value.fake is not None:
            index.setdefault(key_of(entry), []).append((position, entry))
    state[0] = len(inputs)
    return index


def _real_key(entry: Any) -> int:
    return _storage_pointer(entry.tensor)  # NOTE [Guards run no user code]: a subclass's own __torch_function__


def real_sharers(out, entry: Any) -> list:
    """The tensor inputs whose real tensor shares storage with `entry`'s (itself included), in input order."""
    return [e for _, e in _index(out, "real_storage_index", _real_key).get(_real_key(entry), ())]


def fake_sharers(out, key: int) -> list:
    """The tensor inputs with a fake whose storage is `key` (`untyped_storage()._cdata`), in input order."""
    return [e for _, e in _index(out, "fake_storage_index", _fake_key_of).get(key, ())]


def written_candidates(out, target: Any, fakes: list) -> list:
    """The inputs whose version an op on `fakes` may have bumped, in input order (NOTE [Inputs sharing memory,
    indexed]): those sharing a storage with one of `fakes`, the unkeyed ones; every input after an op that moves
    storages."""
    from .graph_errors import METADATA_WRITES
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name in METADATA_WRITES or name.split(".")[0] in METADATA_WRITES or name == "swap_tensors":
        out.__dict__.pop("fake_storage_index", None)
        return [i for i in out.inputs if isinstance(i.value, TensorValue)]  # not a dynamic int's or float's input
    index = _index(out, "fake_storage_index", _fake_key_of)
    picked: dict[int, Any] = {}
    for key in {_fake_key(f) for f in fakes} | {_UNKEYED}:
        picked.update(index.get(key, ()))
    return [picked[position] for position in sorted(picked)]


def alias_guard(out) -> None:
    """After input mutations, each mutated input must share no memory with any other input, now and on
    later calls (inputs that alias each other but are only read are fine: a view and its base)."""
    if not out.mutated_entries:
        return
    tensors = [i for i in out.inputs if isinstance(i.value, TensorValue)]
    if len(tensors) < 2:
        return
    storages: dict[int, int] = {}  # NOTE [One guard for the inputs written in place]
    for i in tensors:
        pointer = _storage_pointer(i.tensor)
        storages[pointer] = storages.get(pointer, 0) + 1
    for mutated in out.mutated_entries:
        if storages[_storage_pointer(mutated.tensor)] > 1:
            e = Unsupported(BreakKind.SIDE_EFFECT, f"in-place write of {mutated.source.describe()}, which "
                            "shares memory with an input read after it")
            e.root_index, stack = out.__dict__.get("first_writes", {}).get(id(mutated), (None, ()))
            raise e.with_stack(stack)  # NOTE [Aliased inputs written before the alias is read] (graph.py)
    written = set(map(id, out.mutated_entries))
    ordered = [*out.mutated_entries, *(i for i in tensors if id(i) not in written)]
    exprs = ", ".join(i.source.expr(out.names) for i in ordered)
    names = ", ".join(i.source.describe() for i in out.mutated_entries[:4])
    more = len(out.mutated_entries) - 4
    names += f" and {more} more" if more > 0 else ""
    out.add_guard("NO_ALIASING", f"___storages_apart({len(out.mutated_entries)}, {exprs})", None,
                  expected=f"{names} (mutated in place) share no memory with another input", cost=COST_TENSOR + 1)
