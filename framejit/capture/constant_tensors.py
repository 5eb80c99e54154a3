"""The truth of a tensor the graph computes from constants only: evaluated while tracing, not a graph break.

NOTE [Tensors made from constants]: torch.nn's Transformer code asks `bool((mask == causal).all())`
(`_detect_is_causal_mask`, reached by TransformerEncoder/TransformerDecoder/Transformer with a mask and no
`is_causal`) where `mask` is most often made in the forward itself: `nn.Transformer.generate_square_subsequent_mask(n)`,
`torch.zeros(n, n, dtype=torch.bool)`, then `F._canonical_mask` (`zeros_like(...).masked_fill_(...)`), and the
comparison mask is `torch.triu(torch.full((n, n), -inf), 1)`. Fake tensors carry no data, so the truth was a
data-dependent graph break inside three nested frames: 5 graphs where eager has one path (stock torch.compile
makes 2 by running the whole torch.nn module eagerly).

When every node the tensor depends on is a deterministic torch op whose arguments are Python constants (no
graph input, no symbolic size, nothing random or uninitialised such as `empty`), its data is a function of
those constants alone, which the graph itself already bakes in (static sizes are guarded with the inputs'
shapes; constants of the code by the code). So the trace runs those nodes, in graph order, on real tensors,
and takes the truth of the result: exact, and the same for every call the entry's guards admit.

The evaluation is refused (the break stays) when:
- any dependency is a graph input, a symbolic size, a submodule call, or a node outside torch's own ops;
- an op outside that set (one that reads an input) takes one of the evaluated tensors and may write it
  (in-place methods, `out=`, setitem) or a view of it: the evaluated data would then not be what the graph
  computes;
- the graph has an autocast region (its casts are not replayed here), or the tensors would be large
  (`_MAX_ELEMENTS`; eager computes them on every call, the trace once).
"""
from __future__ import annotations

import operator
from typing import Any

import torch

_MAX_ELEMENTS = 1 << 22
_MAX_NODES = 64  # as NOTE [Ints of tensors computed from sizes] bounds its derivations: a long chain stays a break
_UNINITIALISED = ("empty",)  # empty, empty_like, new_empty, empty_strided: their data is whatever memory held
_STATE_WORDS = ("autocast", "grad", "seed", "inference_mode", "set_", "assert", "print", "warn")
_INPLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                      operator.ilshift, operator.irshift, operator.imatmul}


def _name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _may_write(node: torch.fx.Node) -> bool:
    """The node may write one of its arguments (or return a view a later node writes)."""
    if node.op not in ("call_function", "call_method") or "out" in node.kwargs:
        return True
    if node.target in _INPLACE_OPERATORS:
        return True
    name = _name(node)
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema.is_mutable
    return (name.endswith("_") and not name.startswith("__")) or name in ("__setitem__", "__iadd__", "__isub__",
                                                                           "__imul__", "__itruediv__", "__ior__",
                                                                           "__iand__", "__ixor__", "set_")


def _torch_op(node: torch.fx.Node) -> bool:
    """A deterministic op of torch (or a Python operator) that reads no process state."""
    from .requests import draws_random
    if node.op == "call_method":
        owner_ok = True
    elif node.op == "call_function":
        module = getattr(node.target, "__module__", None) or ""
        owner_ok = module == "_operator" or module.startswith("torch") or \
            isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) or \
            getattr(node.target, "__self__", None) in (torch._C._VariableFunctions, torch.Tensor)
    else:
        return False
    if not owner_ok or node.meta.get("effect"):
        return False
    name = _name(node).lower()
    if any(word in name for word in _UNINITIALISED + _STATE_WORDS):
        return False
    return not draws_random(node.target, node.args, node.kwargs)


def _dependencies(node: torch.fx.Node) -> set | None:
    """`node` and every node it depends on, or None when one is not a torch op on constants."""
    seen: set = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if not _torch_op(n) or len(seen) >= _MAX_NODES:
            return None
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _elements(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        numel = val.numel()
        return numel if isinstance(numel, int) else _MAX_ELEMENTS + 1
    return 0


def _closed(graph: torch.fx.Graph, deps: set, last: torch.fx.Node) -> list | None:
    """The nodes to evaluate, in graph order up to `last`: `deps` and the writes to them (or to views of
    them) made by other torch ops on constants; None when another node may write one."""
    needed, touched = set(deps), set(deps)
    for n in graph.nodes:
        if n is last:
            return [m for m in graph.nodes if m in needed]  # all of them come before `last` or are `last`
        if n in deps or not any(i in touched for i in n.all_input_nodes):
            continue
        if _may_write(n):
            writer = _dependencies(n)
            if writer is None:
                return None
            needed |= writer
        touched.add(n)  # a view (or a copy) of an evaluated tensor: a later write to it is a write to ours
    return None


def _run(node: torch.fx.Node, env: dict) -> Any:
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    return node.target(*args, **kwargs)


def _evaluate(out, order: list) -> Any:
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    dtype = out.__dict__.get("default_dtype")  # NOTE [Default dtype changes]
    previous = torch.get_default_dtype()
    env: dict = {}
    with unset_fake_temporarily(), torch.no_grad():
        if dtype is not None:
            torch.set_default_dtype(dtype)
        try:
            for n in order:
                env[n] = _run(n, env)
        finally:
            torch.set_default_dtype(previous)
    return env[order[-1]]


def folded_truth(out, value) -> bool | None:
    """`bool(value)` for a tensor computed from constants only (NOTE [Tensors made from constants]); None
    when its data depends on anything else."""
    if out.autocast_stack or any("autocast" in _name(n) for n in out.graph.nodes):
        return None  # ops of an autocast region (open or not) cast: not replayed here
    deps = _dependencies(value.node)
    if deps is None or sum(_elements(n) for n in deps) > _MAX_ELEMENTS:
        return None
    order = _closed(out.graph, deps, value.node)
    if order is None:
        return None
    try:
        result = _evaluate(out, order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(result, torch.Tensor) or result.numel() != 1:
        return None
    return bool(result)
