"""The truth of a tensor the graph computes from constants and sizes only: evaluated while tracing, not a
graph break.

NOTE [Tensors made from constants]: torch.nn's Transformer code asks `bool((mask == causal).all())`
(`_detect_is_causal_mask`, reached by TransformerEncoder/TransformerDecoder/Transformer with a mask and no
`is_causal`) where `mask` is most often made in the forward itself: `nn.Transformer.generate_square_subsequent_mask(n)`,
`torch.zeros(n, n, dtype=torch.bool)`, then `F._canonical_mask` (`zeros_like(...).masked_fill_(...)`), and the
comparison mask is `torch.triu(torch.full((n, n), -inf), 1)`. Fake tensors carry no data, so the truth was a
data-dependent graph break inside three nested frames: 5 graphs where eager has one path (stock torch.compile
makes 2 by running the whole torch.nn module eagerly).

When every node the tensor depends on is a deterministic torch op whose arguments are Python constants or
sizes of tensors (no tensor data of a graph input, nothing random or uninitialised such as `empty`), its
data is a function of those constants and sizes alone, which the graph itself already bakes in (static
sizes are guarded with the inputs' shapes; constants of the code by the code). So the trace runs those
nodes, in graph order, on real tensors, and takes the truth of the result: exact, and the same for every
call the entry's guards admit. A symbolic size is one more condition: NOTE [Truths over symbolic sizes].

The evaluation is refused (the break stays) when:
- any dependency reads a graph input's data, is a submodule call, or is a node outside torch's own ops;
- an op outside that set (one that reads an input) takes one of the evaluated tensors (or a view of one) and is
  not known not to write it (NOTE [Ops known not to write]): the evaluated data would then not be what the graph
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


def _name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


# NOTE [Ops known not to write]: an op that reads something not evaluated (an input's data) and takes one of
# the evaluated tensors may change that tensor's data while the evaluation would not see it. Whether an op writes
# cannot be told from its name: `F.relu(c, inplace=True)`, `F.batch_norm` (running stats), `F.embedding(max_norm=)`
# and `c.__ipow__(2)` write, and aten::batch_norm's schema does not say so. So the rule is an allowlist: such a
# node is accepted only when its target is one of the torch builtins, Tensor methods or operators below, none of
# which writes an argument (no in-place form, no `inplace`/`out`); any other node refuses the evaluation. A node on
# constants only (an in-place one too) is instead evaluated with the others, so its writes are replayed.
_PURE_NAMES = frozenset((
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "neg", "abs", "sign",
    "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose", "isclose", "isnan", "isinf", "isfinite",
    "logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_not", "bitwise_and", "bitwise_or",
    "bitwise_xor", "where", "masked_fill", "sum", "mean", "prod", "all", "any", "max", "min", "amax", "amin",
    "argmax", "argmin", "cumsum", "clamp", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "softmax",
    "log_softmax", "matmul", "mm", "bmm", "float", "double", "half", "bfloat16", "bool", "int", "long", "to",
    "type_as", "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "unsqueeze", "squeeze",
    "transpose", "permute", "t", "contiguous", "clone", "detach", "flatten", "narrow", "select", "triu", "tril",
    "size", "dim", "numel", "item", "cat", "stack", "unbind", "split", "chunk", "repeat", "flip", "index_select",
    "gather", "zeros_like", "ones_like", "full_like", "getitem", "not_", "and_", "or_", "xor", "invert", "truediv",
    "floordiv", "mod", "matmul",
))
_PURE_FUNCTIONS = frozenset(
    [getattr(torch, n) for n in _PURE_NAMES if callable(getattr(torch, n, None))] +
    [getattr(operator, n) for n in _PURE_NAMES if callable(getattr(operator, n, None))] +
    [getattr(torch.Tensor, n) for n in _PURE_NAMES if callable(getattr(torch.Tensor, n, None))])


def _known_pure(node: torch.fx.Node) -> bool:
    """NOTE [Ops known not to write]: the node writes none of its arguments."""
    if "out" in node.kwargs or "inplace" in node.kwargs:
        return False
    if node.op == "call_method":
        return isinstance(node.target, str) and node.target in _PURE_NAMES
    if node.op != "call_function":
        return False
    try:
        return node.target in _PURE_FUNCTIONS
    except TypeError:  # an unhashable target
        return False


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


def _size_value(val: Any) -> bool:
    """An int, a size, or a tuple of them, with no symbol read from tensor data."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    items = val if isinstance(val, (tuple, list)) else (val,)
    return bool(items) and all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in items) and \
        not free_unbacked_symbols(val)


def _size_node(node: torch.fx.Node) -> bool:
    """A size of a graph input (or arithmetic on sizes): NOTE [Truths over symbolic sizes]."""
    return node.op in ("call_function", "call_method") and not node.meta.get("effect") and \
        _size_value(node.meta.get("val"))


def _dependencies(node: torch.fx.Node) -> set | None:
    """`node` and every node it depends on, or None when one is not a torch op on constants or sizes. A size
    read from a tensor's metadata is a leaf: what it was read from is not evaluated."""
    seen: set = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        size = _size_node(n)
        if not (size or _torch_op(n)) or len(seen) >= _MAX_NODES:
            return None
        seen.add(n)
        stack.extend(i for i in n.all_input_nodes if not size or _size_node(i))
    return seen


def _elements(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return _hint(val.numel())
    return 0


def _closed(graph: torch.fx.Graph, deps: set, last: torch.fx.Node) -> list | None:
    """The nodes to evaluate, in graph order up to `last`: `deps` and the writes to them (or to views of
    them) made by other torch ops on constants; None when another node may write one."""
    needed, touched = set(deps), {n for n in deps if not _size_node(n)}
    for n in graph.nodes:
        if n is last:
            return [m for m in graph.nodes if m in needed]  # all of them come before `last` or are `last`
        if n in deps or not any(i in touched for i in n.all_input_nodes):
            continue
        if not _known_pure(n):  # NOTE [Ops known not to write]: evaluated with the others, or a refusal
            writer = _dependencies(n)
            if writer is None:
                return None
            needed |= writer
        touched.add(n)  # a view (or a copy) of an evaluated tensor: a later write to it is a write to ours
    return None


def _hint(val: Any) -> Any:
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw
    if isinstance(val, (tuple, list)):
        return type(val)(_hint(v) for v in val) if not isinstance(val, torch.Size) else torch.Size(_hint(list(val)))
    return guarding_hint_or_throw(val) if isinstance(val, torch.SymInt) else val


def _run(node: torch.fx.Node, env: dict) -> Any:
    if _size_node(node):
        return _hint(node.meta["val"])  # the size of this call (a check at the graph's start holds it for others)
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


def _symbolic(order: list) -> bool:
    vals = [n.meta["val"] for n in order if _size_node(n)]
    return any(isinstance(v, torch.SymInt) for val in vals for v in (val if isinstance(val, (tuple, list)) else (val,)))


# NOTE [Truths over symbolic sizes]: with a symbolic size (a dimension that changed between calls, NOTE
# [Automatic dynamic]), the tensor's data is a function of the graph's input sizes, known here only for this
# call's sizes. The truth is evaluated for them, and the graph checks it for every call: its nodes are
# copied to the graph's start and an entry check (NOTE [Entry checks]) asserts the same truth there, so a
# call whose sizes give the other answer reruns eagerly (exactly, before any of the graph's effects) instead of
# taking the traced path; the copies cost what eager pays on every call (it makes the same masks). A size read
# from a tensor made in the graph is read at the start from an input dimension with the same symbol; when
# there is none, the truth stays a break. torch.nn's causal-mask detection gives one answer for every size a
# symbolic entry admits (sizes 0 and 1 get entries of their own).
def _input_size(graph: torch.fx.Graph, size: Any, make: bool = True) -> Any:
    """A node reading `size` (an int, a SymInt that is one dimension of a graph input, or a tuple of them) from
    the graph's inputs, made at the insertion point when `make`; None when there is none."""
    if isinstance(size, int):
        return size
    if isinstance(size, (tuple, list)):  # a whole `t.size()`: one node per dimension
        parts = [_input_size(graph, d, make) for d in size]
        return None if any(p is None for p in parts) else tuple(parts)
    for ph in (n for n in graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        for dim, d in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
            if isinstance(d, torch.SymInt) and d.node.expr == size.node.expr:
                if not make:
                    return True
                node = graph.call_function(torch.ops.aten.sym_size.int, (ph, dim))
                node.meta["val"] = d
                return node
    return None


def _check_at_entry(out, order: list, value, answer: bool) -> bool:
    """NOTE [Truths over symbolic sizes]; False (nothing recorded) when a size is not one of an input's."""
    from .entry_checks import SIZE_TRUTH_CHECK, size_truths_kept
    if size_truths_kept():  # NOTE [A failed truth of sizes recompiles]
        return False
    graph = out.graph
    bases = [n for n in order if _size_node(n) and any(not _size_node(i) and i.op != "placeholder"
                                                       for i in n.all_input_nodes)]  # sizes of tensors made in the graph
    if any(_input_size(graph, n.meta["val"], make=False) is None for n in bases):
        return False
    first = next(n for n in graph.nodes if n.op != "placeholder")
    copies: dict = {}
    with graph.inserting_before(first):
        for n in bases:
            copies[n] = _input_size(graph, n.meta["val"])
        for n in order:
            if n not in copies:
                copies[n] = graph.node_copy(n, lambda m: copies.get(m, m))
    cond = value if answer else out.call("call_function", torch.logical_not, (value,), {})
    if cond is not value:
        cond.node.replace_input_with(value.node, copies[value.node])
        first.prepend(cond.node)
    check = out.record_effect(torch._assert_async, (copies.get(cond.node, cond.node),
                                                    f"{SIZE_TRUTH_CHECK}; the call reruns eagerly"))
    first.prepend(check)
    return True


def folded_truth(out, value) -> bool | None:
    """`bool(value)` for a tensor computed from constants only (NOTE [Tensors made from constants]); None
    when its data depends on anything else."""
    if out.autocast_stack or any("autocast" in _name(n) for n in out.graph.nodes):
        return None  # ops of an autocast region (open or not) cast: not replayed here
    deps = _dependencies(value.node)
    if deps is None or sum(_elements(n) for n in deps) > _MAX_ELEMENTS:
        return None
    order = _closed(out.graph, deps, value.node)
    if order is None or sum(_elements(n) for n in order) > _MAX_ELEMENTS:
        return None
    try:
        result = _evaluate(out, order)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(result, torch.Tensor) or result.numel() != 1:
        return None
    answer = bool(result)
    if _symbolic(order) and not _check_at_entry(out, order, value, answer):  # NOTE [Truths over symbolic sizes]
        return None
    return answer
