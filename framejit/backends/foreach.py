"""Foreach calls expanded into one op per list element, for lowering backends.

NOTE [Foreach expansion]: a compiled optimizer step (foreach=True, the default on GPU) is made of
`torch._foreach_<op>(_)` calls over lists of tensors. Neither torchlib (onnxrt) nor the triton lowering
translates them (and torch._decomp has no decompositions for them), so the whole update ran in eager torch
(triton: 0 kernels; onnxrt: 0 ORT nodes); tracing them to aten also hits torch's meta kernel refusing a
`scalars` tensor ("Expected scalars to be on CPU"). By definition `_foreach_<op>(lists..., rest...)[i]`
is `torch.<op>(lists[i]..., rest...)` and the in-place form writes that into `self[i]`, so before lowering
each such call in the FX graph is replaced by per-element calls: a list argument (a literal list of nodes,
or the result of an expanded call) gives its i-th item; a 1-d `scalars` tensor of addcdiv/addcmul gives
its i-th element, applied as `self + value * (t1 op t2)` (torch.addcdiv takes a number there); other
arguments are the same for every element; an in-place form is `self[i].copy_(result)`. Uses of the
result by index then name the element nodes. A call whose result is used otherwise stays whole.
Training joints (backends/joint.py) expand before AOT autograd traces the graph: an EMA update under
`torch.no_grad()` inside the graph over weights that require grad is a joint, and its `_foreach_lerp_` reached
the backend whole and ran in torch (onnxrt: "no torchlib translation for aten::_foreach_lerp").
"""
from __future__ import annotations

import copy
import functools
import operator
from typing import Any

import torch

_SCALAR_TENSOR_OPS = {"addcdiv": torch.div, "addcmul": torch.mul}


def _foreach_base(target: Any) -> tuple[str, bool] | None:
    """('add', in_place) for torch._foreach_add(_), when torch has the per-element function."""
    name = getattr(target, "__name__", "")
    if getattr(target, "__module__", None) != "torch" or not name.startswith("_foreach_"):
        return None
    if getattr(torch, name, None) is not target:
        return None
    base = name[len("_foreach_"):]
    in_place = base.endswith("_")
    base = base.rstrip("_")
    return (base, in_place) if callable(getattr(torch, base, None)) and hasattr(torch.ops.aten, base) else None


@functools.lru_cache(maxsize=None)
def _signature(base: str) -> tuple[int, tuple[str, ...]]:
    """How many arguments the per-element op takes positionally, and its keyword-only names (the foreach
    schemas pass e.g. addcmul's `value` positionally, where torch.addcmul takes it by keyword only)."""
    packet = getattr(torch.ops.aten, base)
    schemas = [getattr(packet, o)._schema for o in packet.overloads()]
    schemas = [s for s in schemas if not any(a.is_out for a in s.arguments)]
    positional = max(sum(1 for a in s.arguments if not a.kwarg_only) for s in schemas)
    keywords = next((tuple(a.name for a in s.arguments if a.kwarg_only) for s in schemas
                     if any(a.kwarg_only for a in s.arguments)), ())
    return positional, keywords


def _length(node: torch.fx.Node, elements: dict) -> int | None:
    for a in node.args:
        if isinstance(a, (list, tuple)):
            return len(a)
        if isinstance(a, torch.fx.Node) and a in elements:
            return len(elements[a])
    return None


def _expandable_calls(graph: torch.fx.Graph) -> set:
    """The foreach calls to expand: each use reads one element by a constant index or is another call
    expanded too, and each list argument is a literal list or such a call (else it stays whole, and so
    does every call feeding it: an expanded call and its whole original would both run)."""
    calls = {n for n in graph.nodes if n.op == "call_function" and _foreach_base(n.target) is not None}
    changed = True
    while changed:
        changed = False
        for node in list(calls):
            uses_ok = all(u in calls or (u.op == "call_function" and u.target is operator.getitem
                                         and isinstance(u.args[1], int)) for u in node.users)
            args_ok = all(not isinstance(a, torch.fx.Node) or a in calls or not _is_list(a) for a in node.args)
            sized = any(isinstance(a, (list, tuple)) or a in calls for a in node.args
                        if isinstance(a, (list, tuple, torch.fx.Node)))
            if not (uses_ok and args_ok and sized):
                calls.discard(node)
                changed = True
    return calls


def _is_list(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (list, tuple))


def _scalars_tensor(base: str, node: torch.fx.Node) -> torch.fx.Node | None:
    if base not in _SCALAR_TENSOR_OPS or len(node.args) < 4 or not isinstance(node.args[3], torch.fx.Node):
        return None
    val = node.args[3].meta.get("val")
    return node.args[3] if isinstance(val, torch.Tensor) and val.dim() == 1 else None


def _item(graph, value: Any, i: int, elements: dict) -> Any:
    if isinstance(value, (list, tuple)):
        return value[i]
    if isinstance(value, torch.fx.Node) and value in elements:
        return elements[value][i]
    return value


def _expand(graph: torch.fx.Graph, node: torch.fx.Node, base: str, in_place: bool, elements: dict) -> list:
    length = _length(node, elements)
    scalars = _scalars_tensor(base, node)
    positional, keywords = _signature(base)
    results = []
    with graph.inserting_before(node):
        for i in range(length):
            items = [_item(graph, a, i, elements) for a in node.args]
            method = f"{base}_" if in_place and hasattr(torch.Tensor, f"{base}_") else None
            if scalars is not None:
                value = graph.call_function(operator.getitem, (scalars, i))
                quotient = graph.call_function(_SCALAR_TENSOR_OPS[base], (items[1], items[2]))
                scaled = graph.call_function(torch.mul, (quotient, value))
                method, base_fn, call_args, call_kwargs = ("add_" if in_place else None), torch.add, \
                    (items[0], scaled), {}
            else:
                call_args = tuple(items[:positional])
                call_kwargs = {**dict(zip(keywords, items[positional:])), **node.kwargs}
                base_fn = getattr(torch, base)
            if method is not None:  # the tensor's own in-place method, as the single-tensor code calls it
                result = graph.call_method(method, call_args, call_kwargs)
            else:
                result = graph.call_function(base_fn, call_args, call_kwargs)
                if in_place:
                    result = graph.call_method("copy_", (items[0], result))
            results.append(result)
    return results


def expand_foreach(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm`, or a copy of it with its foreach calls expanded (NOTE [Foreach expansion])."""
    if not any(n.op == "call_function" and _foreach_base(n.target) for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    calls = _expandable_calls(graph)
    if not calls:
        return gm
    elements: dict[torch.fx.Node, list] = {}
    for node in list(graph.nodes):
        if node in calls:
            elements[node] = _expand(graph, node, *_foreach_base(node.target), elements)
    for node, items in elements.items():
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(items[user.args[1]])
                graph.erase_node(user)
    for node in reversed(list(elements)):
        if not node.users:
            graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(gm, graph)
