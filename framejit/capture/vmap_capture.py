"""`torch.vmap(f, ...)(*args)` captured as one graph node that applies torch.vmap to f's traced body.

NOTE [vmap regions]: `torch.vmap` / `torch.func.vmap` (and functorch's deprecated `vmap`, which calls it)
return `wrapped`, whose call is `vmap_impl(f, in_dims, out_dims, randomness, chunk_size, *args, **kwargs)`.
That call is traced here instead of inlining functorch's machinery (which reads C state and broke):
- each batched tensor argument (an int in_dim; a tuple, list or dict argument: each of its tensors, under
  in_dims that are an int or a matching structure holding ints and None) stands in
  the body for one sample: a `select(x, dim, 0)` node, whose fake has exactly the per-sample sizes and
  strides a BatchedTensor shows (the physical ones without the batch dimension); an in_dim None argument
  and the keyword arguments are passed as they are, as vmap passes them;
- `f` is called on those values like any inlined function (its code, closure cells and defaults are
  guarded as for any inlined call); a break anywhere in the body is a break at the vmap call, which then
  runs as Python, exactly as before;
- the nodes the body added (the region) move into a GraphModule whose placeholders are the per-sample
  slots (vmap'd over their in_dims) and the outer values the body read (in_dim None: closure tensors,
  parameters, sizes); the main graph gets one node `VmapCall(body, ...)(*inputs)` that runs
  `torch.vmap(body, in_dims, out_dims, randomness, chunk_size)` for real. So the values, the randomness
  mode, chunking, in-place writes through batched arguments and vmap's own errors are eager's: the same
  function runs under the same transform. A nested vmap in the body is already one such node when the
  outer region is cut, so it runs under the outer vmap, as in eager.
- Before the region is cut, `VmapCall` runs once on the trace's fakes: vmap's own refusals (a random op
  under randomness="error", `.item()`, mismatched batch sizes, out_dims not matching the outputs) are a
  graph break then, so eager raises them. The fakes' version counters are restored afterwards: the writes
  were already counted when the body was traced.
- a result other than a tensor or a flat tuple or list of tensors (nested tuples, lists and dicts: the
  per-sample gradients of a dict of parameters) is rebuilt by the node's function from its flat tensors
  (func_capture.result_template), and the node returns the flat tensors of vmap's result.
Graph breaks, never a guess: a body that mutates Python state the caller can see and does not put back
(a store, an append to an outer list, a global; NOTE [Effects a body undoes]), a grad-mode/autocast switch
inside the body (the region would carry a state change), constants in the result (vmap raises), a batch
size of 0 (the slot cannot be selected), in_dims or out_dims that are not constants, and any call into
functorch's own state (NOTE [functorch state]: `is_batchedtensor` would answer for the per-sample stand-in),
and `t.requires_grad` (False for every batched tensor in eager; `grad_fn`, `is_leaf`, `_base` and `grad`
of a traced tensor are breaks anyway). A custom autograd Function applied with grad on in the body (its
traced region must stay in the main graph, NOTE [Custom autograd functions in the graph]) is a break too.
A graph holding a VmapCall is kept in memory only (not persisted). Backends: eager runs the node; onnxrt
and triton trace it with make_fx, which turns vmap into the batched aten ops.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from .breaks import BreakKind, Unsupported, UserException
from .func_capture import BodyEffects, _fill, _flat_result, result_template, values_of
from .values import ConstantValue, DictValue, ListValue, SequenceValue, TensorValue, TupleValue, Value


class VmapCall:
    """A graph node's target: torch.vmap of a traced body (NOTE [vmap regions]). With `out` (a result
    structure, func_capture.result_template) the body returns flat tensors, vmap runs a function returning
    that structure, and the node returns the flat tensors of vmap's result."""

    def __init__(self, body: torch.fx.GraphModule, in_dims: tuple, out_dims: Any, randomness: str,
                 chunk_size: int | None, out: Any = None) -> None:
        self.body, self.in_dims, self.out_dims = body, in_dims, out_dims
        self.randomness, self.chunk_size, self.out = randomness, chunk_size, out
        self.__name__ = "vmap_body"

    def __call__(self, *inputs):  # `forward`: GraphModule.__call__ prints vmap's refusals of the fake run
        fn = self.body.forward
        if self.out is not None:
            fn = functools.partial(_structured, self.body.forward, self.out)
        result = torch.vmap(fn, in_dims=self.in_dims, out_dims=self.out_dims, randomness=self.randomness,
                            chunk_size=self.chunk_size)(*inputs)
        return result if self.out is None else tuple(_flat_result(result, []))

    def __reduce__(self):
        raise TypeError("a vmap call is not persisted")


def _structured(body, out: Any, *inputs):
    return _fill(out, body(*inputs))


@dataclasses.dataclass
class _Slots:
    """The per-sample stand-ins of the batched arguments: `outer[k]` is vmap'd over `dims[k]`, and
    `nodes[k]` is its select node in the body."""
    outer: list = dataclasses.field(default_factory=list)
    dims: list = dataclasses.field(default_factory=list)
    nodes: list = dataclasses.field(default_factory=list)


def _break(reason: str):
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch.vmap: {reason}; the call runs as Python")


def _constant(value: Value, what: str) -> Any:
    if not value.is_constant():
        _break(f"{what} is not a constant")
    return value.as_constant()


def _slot(tx, tensor: Value, dim: Any, slots: _Slots) -> Value:
    if not isinstance(tensor, TensorValue) or type(dim) is not int:
        _break("a batched argument that is not a tensor (or a tuple or list of tensors)")
    ndim = tensor.fake.dim()
    if not -ndim <= dim < ndim:
        _break("an in_dim out of range")
    dim = dim % ndim
    size = tensor.fake.shape[dim]
    if isinstance(size, int) and size == 0:
        sample = _empty_sample(tx, tensor, dim)
    else:
        sample = tx.output.call("call_function", torch.select, (tensor, ConstantValue(dim), ConstantValue(0)), {})
    slots.outer.append(tensor.node)
    slots.dims.append(dim)
    slots.nodes.append(sample.node)
    return sample


def _empty_sample(tx, tensor: TensorValue, dim: int) -> Value:
    """The stand-in of a batch of size 0 (a 0 size is always a constant: the shape env specialises it),
    which has no sample to select: an empty_strided tensor with a sample's sizes and strides (the node
    becomes a placeholder of the body; a write through it writes no element of the batch)."""
    fake = tensor.fake
    sizes, strides = (tx.call_method_of(tensor, name, [], {}) for name in ("size", "stride"))
    sizes, strides = ([v for k, v in enumerate(_items_of(values)) if k != dim] for values in (sizes, strides))
    return tx.output.call("call_function", torch.empty_strided, (TupleValue(sizes), TupleValue(strides)),
                          {"dtype": ConstantValue(fake.dtype), "device": ConstantValue(fake.device)})


def _items_of(value: Value) -> list[Value]:
    return [ConstantValue(n) for n in value.as_constant()] if value.is_constant() else list(value.items)


def _body_args(tx, args: list[Value], in_dims: Any, slots: _Slots) -> list[Value]:
    """The arguments the body is called with: per-sample stand-ins where `in_dims` batches."""
    if isinstance(in_dims, int):
        in_dims = (in_dims,) * len(args)
    if type(in_dims) is not tuple or len(in_dims) != len(args):
        _break("in_dims is neither an int nor a tuple with one entry per argument")
    body_args = [_batched(tx, arg, dim, slots) for arg, dim in zip(args, in_dims)]
    if not slots.outer:
        _break("no argument is batched")
    return body_args


def _batched(tx, arg: Value, dim: Any, slots: _Slots) -> Value:
    """`arg` as the body sees it under `dim`, an int, None or a structure matching a tuple, list or dict
    argument (vmap's in_dims are a prefix of each argument's structure); containers are new, as in eager."""
    if dim is None:
        return arg
    if isinstance(arg, SequenceValue) and arg.cls in (tuple, list):
        dims = (dim,) * len(arg.items) if type(dim) is int else dim
        if type(dims) not in (tuple, list) or type(dim) not in (int, arg.cls) or len(dims) != len(arg.items):
            _break("a tuple or list argument whose in_dims do not match it")
        samples = [_batched(tx, item, d, slots) for item, d in zip(arg.items, dims)]
        return TupleValue(samples) if arg.cls is tuple else ListValue(samples)
    if isinstance(arg, DictValue) and arg.cls is dict:
        dims = dict.fromkeys(arg.items, dim) if type(dim) is int else dim
        if type(dims) is not dict or list(dims) != list(arg.items):  # vmap checks its spec, not only the keys
            _break("a dict argument whose in_dims do not match it")
        return DictValue({k: _batched(tx, item, dims[k], slots) for k, item in arg.items.items()})
    return _slot(tx, arg, dim, slots)


def _visible_values(tx, roots: list[Value]) -> dict[int, Value]:
    """What the caller can reach at the vmap call (by id): its arguments and every traced frame's locals
    and stack."""
    from .generator_reach import reachable_value_map
    frames = list(tx.output.tx_stack)
    return reachable_value_map([*roots, *(v for t in frames for v in (*t.locals.values(), *t.stack))])


def vmap_impl_handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs)` (NOTE [vmap regions])."""
    if len(args) < 5:
        _break("vmap_impl called without its five leading arguments")
    func, in_dims, out_dims, randomness, chunk_size = args[:5]
    options = (_constant(out_dims, "out_dims"), _constant(randomness, "randomness"),
               _constant(chunk_size, "chunk_size"))
    in_dims = _constant(in_dims, "in_dims")
    output = tx.output
    before = set(output.graph.nodes)
    effects = BodyEffects(tx, [func, *args, *kwargs.values()])  # NOTE [Effects a body undoes]
    slots = _Slots()
    output.vmap_depth = output.__dict__.get("vmap_depth", 0) + 1  # read by check_grad_fact
    try:
        body_args = _body_args(tx, list(args[5:]), in_dims, slots)
        result = tx.call(func, body_args, kwargs)
    except BaseException:
        effects.close()
        raise
    finally:
        output.vmap_depth -= 1
    effects.finish("torch.vmap")
    return _collapse(tx, before, slots, result, options)


def _result_nodes(result: Value) -> tuple[list, Any]:
    """(the result's tensor nodes; None for a tensor or a flat tuple or list of tensors, else the result's
    structure: nested tuples, lists and dicts, and constants, which vmap then refuses)."""
    if isinstance(result, TensorValue):
        return [result.node], None
    if isinstance(result, SequenceValue) and result.cls in (tuple, list) and result.items and \
            all(isinstance(item, TensorValue) for item in result.items):
        return [item.node for item in result.items], None
    outs: list = []
    return outs, result_template("vmap", result, outs)


def _region(graph: torch.fx.Graph, before: set, slots: _Slots, outs: list,
            allow_grad_mode: bool = False) -> tuple[list, list]:
    """(the nodes the body added, in order; the outer nodes it reads, in order of first use). Grad-mode
    switches stay in the body where `allow_grad_mode` (NOTE [Transform regions])."""
    region = [n for n in graph.nodes if n not in before and n.op not in ("placeholder", "get_attr")]
    members = set(region)
    for node in region:
        if node.meta.get("effect") and not (allow_grad_mode and node.target is torch._C._set_grad_enabled):
            _break("the function switches grad mode or autocast")
        if any(key.startswith("fj_function") for key in node.meta):
            _break("the function applies a custom autograd Function with grad on")
        if any(user not in members for user in node.users):
            _break("a value made in the function is used outside it")
    externals: list = []
    slot_nodes = set(slots.nodes)
    for node in [*(n for n in region if n not in slot_nodes), None]:
        reads = node.all_input_nodes if node is not None else outs
        for read in reads:
            if read not in members and read not in externals:
                externals.append(read)
    return region, externals


def _body_module(region: list, slots: _Slots, externals: list, outs: list, single: bool, cls: type):
    from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
    sub = new_graph()
    env = {}
    for k, node in enumerate([*slots.nodes, *externals]):
        env[node] = sub.placeholder(f"sample_{k}" if k < len(slots.nodes) else f"input_{k - len(slots.nodes)}")
        env[node].meta = dict(node.meta)
    for node in region:
        if node not in env:
            env[node] = sub.node_copy(node, lambda n: env[n])
    results = [env[n] for n in outs]
    sub.output(results[0] if single else cls(results))
    return torch.fx.GraphModule(torch.nn.Module(), sub)


def _fake_run(output, call: VmapCall, inputs: list) -> Any:
    """VmapCall on the trace's fakes: vmap's own refusals become a break; version counters kept."""
    fakes = [n.meta.get("val") for n in inputs]
    tensors = [f for f in fakes if isinstance(f, torch.Tensor) and not f.is_inference()]  # those have none
    versions = [f._version for f in tensors]
    try:
        return output._run_fake("call_function", call, tuple(fakes), {})
    except (Unsupported, UserException) as e:
        _break(f"vmap refuses the traced function ({getattr(e, 'exc', e)})")
    finally:
        torch._C._autograd._unsafe_set_version_counter(tuple(tensors), tuple(versions))


def _collapse(tx, before: set, slots: _Slots, result: Value, options: tuple) -> Value:
    """Cut the body's region into a GraphModule and replace it by one VmapCall node."""
    output = tx.output
    graph = output.graph
    outs, structure = _result_nodes(result)
    region, externals = _region(graph, before, slots, outs)
    single = isinstance(result, TensorValue)
    body = _body_module(region, slots, externals, outs, single, tuple if structure is not None or single else
                        result.cls)
    out_dims, randomness, chunk_size = options
    call = VmapCall(body, (*slots.dims, *(None for _ in externals)), out_dims, randomness, chunk_size, structure)
    inputs = [*slots.outer, *externals]
    fake = _fake_run(output, call, inputs)
    for node in reversed(region):
        graph.erase_node(node)
    node = graph.create_node("call_function", call, tuple(inputs), {})
    node.meta["val"] = fake
    node.meta["stack_trace"] = output.stack_trace()
    output.op_count += 1
    if structure is None:
        return output.wrap_result(node, fake)
    flat = output.wrap_result(node, fake) if fake else TupleValue([])
    return values_of(structure, list(flat.items))


def check_functorch_call(fn: Any) -> None:
    """NOTE [functorch state]: a call into `torch._C._functorch` is a break, always. Those functions push
    and pop functorch's interpreter levels (`_grad_increment_nesting`, `_vmap_increment_nesting`, reached by
    inlining torch.func.grad/jacrev/jacfwd/functional_call) or answer for them (`is_batchedtensor`). Run as
    graph ops at trace time they changed the process's real functorch state: a trace of
    `torch.func.grad(f)(x)` that then broke left a level pushed, and every tensor computed afterwards in the
    process was a GradTrackingTensor. In a vmap body (NOTE [vmap regions]) their answers would also be those
    of the per-sample stand-in, not of the BatchedTensor eager passes."""
    if (getattr(fn, "__module__", None) or "").startswith("torch._C._functorch"):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch._C._functorch.{getattr(fn, '__name__', fn)} reads or "
                                                      "changes functorch's transform state")


def check_grad_fact(output, name: str) -> None:
    """NOTE [vmap regions]: in a vmap body eager's BatchedTensors answer `requires_grad` False whatever their
    batch requires (and a closure tensor answers its own), which the fakes do not tell apart: a break."""
    if name == "requires_grad":
        from .reentrant_checkpoint import check_grad_read  # NOTE [Reentrant checkpoint in the graph]
        check_grad_read(output, "requires_grad")
    if name == "requires_grad" and output.__dict__.get("vmap_depth"):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.vmap/torch.func: the function reads requires_grad, "
                          "which the transform's wrapped tensors answer otherwise; the call runs as Python")


def _inlined(fn: Any):
    """torch.vmap itself (and functorch's deprecated one): inlined (it checks its arguments and returns
    `wrapped`), also when the function it is given is a torch function (a graph op cannot take one)."""
    from .values import UserFunctionValue
    return lambda tx, args, kwargs: tx.inline(UserFunctionValue(fn), args, kwargs)


def register() -> None:
    from .builtins import BUILTIN_HANDLERS
    from .module_hooks import TRACE_TIME
    from torch._functorch import apis, deprecated, vmap
    BUILTIN_HANDLERS[vmap.vmap_impl] = vmap_impl_handler
    TRACE_TIME[vmap.vmap_impl] = vmap_impl_handler
    for fn in (apis.vmap, deprecated.vmap):
        BUILTIN_HANDLERS[fn] = _inlined(fn)
    from . import func_capture
    func_capture.register()  # NOTE [Transform regions]
