"""Lowering of a user/framejit FX graph to a flat, functional core-aten graph with fake-tensor metadata.

`lower(gm, inputs) -> Lowered` traces `gm` with `make_fx` under fake tensors (no real kernels run):
- parameters, buffers and tensor constants of `gm` become leading placeholders (`Lowered.state`), so
  the ONNX models never embed weights (see NOTE [Weights are inputs]);
- `torch.func.functionalize` removes in-place ops on intermediates, and turns mutations of inputs into
  trailing `aten.copy_` nodes, which the partitioner leaves to eager torch;
- aten ops without a torchlib translation are decomposed with `torch._decomp` tables (ops that torchlib
  translates directly are kept whole: one ONNX function beats a decomposed chain);
- the graph returns a flat list of leaves; `Lowered.out_spec` rebuilds what `gm` returns.

Invariant: every call_function node of `Lowered.graph_module` has `meta["val"]` (a fake tensor, a
list of them, or a Python scalar), which the partitioner and the ONNX translator rely on.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

# NOTE [Weights are inputs]
# Parameters and buffers are passed to ONNX Runtime as graph inputs bound to the live torch tensors
# (numpy views, no copy) instead of being baked into the model as initializers. Consequences: an
# in-place weight update (optimizer step, load_state_dict) is seen by the next call exactly as in
# eager; the model bytes (the cacheable artifact) are small and independent of weight values; and a
# weight tensor is never duplicated in memory. ORT still fuses Transpose into Gemm/MatMul for
# non-constant weights, so the cost measured on the benchmark models was within noise.


@dataclasses.dataclass
class Lowered:
    graph_module: torch.fx.GraphModule  # placeholders: state tensors, then the user inputs' leaves
    state: list[torch.Tensor]           # live parameter/buffer/constant tensors, in placeholder order
    state_names: list[str]
    out_spec: pytree.TreeSpec


def _state_of(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    state.update(gm.named_parameters(remove_duplicate=False))
    state.update(gm.named_buffers(remove_duplicate=False))
    for node in gm.graph.nodes:  # plain tensor attributes (constants lifted by tracers)
        if node.op == "get_attr" and node.target not in state:
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                state[node.target] = value
    return state


def _get_attr(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


@functools.lru_cache(maxsize=None)
def decomposition_table(translated_ops: frozenset) -> dict:
    """torch._decomp's core-aten decompositions, minus the ops torchlib translates directly."""
    table: dict = {}
    candidates = list(torch._decomp.core_aten_decompositions().items())
    candidates += list(torch._decomp.decomposition_table.items())
    for op, fn in candidates:
        if not hasattr(op, "_schema") or op in table:
            continue
        if isinstance(op, torch._ops.OpOverload) and op.name() in translated_ops:
            continue
        table[op] = fn
    return table


def lower(gm: torch.fx.GraphModule, inputs: list, translated_ops: frozenset) -> Lowered:
    """Trace `gm(*inputs)` to a functional aten graph over (state..., inputs...); see module docstring."""
    state = _state_of(gm)
    names = list(state)
    spec_box: list[pytree.TreeSpec] = []

    def flat_fn(*flat):
        result = torch.func.functional_call(gm, dict(zip(names, flat[: len(names)])), tuple(flat[len(names):]))
        leaves, spec = pytree.tree_flatten(result)
        spec_box.append(spec)
        return leaves

    traced_fn = torch.func.functionalize(flat_fn, remove="mutations")
    with torch.no_grad():
        lowered = make_fx(traced_fn, decomposition_table=decomposition_table(translated_ops),
                          tracing_mode="fake")(*state.values(), *inputs)
    lowered.graph.eliminate_dead_code()  # keeps impure nodes (the trailing copy_ of input mutations)
    lowered.recompile()
    return Lowered(lowered, list(state.values()), names, spec_box[-1])


def node_val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node
