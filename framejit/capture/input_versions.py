"""Version counters of graph inputs written in place, kept as eager keeps them.

NOTE [Version counts of written inputs]: every in-place write bumps a tensor's version counter (`x._version`,
shared by its views), which autograd compares to detect a saved tensor modified since, and which user code may
read (caches keyed on `(id(t), t._version)`). While tracing, each op that changed an input's fake counter counts
one write of that input, as one eager op bumps once (NOTE [Input mutation] in graph.py; a fake op may bump
more). A backend that runs the graph as its Python code (the eager backend: `gm.forward`) makes the same
writes; one that functionalizes it (onnxrt, triton) writes each input back once, so two writes to an input
left `_version` 1 where eager gives 2 (red team 6). The graph's callable is then wrapped: after each call,
every written input's counter is set to what eager's writes would have made it
(`torch._C._autograd._unsafe_set_version_counter`), whatever the backend bumped itself. The frame cache
persists the counts with the entry and wraps the restored callable again.

NOTE [Writes eager does not count]: batch_norm in training mode writes its running statistics without bumping
their counters (`native_batch_norm`'s schema does not mark the write, so neither eager nor the fake trace bumps),
while a functionalized backend writes them back with a `copy_`, which bumps: onnxrt advanced `running_mean`'s
counter by one per training call, triton by one per call with autograd (red team 7). Such inputs count zero
writes, so the wrapper puts their counters back to where they were before the call. This hides their write
from anything that notices changes by version, as eager's batch_norm does: onnxrt's frozen weights compare
running statistics by value for that reason (NOTE [Statistics written without a bump] in onnxrt/compiler.py;
before that, this wrapper made them serve stale statistics).

NOTE [Version counts of graph outputs]: a tensor the graph makes and then writes in place (`y = x * 2;
y.add_(1); return y`) has `_version` 1 in eager, and on the eager backend, which runs the same ops; a
functionalized backend returns a fresh tensor whose counter is 0 (red team 8). While tracing, each op that
bumps fake counters counts one bump per counter, as eager bumps once, and the difference to the fake's own
bumps (a fake op may bump more) is kept per fake storage (`note_bumps`). When the graph ends, each output
that shares no storage with a graph input gets eager's count (the fake's counter less those extra bumps),
and the wrapper sets it on what the backend returned, 0 included (triton gives its outputs eager's layout
with a `copy_` into an `empty_strided`, which bumped `(x.T * 2)._version` to 1 where eager has 0). Outputs that are views of inputs share the input's
counter, which the input counts above already set. Outputs that require grad keep the backend's count: the
backend's autograd function may have saved them for its backward, which checks that the counter has not
moved since (setting it made `backward()` raise "modified by an inplace operation" where eager does not).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch._C._autograd import _unsafe_set_version_counter
from torch.fx.operator_schemas import normalize_function

from ..tensor_watch import count_unbumped_write, read_again, settled, settling

# NOTE [Writes eager does not count]: ops -> the arguments they write without a bump, when `training` is not False
_UNCOUNTED_WRITES = {F.batch_norm: ("running_mean", "running_var"), torch.batch_norm: ("running_mean", "running_var"),
                     torch.native_batch_norm: ("running_mean", "running_var")}


class KeptVersions:
    """`compiled`, after whose calls the written inputs' version counters have advanced as in eager."""

    __slots__ = ("compiled", "writes", "outputs", "gm")

    def __init__(self, compiled: Callable, writes: tuple[tuple[int, int], ...],
                 outputs: tuple[tuple[int, int], ...] = (), gm: Callable | None = None) -> None:
        self.compiled = compiled
        self.gm = gm  # the captured graph: NOTE [Written inference tensors]
        self.writes = writes  # (graph input position, eager's number of bumps)
        self.outputs = outputs  # (graph output position, eager's version): NOTE [Version counts of graph outputs]

    def __call__(self, *args: Any) -> Any:
        writes = self.writes
        if not writes:  # NOTE [Versions set only where they differ]
            out = self.compiled(*args)
        else:
            written = tuple(args[i] for i, _ in writes)
            try:
                before = [t._version for t in written]
            except RuntimeError:  # an inference tensor (checked here, not on every call)
                if self.gm is None or not any(t.is_inference() for t in written):
                    raise
                before = None
            if before is None:
                return self.gm.forward(*args)  # NOTE [Written inference tensors]
            opened = settling()  # NOTE [Versions recorded inside a call, read after it]
            try:
                out = self.compiled(*args)
            finally:
                pending = settled(opened)
            _unsafe_set_version_counter(written, [version + count for version, (_, count) in zip(before, writes)])
            read_again(pending)
            for tensor, (_, count) in zip(written, writes):
                if not count:  # NOTE [Unbumped writes of compiled calls count a use] in tensor_watch.py
                    count_unbumped_write(tensor)
        for i, version in self.outputs:  # not those autograd tracks: the backend's backward may have saved them at 0
            tensor = out[i]
            if tensor._version != version and not tensor.requires_grad:
                _unsafe_set_version_counter((tensor,), [version])
        return out

    # NOTE [Written inference tensors]: a graph traced with a normal tensor that it writes in place may be
    # called with an inference tensor (the input's guards do not tell them apart), which has no version
    # counter: reading it raised "Inference tensors do not track version counter" where eager raises
    # "Inplace update to inference tensor outside InferenceMode is not allowed" at the write (after the
    # writes before it), or, under inference_mode, writes. A backend's write-back does not check that (onnxrt
    # wrote the inference tensor outside inference_mode). Such a call runs the captured graph op by op, as
    # eager does.

    # NOTE [Versions set only where they differ]: on the per-call path (issue 17) this wrapper built three
    # sequences and made two C calls per call even when nothing was to change: a graph that writes no input
    # and returns a fresh output whose eager version is 0 (the zoo's mlp on onnxrt: ORT's outputs come at
    # version 0) set no counter to anything new. Counters are set one output at a time, and only where the
    # backend's differs from eager's: outputs that share a counter (views of one another) end with the last
    # one's version, as the one batched call did.


def _storage_key(fake) -> int:
    return fake.untyped_storage()._cdata


def note_bumps(output, fakes: list, versions: list, target: Any = None) -> None:
    """After one traced op: the fakes' counters it bumped more than once (eager bumps once per op and counter,
    but an in-place foreach op once per list element, as its fakes are bumped: NOTE [Foreach writes bump their
    fakes] in graph_calls.py)."""
    from .graph_calls import foreach_writes
    if target is not None and foreach_writes(target):
        return
    seen = set()
    for fake, before in zip(fakes, versions):
        after = None if before is None else fake._version
        if after is None or after == before:
            continue
        key = _storage_key(fake)
        if key in seen:
            continue
        seen.add(key)
        kept = output.extra_bumps.setdefault(key, [fake, 0])  # the fake keeps its storage's address taken
        kept[1] += after - before - 1


def eager_output_versions(output, values: list) -> tuple[tuple[int, int], ...]:
    """(position, eager's version) of each output made by the graph and written in it (NOTE [Version counts
    of graph outputs])."""
    from .values import TensorValue
    inputs = {_storage_key(i.value.fake) for i in output.inputs if isinstance(i.value, TensorValue)}
    found = []
    for position, value in enumerate(values):
        fake = getattr(value, "fake", None) if isinstance(value, TensorValue) else None
        if fake is None or fake.is_inference():
            continue
        key = _storage_key(fake)
        if key in inputs:
            continue
        found.append((position, max(0, fake._version - output.extra_bumps.get(key, (None, 0))[1])))
    return tuple(found)


def input_writes(output) -> tuple[tuple[int, int], ...]:
    """(position, number of version bumps) of each graph input the traced graph wrote, including those whose
    writes eager does not count (NOTE [Writes eager does not count])."""
    uncounted = _uncounted_writes(output.graph)
    from .data_alias import data_written  # NOTE [Writes through the .data of inputs]: their bumps, 0 included
    through_data = data_written(output)
    return tuple((i, inp.writes) for i, inp in enumerate(output.inputs) if inp.writes or id(inp) in through_data
                 or (i in uncounted and inp.version is not None))  # no counter: an inference tensor


def _uncounted_writes(graph) -> set[int]:
    """Positions of the placeholders that ops of `graph` write without a bump (NOTE [Writes eager does not
    count])."""
    positions = {node: i for i, node in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    found = set()
    for node in graph.nodes:
        names = _UNCOUNTED_WRITES.get(node.target) if node.op == "call_function" else None
        if names is None:
            continue
        bound = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
        if bound is None or bound.kwargs.get("training") is False:
            continue
        found.update(positions[arg] for arg in map(bound.kwargs.get, names) if arg in positions)
    return found


def keep_versions(compiled: Callable, gm, writes: tuple[tuple[int, int], ...],
                  outputs: tuple[tuple[int, int], ...] = ()) -> Callable:
    """`compiled` wrapped when it may bump other counts than eager: not when it runs the graph's own code."""
    if not (writes or outputs) or getattr(compiled, "__self__", None) is gm:
        return compiled
    return KeptVersions(compiled, writes, outputs, gm)


def unwrapped(compiled: Callable) -> Callable:
    """What the backend returned (the artifact it saves is of that object)."""
    from .saved_hooks import HookAware  # NOTE [Saved-tensors hooks at the call]
    from .handler_reruns import RestoredOnError  # NOTE [Failing graphs inside handlers]
    while isinstance(compiled, (KeptVersions, HookAware, RestoredOnError)):
        compiled = compiled.compiled
    return compiled
