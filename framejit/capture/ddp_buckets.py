"""Graphs captured inside DistributedDataParallel's forward, split at DDP's gradient bucket boundaries.

`compile_in_buckets(gm, example_inputs, compile_part)` returns a `BucketedGraph` (called like `gm`) whose
parts were each compiled by `compile_part(part_gm, part_example_inputs)`, or None when `gm` is not split
(no DDP forward is running, the parameters fill one bucket, or the graph is one the split does not handle).
Nothing here calls torch._dynamo: the split is framejit's own (NOTE [Graphs split at DDP's buckets]).

NOTE [Graphs split at DDP's buckets]
DDP all-reduces gradients bucket by bucket: its reducer's autograd hooks mark a parameter ready when its
gradient is accumulated, and a bucket's all-reduce starts as soon as its last parameter is ready, while
the rest of the backward still runs: communication overlaps computation. A graph whose backward a backend
compiles (onnxrt, triton: one autograd Function per joint, backends/joint.py) hands back all its
gradients at once, when its whole backward has run, so every bucket became ready at the end and no
all-reduce overlapped the backward. A graph captured while a DDP module's forward runs (DDP sets
`DistributedDataParallel._active_ddp_module` around the inner module's call, in both
`framejit.compile(DDP(m))` and `DDP(framejit.compile(m))`) is therefore split before it reaches the
backend into consecutive parts whose parameters fill DDP's buckets, and each part is compiled as its own
graph (its own joint): a part's gradients are ready when its own backward has run, and DDP's hooks fire
bucket by bucket during the backward.
- Buckets as DDP fills them: DDP assigns parameters in reverse order (the order the backward produces
  gradients) to buckets closed once their bytes reach the cap, the first with its own cap
  (`_DEFAULT_FIRST_BUCKET_BYTES` when `bucket_cap_mb` is left at its default, else `bucket_cap_mb`), or
  with the per-bucket caps of `bucket_cap_mb_list`. Here nodes are walked from the output backwards;
  each DDP parameter (`ddp._module_parameters` that require grad: not the ignored ones) counts its bytes
  toward the part of its last use, and a part is closed before the next node once its bytes reached its
  cap and one of its values is used after it (a part that hands nothing on is extended, as Dynamo's
  DDPOptimizer does). Leading nodes without parameters join the part after them.
- The parts run in order from one FX module made by `torch.fx.passes.split_module` (tuple returns),
  its submodules replaced by the compiled parts. A part's placeholders carry the original nodes'
  `meta["val"]` (symbolic sizes stay symbolic); its example inputs are the whole graph's real example
  inputs where it reads them, and uninitialised tensors with the traced sizes (hints), strides, dtype and
  requires_grad for values an earlier part makes: the graph is not run at compile time (that would draw
  random numbers and update running statistics).
- Not split (compiled whole, logged under `output_code`): graphs with grad-mode or autocast switches
  (split_module would repeat them in each part; not checked with framejit's backends), with submodule
  calls (checkpointed regions), or whose values between parts are not tensors or ints or have sizes
  without a hint (data-dependent).
- Entries are guarded on DDP (NOTE [Entries guarded on DDP]) and a split entry is persisted with its
  parts (frame_cache.persist: the whole graph, which part each node is in, and each part's artifact);
  restoring it splits the loaded graph the same way and loads each part's artifact: a warm rank runs
  the same parts without tracing.
- DDP rebuilds its buckets after the first step in the order the gradients arrived; within a part that
  order is the autograd engine's, so a rebuilt bucket may straddle two parts: it is reduced when the
  earlier part's backward has run (still before the backward ends, unless it holds the first part).

NOTE [Entries guarded on DDP]
Whether a graph is split, and where, depends on the DDP forward running when it is compiled: an entry
compiled outside DDP served inside it would run whole (no all-reduce overlaps its backward), and a split
entry served outside DDP would run in parts for nothing. So an entry whose graph reads a parameter that
requires grad (the only graphs a split can concern) is guarded on `ddp_caps()`: None outside a DDP
forward, else the running DDP's bucket caps, which with the graph (guarded otherwise) fix the split.
Such a frame called both inside and outside DDP (DDP's forward and `ddp.module(x)`) has one entry for
each. Outside DDP the guard line is the read `DistributedDataParallel._get_active_ddp_module()` makes,
`DistributedDataParallel._active_ddp_module is None` (`active_ddp` reads that attribute too: measured,
loaded, ~13 ns vs ~195 ns for the `ddp_caps()` call and its two Python calls); inside DDP it compares
`ddp_caps()` with the caps.
"""
from __future__ import annotations

import sys
from typing import Callable

import torch
import torch.fx

from .. import logs

_STATE_SWITCHES = (torch._C._set_grad_enabled, torch.amp._enter_autocast, torch.amp._exit_autocast)


def active_ddp():
    """The DistributedDataParallel module whose forward is running, or None (never imports DDP)."""
    distributed = sys.modules.get("torch.nn.parallel.distributed")
    # the read `_get_active_ddp_module()` makes; the guard makes it too (NOTE [Entries guarded on DDP])
    return None if distributed is None else distributed.DistributedDataParallel._active_ddp_module


def bucket_caps(ddp) -> list[int]:
    """Byte caps of DDP's buckets in the order it fills them (the last repeats)."""
    if ddp.bucket_bytes_cap_list:
        return list(ddp.bucket_bytes_cap_list)
    first = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES if ddp.bucket_bytes_cap_default else ddp.bucket_bytes_cap
    return [first, ddp.bucket_bytes_cap]


def bucket_parts(gm: torch.fx.GraphModule, example_inputs: list, params: set[int], caps: list[int]) -> list[list]:
    """The nodes of `gm` (placeholders and output excluded) in parts, in graph order, whose parameters (the
    inputs whose ids are in `params`) fill buckets of `caps` (NOTE [Graphs split at DDP's buckets])."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    param_bytes = {node: value.numel() * value.element_size()
                   for node, value in zip(placeholders, example_inputs) if id(value) in params}
    parts: list[list] = [[]]  # reversed: parts[0] is the last part of the graph
    sizes = [0]
    counted: set = set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        if sizes[-1] >= caps[min(len(parts) - 1, len(caps) - 1)] and _hands_on(parts[-1]):
            parts.append([])
            sizes.append(0)
        for arg in node.all_input_nodes:
            if arg in param_bytes and arg not in counted:
                counted.add(arg)
                sizes[-1] += param_bytes[arg]
        parts[-1].append(node)
    if len(parts) > 1 and sizes[-1] == 0:  # leading nodes without parameters join the part after them
        parts[-2].extend(parts.pop())
    return [list(reversed(part)) for part in reversed(parts)]


def _hands_on(part: list) -> bool:
    """Some value of `part` is used outside it (a part must return something)."""
    members = set(part)
    return any(user not in members for node in part for user in node.users)


def _unsplittable(gm: torch.fx.GraphModule) -> str | None:
    for node in gm.graph.nodes:
        if node.op in ("call_module", "get_attr"):
            return f"it reads module state ({node.op} {node.target})"
        if node.op == "call_function" and node.target in _STATE_SWITCHES:
            return f"it switches grad mode or autocast ({node.target.__name__})"
    return None


def ddp_caps() -> tuple[int, ...] | None:
    """The bucket caps of the DDP module whose forward is running; None outside a DDP forward."""
    ddp = active_ddp()
    return None if ddp is None else tuple(bucket_caps(ddp))


def guard_ddp(output, example_inputs: list) -> None:
    """Guard the entry being compiled on `ddp_caps()` if its graph reads a parameter that requires grad
    (NOTE [Entries guarded on DDP])."""
    if not any(isinstance(value, torch.nn.Parameter) and value.requires_grad for value in example_inputs):
        return
    caps = ddp_caps()
    call = f"{output.name_of(ddp_caps, 'ddp_caps')}()"
    distributed = sys.modules.get("torch.nn.parallel.distributed")
    if caps is None and distributed is not None:  # outside DDP: the attribute read alone
        ddp = output.name_of(distributed.DistributedDataParallel, "DistributedDataParallel")
        output.add_guard("GLOBAL_STATE", f"{ddp}._active_ddp_module is None", None, expected="outside DDP",
                         actual=call)
        return
    output.add_guard("GLOBAL_STATE", f"{call} is None" if caps is None else f"{call} == {caps!r}", None,
                     expected="outside DDP" if caps is None else f"inside DDP with bucket caps {caps}", actual=call)


class BucketedGraph:
    """A graph split at DDP's buckets: `split` is the FX module running the compiled `parts` in order;
    `assignment` holds the part of each computing node of the whole graph, in graph order."""

    def __init__(self, split: torch.fx.GraphModule, assignment: tuple[int, ...], parts: list) -> None:
        self.split = split
        self.assignment = assignment
        self.parts = parts

    def __call__(self, *args):
        return self.split.forward(*args)  # no hooks on it: nn.Module.__call__ is skipped


def compile_in_buckets(gm: torch.fx.GraphModule, example_inputs: list,
                       compile_part: Callable) -> BucketedGraph | None:
    """`gm` split at the running DDP module's buckets, each part compiled by `compile_part`; None when
    there is no DDP forward running or `gm` is not split (NOTE [Graphs split at DDP's buckets])."""
    ddp = active_ddp()
    if ddp is None:
        return None
    params = {id(p) for p in ddp._module_parameters if p.requires_grad}
    parts = bucket_parts(gm, example_inputs, params, bucket_caps(ddp))
    if len(parts) == 1:
        return None
    why = _unsplittable(gm)
    if why is None:
        index = {node: k for k, part in enumerate(parts) for node in part}
        assignment = tuple(index[node] for node in _computing(gm))
        split = _split(gm, assignment)
        examples = _part_examples(gm, example_inputs, split)
        why = examples if isinstance(examples, str) else None
    if why is not None:
        logs.log("output_code", "DDP: the graph is compiled whole, not split at its %d buckets: %s", len(parts), why)
        return None
    compiled = [compile_part(getattr(split, name), part_examples) for name, part_examples in examples]
    logs.log("output_code", "DDP: the graph is split at its buckets into %d parts of %s nodes", len(parts),
             "/".join(str(len(part)) for part in parts))
    return _bucketed(split, assignment, compiled)


def restore_split(gm: torch.fx.GraphModule, assignment: tuple[int, ...], artifacts: tuple[bytes, ...],
                  load: Callable) -> BucketedGraph:
    """A persisted split entry's graph split as it was compiled, each part loaded by the backend's
    `load(artifact, part, None)` (NOTE [Graphs split at DDP's buckets])."""
    computing = _computing(gm)
    if len(assignment) != len(computing):
        raise ValueError(f"the split names {len(assignment)} nodes, the graph has {len(computing)}")
    split = _split(gm, assignment)
    names = _part_names(split)
    if len(names) != len(artifacts):
        raise ValueError(f"the graph splits into {len(names)} parts, {len(artifacts)} were persisted")
    return _bucketed(split, assignment, [load(data, getattr(split, name), None) for name, data in zip(names, artifacts)])


def _computing(gm: torch.fx.GraphModule) -> list:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


def _split(gm: torch.fx.GraphModule, assignment: tuple[int, ...]) -> torch.fx.GraphModule:
    from torch.fx.passes.split_module import split_module

    index = dict(zip(_computing(gm), assignment))
    return split_module(gm, None, index.__getitem__, tuple_return=True)


def _part_names(split: torch.fx.GraphModule) -> list[str]:
    """The submodules of `split` in call order."""
    return [node.target for node in split.graph.nodes if node.op == "call_module"]


def _bucketed(split: torch.fx.GraphModule, assignment: tuple[int, ...], compiled: list) -> BucketedGraph:
    for name, part in zip(_part_names(split), compiled):
        del split._modules[name]  # the generated code calls self.<name>(...): now the compiled part
        setattr(split, name, part)
    return BucketedGraph(split, assignment, compiled)


def _part_examples(gm: torch.fx.GraphModule, example_inputs: list, split: torch.fx.GraphModule):
    """[(submodule name, example inputs)] in call order, or a reason why there are none."""
    real = {n.name: value for n, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs)}
    out = []
    for name in _part_names(split):
        examples = []
        for placeholder in (n for n in getattr(split, name).graph.nodes if n.op == "placeholder"):
            if placeholder.name in real:
                examples.append(real[placeholder.name])
                continue
            value = _materialized(placeholder.meta.get("val"))
            if value is None:
                return f"the value {placeholder.name} passed between parts is not a tensor or int with known sizes"
            examples.append(value)
        out.append((name, examples))
    return out


def _materialized(val):
    """A real value like the traced `val` (a fake tensor or a SymInt): None if there is none."""
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw

    try:
        if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
            return guarding_hint_or_throw(val)
        if isinstance(val, torch.Tensor):
            size = [guarding_hint_or_throw(s) for s in val.shape]
            stride = [guarding_hint_or_throw(s) for s in val.stride()]
            value = torch.empty_strided(size, stride, dtype=val.dtype, device=val.device)
            return value.requires_grad_(val.requires_grad)
    except Exception:  # an unbacked (data-dependent) size has no hint
        return None
    return None


__all__ = ["BucketedGraph", "active_ddp", "bucket_caps", "bucket_parts", "compile_in_buckets", "ddp_caps", "guard_ddp",
           "restore_split"]
