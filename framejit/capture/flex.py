"""`torch.nn.attention.flex_attention.flex_attention` captured as torch's `flex_attention` higher-order op.

NOTE [Flex attention in the graph]: eager's `flex_attention(q, k, v, score_mod, block_mask, scale, enable_gqa,
return_lse, kernel_options)` checks its arguments, fills in the defaults (the identity score_mod, an empty
block mask covering everything, the scale 1/sqrt(E), kernel options) and calls the higher-order op
`torch.ops.higher_order.flex_attention(q, k, v, score_mod, block_mask.as_tuple(), scale, kernel_options,
score_mod_other_buffers, mask_mod_other_buffers)` (through an internal torch.compile of that one call, whose
graph holds the same op). framejit inlined torch's Python and broke in it (the empty BlockMask made by a
torch helper cannot be a graph value; a score_mod cannot be an op argument), so the attention ran outside the
graphs. Here the call is traced as stock torch.compile records it:
- the checks run at trace time on the fakes, in torch's order (symbolic sizes compared there become shape
  guards); one that would raise is a graph break, so eager raises its own error at the call (on CPU, q, k or
  v requiring grad is one: torch has no CPU backward);
- `score_mod` (score, b, h, q_idx, kv_idx) and the block mask's `mask_mod` (b, h, q_idx, kv_idx) are
  inlined on scalar stand-ins (`q.new_empty([])`, `q.new_empty([], dtype=torch.int32)`, as torch.compile
  makes them), inside a getitem-to-index block as the op runs them (NOTE [Getitem-to-index blocks]); the
  nodes they add move into a GraphModule each (installed on the graph's root module, read by a `get_attr`
  node: `graph_root`); the outer values they read (closure tensors such as a bias table, sizes) become
  its extra placeholders and the op's `*_other_buffers`, so they are ordinary graph inputs, guarded like
  any other, and gradients reach a captured tensor that requires grad through the op's own autograd;
- a BlockMask (an input, or made in the frame by create_block_mask) is read through `BlockMask.as_tuple`;
  without one, torch's `_create_empty_block_mask` is inlined;
- the result is the op's output (and the log-sum-exp, scaled by ln 2 as torch's wrapper does, for
  return_lse; an AuxOutput for return_aux).
Graph breaks, never a guess: non-constant options, a block
mask that is not exactly a BlockMask, a mod whose body breaks (data-dependent control flow, `.item()`), has
Python effects the caller sees (NOTE [Effects a body undoes]), returns something other than a tensor, or
reads something other than tensors and sizes from outside. The op runs in the graph as in eager (its dense
implementation on CPU); onnxrt and triton run it through their fallback. A graph holding it is kept in memory
only (a get_attr node is not persisted, frame_cache.dump_graph).
"""
from __future__ import annotations

import inspect
import math
import operator
from typing import Any

import torch
from torch.nn.attention import flex_attention as flex_module
from torch._higher_order_ops.flex_attention import flex_attention as flex_hop

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, SymNodeValue, TensorValue, TupleValue, UserFunctionValue, Value

_SIGNATURE = inspect.signature(flex_module.flex_attention)
_OPTIONS = ("scale", "enable_gqa", "return_lse", "kernel_options", "return_aux")


def _break(reason: str):
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"flex_attention: {reason}; the call runs as Python")


def graph_root(output) -> torch.nn.Module:
    """The root module of a GraphModule built from `output.graph`: it holds the traced mods its get_attr
    nodes read (NOTE [Flex attention in the graph])."""
    root = torch.nn.Module()
    for name, module in output.__dict__.get("fx_submodules", {}).items():
        root.add_module(name, module)
    return root


def flex_attention_handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`flex_attention(query, key, value, ...)` (NOTE [Flex attention in the graph])."""
    try:
        bound = _SIGNATURE.bind(*args, **kwargs)
    except TypeError:
        _break("arguments its signature rejects")
    bound.apply_defaults()
    call = {name: v if isinstance(v, Value) else ConstantValue(v) for name, v in bound.arguments.items()}
    q, k, v = call["query"], call["key"], call["value"]
    if not all(isinstance(t, TensorValue) for t in (q, k, v)):
        _break("query, key or value is not a tensor")
    options = {name: _constant(call[name], name) for name in _OPTIONS}
    if options["return_aux"] is not None and type(options["return_aux"]) is not flex_module.AuxRequest:
        _break("a return_aux that is not an AuxRequest")
    block_mask = call["block_mask"]
    options["block_mask_given"] = not (block_mask.is_constant() and block_mask.as_constant() is None)
    items = _block_mask_items(tx, block_mask, q, k)
    _check(q.fake, k.fake, v.fake, items, options)
    kernel_options = _kernel_options(tx.output, q.fake, k.fake, v.fake, options)
    scale = options["scale"]
    if scale is None:
        scale = 1.0 / math.sqrt(int(q.fake.size(-1)))  # a symbolic head dimension is specialised (guarded)
    score_mod = call["score_mod"]
    if score_mod.is_constant() and score_mod.as_constant() is None:
        score_mod = UserFunctionValue(flex_module._identity)
    score = _trace_mod(tx, score_mod, q, "score_mod")
    mask = _trace_mod(tx, items[-1], q, "mask_mod")
    out = _emit(tx, (q, k, v), score, mask, items[:-1], (scale, kernel_options))
    return _finalize(tx, out, options, kernel_options)


def _constant(value: Value, name: str) -> Any:
    if not value.is_constant():
        _break(f"{name} is not a constant")
    return value.as_constant()


def _block_mask_items(tx, block_mask: Value, q: TensorValue, k: TensorValue) -> list[Value]:
    """The values of `block_mask.as_tuple()` (torch's empty block mask for None)."""
    if block_mask.is_constant() and block_mask.as_constant() is None:
        block_mask = tx.inline(UserFunctionValue(flex_module._create_empty_block_mask), [q, k], {})
    if block_mask.python_type() is not flex_module.BlockMask:
        _break("a block_mask that is not a BlockMask")
    items = tx.inline(UserFunctionValue(flex_module.BlockMask.as_tuple), [block_mask], {})
    if not isinstance(items, TupleValue):
        _break("a BlockMask whose as_tuple is not a tuple")
    return list(items.items)


def _fact(value: Value) -> Any:
    """What the checks read of a block-mask item: the fake, the SymInt, or the constant."""
    if isinstance(value, TensorValue):
        return value.fake
    if isinstance(value, SymNodeValue):
        return value.sym
    return value.as_constant() if value.is_constant() else _break("a BlockMask item it cannot read")


def _check(q, k, v, items: list[Value], options: dict) -> None:
    """flex_attention's own checks, in its order, on the fakes; one that would raise is a break."""
    try:
        _checks(q, k, v, [_fact(item) for item in items[:-1]], items[-1], options)
    except (ValueError, RuntimeError, NotImplementedError, AssertionError, TypeError) as e:
        _break(f"it raises {type(e).__name__} ({e})")


def _checks(q, k, v, facts: list, mask_mod: Value, options: dict) -> None:
    flex_module._validate_no_nested_tensors(q, k, v)
    flex_module._validate_sdpa_input(q, k, v, allow_lowp_kv=True)
    flex_module._validate_embed_dim(q, k, v)
    flex_module._validate_device(q, k, v)
    if any(a is not b for a, b in zip(flex_module._enforce_mem_layouts(q, k, v), (q, k, v))):
        _break("inputs whose memory layout it changes")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise NotImplementedError("query, key and value must be 4D tensors")
    if not options["enable_gqa"] and q.size(-3) != k.size(-3):
        raise ValueError("different numbers of heads without enable_gqa")
    if options["enable_gqa"] and q.size(1) % k.size(1) != 0:
        raise ValueError("query heads are not a multiple of the kv heads")
    q_len, kv_len, kv_num_blocks, block_sizes = facts[0], facts[1], facts[2], facts[-2:]
    if q.size(0) != k.size(0) and (not options["block_mask_given"] or kv_num_blocks.size(0) != q.size(0)):
        raise ValueError("batch sizes that do not match")
    if getattr(mask_mod, "fn", getattr(mask_mod, "obj", None)) is flex_module._sliced_mask_mod_error:
        raise RuntimeError("Cannot use mask_mod from a sliced BlockMask")
    large = flex_module._LARGE_SPARSE_BLOCK_SIZE
    if tuple(block_sizes) != (large, large) and (q.size(-2) != q_len or k.size(-2) != kv_len):
        raise ValueError("a block_mask made for other sequence lengths")
    if q.device != kv_num_blocks.device:
        raise RuntimeError("q/k/v and block_mask on different devices")
    if options["return_lse"] and options["return_aux"] is not None:
        raise ValueError("both return_lse and return_aux")


def _kernel_options(output, q, k, v, options: dict) -> dict:
    """torch's `_apply_kernel_options`, under the trace's grad mode (it reads torch.is_grad_enabled())."""
    from ..grad_mode import grad_mode
    try:
        with grad_mode(output.grad_enabled):
            return flex_module._apply_kernel_options(q, k, v, options["return_lse"], options["kernel_options"],
                                                     options["return_aux"])
    except (ValueError, RuntimeError, NotImplementedError, AssertionError, TypeError) as e:
        _break(f"its kernel options raise {type(e).__name__} ({e})")


def _stand_ins(tx, q: TensorValue, kind: str) -> list[Value]:
    """The mod's arguments while it is traced: a scalar score like q (score_mod only), then b, h, q_idx and
    kv_idx as int32 scalars."""
    empty = TupleValue([])
    ints = [tx.output.call("call_method", "new_empty", (q, empty), {"dtype": ConstantValue(torch.int32)})
            for _ in range(4)]
    if kind == "score_mod":
        return [tx.output.call("call_method", "new_empty", (q, empty), {}), *ints]
    return ints


def _trace_mod(tx, fn: Value, q: TensorValue, kind: str) -> tuple:
    """(the mod's GraphModule, the outer nodes it reads): its nodes are cut out of the main graph."""
    from .func_capture import BodyEffects
    from .vmap_capture import _body_module, _region, _Slots
    output = tx.output
    fn = _as_function(fn)
    before = set(output.graph.nodes)
    effects = BodyEffects(tx, [fn])  # NOTE [Effects a body undoes]
    slots = _Slots()
    output.getitem_to_index = getattr(output, "getitem_to_index", 0) + 1  # NOTE [Getitem-to-index blocks]
    try:
        stand_ins = _stand_ins(tx, q, kind)
        slots.nodes.extend(s.node for s in stand_ins)
        result = tx.call(fn, stand_ins, {})
    except BaseException:
        effects.close()
        raise
    finally:
        output.getitem_to_index -= 1
    effects.finish(f"flex_attention's {kind}")
    if not isinstance(result, TensorValue):
        _break(f"its {kind} returns something other than a tensor")
    region, externals = _region(output.graph, before, slots, [result.node])
    if any(_writes(node) for node in region):  # NOTE [Writes inside flex_attention mods]
        _break(f"its {kind} writes a tensor in place")
    for node in externals:
        if not isinstance(node.meta.get("val"), (torch.Tensor, torch.SymInt)):
            _break(f"its {kind} reads something other than tensors and sizes from outside")
    body = _body_module(region, slots, externals, [result.node], True, tuple)
    _plain_subscripts(body)
    for node in reversed(region):
        output.graph.erase_node(node)
    return body, externals


# NOTE [Writes inside flex_attention mods]: the op runs a mod once per score (vmapped), so a write inside it
# (`t.add_(1)` on a captured tensor) happens a number of times only the op's implementation decides, and the
# subgraph's copy of the write was dropped (revAP H1: eager t=[1,1,1,1], the graph left t zero). Any in-place
# node in a mod's region is a break: the call runs as Python, as eager.


def _writes(node: torch.fx.Node) -> bool:
    """`node` may write into a tensor (by name, as requests.writes_in_place; `operator.and_` is no write)."""
    from .requests import writes_in_place
    return writes_in_place(node) and not (node.op == "call_function" and node.target in _LOGICAL)


_LOGICAL = (operator.and_, operator.or_, operator.not_)


# NOTE [Subscripts in flex_attention mods]: a mod is traced inside a getitem-to-index block, as the op runs it,
# so `bias[h, q_idx]` with the scalar index tensors is `aten.index(bias, [h, q_idx])` there (as a plain
# subscript its fake needs the index's value). In the mod's graph it is written back as the subscript
# (`operator.getitem(bias, (h, q_idx))`, what torch.compile records), which the op's own
# TransformGetItemToIndex turns into torch's `mod_index` when it runs the mod: an `aten.index` node would
# get aten's backward, whose in-place accumulation into the captured tensor vmap refuses ("can not return a
# BatchedTensor when out_dim is None": the gradient of a captured bias table).
def _plain_subscripts(body: torch.fx.GraphModule) -> None:
    graph = body.graph
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.index.Tensor and "fj_subscript" in node.meta:
            container, ints = node.meta.pop("fj_subscript")  # an int leaf, or None: the index tensor in the node
            leaves = [index if leaf is None else leaf for leaf, index in zip(ints, node.args[1])]
            key = leaves[0] if container is None else container(leaves)
            with graph.inserting_before(node):
                plain = graph.call_function(operator.getitem, (node.args[0], key))
            plain.meta = dict(node.meta)
            node.replace_all_uses_with(plain)
            graph.erase_node(node)
    graph.eliminate_dead_code()
    body.recompile()


def _as_function(fn: Value) -> Value:
    """torch's own mods (noop_mask, read from a BlockMask as a torch function) are inlined like the user's."""
    obj = getattr(fn, "obj", None)
    if not isinstance(fn, UserFunctionValue) and inspect.isfunction(obj) and \
            (obj.__module__ or "").startswith("torch.nn.attention"):
        return UserFunctionValue(obj)
    return fn


def _install(output, kind: str, body: torch.fx.GraphModule) -> torch.fx.Node:
    modules = output.__dict__.setdefault("fx_submodules", {})
    name = f"{'score_mod' if kind == 'score_mod' else 'mask_fn'}_{len(modules)}"
    modules[name] = body
    node = output.graph.get_attr(name)
    node.meta["val"] = body
    return node


def _emit(tx, qkv: tuple, score: tuple, mask: tuple, items: list[Value], options: tuple) -> Value:
    """One `torch.ops.higher_order.flex_attention` node, as torch.compile records it."""
    output = tx.output
    (score_body, score_reads), (mask_body, mask_reads) = score, mask
    scale, kernel_options = options
    values = [*(t.node for t in qkv)]
    block = tuple(getattr(item, "node", None) if isinstance(item, (TensorValue, SymNodeValue)) else
                  item.as_constant() for item in items)
    args = (*values, _install(output, "score_mod", score_body), (*block, _install(output, "mask_mod", mask_body)),
            scale, kernel_options, tuple(score_reads), tuple(mask_reads))
    fake_args = torch.fx.node.map_arg(args, lambda n: n.meta["val"])
    try:
        fake = output._run_fake("call_function", flex_hop, fake_args, {})
    except Exception as e:  # the op's own refusals (a mod it cannot vmap): eager raises them at the call
        _break(f"the op refuses the traced mods ({type(e).__name__}: {e})")
    node = output.graph.create_node("call_function", flex_hop, args, {})
    node.meta["val"] = fake
    node.meta["stack_trace"] = output.stack_trace()
    output.op_count += 1
    return output.wrap_result(node, fake)


def _finalize(tx, result: Value, options: dict, kernel_options: dict) -> Value:
    """torch's `_finalize_outputs`: the output, and the log-sum-exp (and max scores) in natural log, as a
    tuple (return_lse) or an AuxOutput (return_aux)."""
    out, lse, max_scores = result.items[:3]
    aux = options["return_aux"]
    wanted = (options["return_lse"] or aux is not None and aux.lse, aux is not None and aux.max_scores)
    stats = [_natural(tx, stat, kernel_options) if want else ConstantValue(None)
             for stat, want in zip((lse, max_scores), wanted)]
    if aux is not None:
        from .values import ClassValue
        return TupleValue([out, tx.call(ClassValue(flex_module.AuxOutput), stats, {})])
    return TupleValue([out, stats[0]]) if options["return_lse"] else out


def _natural(tx, stat: TensorValue, kernel_options: dict) -> Value:
    if any(isinstance(n, int) and n == 0 for n in stat.fake.shape):  # numel() == 0 (a symbolic size is >= 2)
        return ConstantValue(None)
    if kernel_options["BACKEND"] == "FLASH":
        return stat
    return tx.output.call("call_function", operator.mul, (stat, ConstantValue(math.log(2.0))), {})


_FROM_KV_BLOCKS = flex_module.BlockMask.from_kv_blocks.__func__


def _from_kv_blocks(*args, **kwargs):
    """`BlockMask.from_kv_blocks(...)`, inlined (a torch function returning a BlockMask is no graph op)."""
    return _FROM_KV_BLOCKS(flex_module.BlockMask, *args, **kwargs)


def register() -> None:
    from .builtins import BUILTIN_HANDLERS
    BUILTIN_HANDLERS[flex_module.flex_attention] = flex_attention_handler
    BUILTIN_HANDLERS[_FROM_KV_BLOCKS] = lambda tx, args, kwargs: tx.inline(UserFunctionValue(_FROM_KV_BLOCKS), args,
                                                                           kwargs)
    BUILTIN_HANDLERS[flex_module.BlockMask.from_kv_blocks] = \
        lambda tx, args, kwargs: tx.inline(UserFunctionValue(_from_kv_blocks), args, kwargs)
