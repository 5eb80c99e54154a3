"""Lowering: FX graph -> aten graph (make_fx + torch._decomp) -> loop-level IR (ir.Graph).

`to_aten` traces the user's GraphModule with fake tensors into functional aten ops, decomposing the
composite ops we would rather see as pieces (GELU, SiLU, batch norm, ...). `Lowerer` then walks that
graph once. Every aten value becomes a `TensorRef`: a buffer name plus an index function from the
value's own coordinates to the buffer's coordinates, so views (permute, expand, slice, select,
reshape, unsqueeze, squeeze) cost nothing and become index arithmetic in the loads that read them.

Each aten op is looked up in `LOWERINGS` (filled here and by lowering_reductions.py). Library ops
(mm, bmm, addmm, convolution, attention, embedding) become `ExternNode`s; an op without a lowering
also becomes an `ExternNode` that calls the eager op ("fallback"), logged on `output_code`, never an
error. Invariant: every computed node's body only reads buffers created before it.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Callable, Sequence

import torch
import torch.utils._pytree as pytree
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from framejit import fake_modes, logs

from ..aliasing import reads_computed_layout
from . import ir
from .ir import Const, Load, Scalar, cast

aten = torch.ops.aten

# NOTE [Decompositions]
# Only composites whose pieces we lower well are decomposed by torch._decomp; softmax, log_softmax,
# layer norm, var/std and mean are lowered by us (lowering_reductions.py) so that they come out as a
# few reductions with pointwise prologues and epilogues that the scheduler can fuse into one kernel.
DECOMPOSE = [
    aten.gelu, aten.silu, aten.hardswish, aten.hardsigmoid, aten.hardtanh, aten.mish, aten.elu,
    aten.leaky_relu, aten.softplus, aten.addcmul, aten.addcdiv, aten.lerp, aten.rsub,
    aten.linear, aten.t,
    aten.masked_fill, aten.clamp_min, aten.clamp_max, aten.logsumexp, aten.sigmoid_backward,
    aten.squeeze_copy, aten.expand_copy, aten.transpose_copy, aten.permute_copy,
]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager PyTorch computes in for values stored as `dtype`."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def to_aten(gm: torch.fx.GraphModule, example_inputs: Sequence) -> torch.fx.GraphModule:
    """Functional aten graph of `gm`, traced with fake tensors (module tensors become get_attr)."""
    from ..foreach import expand_foreach  # NOTE [Foreach expansion]
    gm = expand_foreach(gm)
    from ..reduced_cpu import keep_whole  # NOTE [Reduced-precision kernels kept whole on CPU]
    decompositions = keep_whole(get_decompositions(DECOMPOSE))
    # NOTE [Graph modules called through forward] (onnxrt/lowering.py): gm.forward, not gm, so that the user's
    # global module hooks never see framejit's GraphModule; through a plain function of *args, as make_fx
    # counts a bound method's parameters with its self
    def run(*args):
        return gm.forward(*args)
    functional = torch.func.functionalize(run, remove="mutations")
    from ..torch_methods import eager_dropout, original_api_functions, original_tensor_methods
    # NOTE [Patched Tensor methods while lowering], [Patched torch functions while lowering], NOTE [Dropout
    # drawn as eager draws it]
    with original_tensor_methods(), original_api_functions(gm), eager_dropout():
        traced = make_fx(functional, decomposition_table=decompositions, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*example_inputs)
    fake_modes.forget_modes_of(traced)  # NOTE [Traces leave no weak references] in fake_modes.py
    from ..state import changes_default_dtype, pin_default_dtypes
    if changes_default_dtype(gm):  # NOTE [Default dtype in the lowered graph] (state.py): `torch.arange(s)`
        pin_default_dtypes(traced)  # and linspace under a default set inside were float32, as onnxrt's were
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return traced


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """A tensor value: element `coords` of it is element `index(coords)` of buffer `buffer`."""

    buffer: str
    shape: tuple
    dtype: torch.dtype
    index: Callable  # list[Index] (coords of shape) -> list[Index] (coords of the buffer)
    views: tuple = ()  # ((OpOverload, args), ...) that rebuild this view from the real buffer

    def view(self, shape, index_fn, op, args) -> "TensorRef":
        base = self.index
        return TensorRef(self.buffer, tuple(shape), self.dtype, lambda c: base(index_fn(c)),
                         self.views + ((op, tuple(args)),))

    @property
    def is_view(self) -> bool:
        return bool(self.views)


LOWERINGS: dict = {}


def lowering(*ops):
    """Register a lowering `fn(lowerer, node, *args, **kwargs)` for aten op packets or overloads."""

    def decorator(fn):
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return decorator


class Unlowerable(Exception):
    """This op (with these arguments) has no lowering: it becomes an extern fallback."""


class GraphNotLowerable(Exception):
    """The graph as a whole cannot be compiled: the backend runs it eagerly."""


class Lowerer:
    """Walks an aten graph once, building ir nodes (see module docstring)."""

    def __init__(self, aten_gm: torch.fx.GraphModule):
        self.gm = aten_gm
        self.nodes: list = []
        self.inputs: list = []
        self.constants: dict = {}
        self.env: dict = {}
        self.fallbacks: list[str] = []
        self._counter = 0

    # -- naming and node creation ---------------------------------------------------------------

    def new_name(self) -> str:
        name = f"buf{self._counter}"
        self._counter += 1
        return name

    def add(self, node) -> TensorRef:
        self.nodes.append(node)
        return TensorRef(node.name, tuple(node.shape), node.dtype, lambda c: list(c))

    def pointwise(self, args: Sequence, shape, dtype, fn, compute: torch.dtype, origin: str) -> TensorRef:
        """A node computing `fn(*loaded args)` elementwise; tensors broadcast to `shape`."""
        shape = tuple(shape)
        coords = ir.loop_vars(shape)
        values = [cast(self.load(a, coords, shape), compute) if isinstance(a, TensorRef)
                  else Scalar(ir._python_value(a, compute), compute) for a in args]
        body = cast(fn(*values), dtype)
        if isinstance(body, Scalar):  # NOTE [Literals hold their dtype's value] (ir.py): a fill
            body = Scalar(ir._python_value(body.value, dtype), dtype)
        return self.add(ir.PointwiseNode(self.new_name(), shape, dtype, body, origin))

    def load(self, ref: TensorRef, coords: Sequence, shape: Sequence) -> Load:
        """Read `ref` at the coordinates of a (broadcast) tensor of `shape`."""
        offset = len(shape) - len(ref.shape)
        own = [Const(0) if size == 1 else coords[offset + k] for k, size in enumerate(ref.shape)]
        return Load(ref.buffer, tuple(ref.index(own)), ref.dtype)

    # -- the walk -------------------------------------------------------------------------------

    def run(self) -> ir.Graph:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node)
            elif node.op == "get_attr":
                self.env[node] = self.constant(node)
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "output":
                flat, spec = pytree.tree_flatten(self.map_args(node.args[0]))
                if any(isinstance(v, TensorItem) for v in flat):  # NOTE [Numbers read from tensors]
                    raise GraphNotLowerable("the graph returns a number read from a tensor (item())")
                return ir.Graph(self.inputs, self.constants, self.nodes, flat, spec)
        raise AssertionError("aten graph without an output node")

    def placeholder(self, node) -> TensorRef | object:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unlowerable(f"non-tensor graph input {node.name}")
        inp = ir.InputNode(f"arg{len(self.inputs)}", tuple(val.shape), val.dtype, tuple(val.stride()))
        self.inputs.append(inp)
        return TensorRef(inp.name, inp.shape, inp.dtype, lambda c: list(c))

    def constant(self, node) -> TensorRef:
        tensor = getattr(self.gm, node.target)
        name = f"const{len(self.constants)}"
        self.constants[name] = tensor
        inp = ir.InputNode(name, tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()), "constant")
        self.nodes.append(inp)
        return TensorRef(name, inp.shape, inp.dtype, lambda c: list(c))

    def map_args(self, args):
        return pytree.tree_map(lambda a: self.env[a] if isinstance(a, torch.fx.Node) else a, args)

    def call(self, node):
        args, kwargs = self.map_args((node.args, node.kwargs))
        if node.target is operator.getitem:
            return args[0][args[1]]
        if node.target is aten._local_scalar_dense.default:  # NOTE [Numbers read from tensors]
            return TensorItem(args[0])
        args, kwargs = _items_as_tensors(node, args, kwargs)
        if not isinstance(node.target, torch._ops.OpOverload):
            # a Python callable (say, an output dataclass) has no tensor semantics we can check
            raise GraphNotLowerable(f"graph calls {node.target!r}, which is not an aten op")
        if node.target is torch.ops.aten.as_strided.default and reads_computed_layout(node) is not None:
            raise GraphNotLowerable("as_strided reads the storage of a tensor whose eager layout is not dense "
                                    "(NOTE [Storage read by as_strided] in onnxrt/translate.py)")
        fn = LOWERINGS.get(node.target) or LOWERINGS.get(getattr(node.target, "overloadpacket", None))
        if fn is not None:
            try:
                return fn(self, node, *args, **kwargs)
            except Unlowerable as why:
                return self.extern(node, args, kwargs, f"fallback: {why}")
        return self.extern(node, args, kwargs, "fallback: no lowering")

    def extern(self, node, args, kwargs, reason: str):
        """Call the eager op from the wrapper; its tensor results become buffers."""
        name = self.new_name()
        leaves, spec = pytree.tree_flatten(node.meta.get("val"))
        outputs = []
        for k, val in enumerate(leaves):
            if isinstance(val, torch.Tensor):
                path = (k,) if len(leaves) > 1 or spec.num_children else ()
                outputs.append(ir.ExternOutput(f"{name}_{k}" if path else name, path, tuple(val.shape),
                                               val.dtype, tuple(val.stride())))
        inputs = [a.buffer for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, TensorRef)]
        mutates = _mutated_buffers(node.target, args)
        self.nodes.append(ir.ExternNode(name, node.target, tuple(args), dict(kwargs), outputs, reason,
                                        tuple(dict.fromkeys(inputs)), mutates, _random_input_layouts(node, args)))
        if reason.startswith("fallback"):
            self.fallbacks.append(f"{node.target} ({reason[10:]})")
            logs.log("output_code", "triton: %s runs eagerly as an extern (%s)", node.target, reason)
        refs = [TensorRef(o.name, o.shape, o.dtype, lambda c: list(c)) for o in outputs]
        if not refs:
            return None
        if len(leaves) == 1 and not spec.num_children:
            return refs[0]
        it = iter(refs)
        return pytree.tree_unflatten([next(it) if isinstance(v, torch.Tensor) else v for v in leaves], spec)


# NOTE [Numbers read from tensors]
# `aten._local_scalar_dense(t)` reads a one-element tensor's value as a Python number (an unbacked SymFloat
# or SymInt while tracing). The optimizers' single-tensor paths read their step this way (Adam and AdamW:
# `param.addcdiv_(exp_avg, denom, value=-step_size)` with a tensor step_size; Adagrad likewise), and so does
# a tensor lr. The lowering had no such value: the extern returned None and the op reading it failed to
# compile (float(None)), so every step after the first ran eagerly. The number stays the one-element
# tensor (`TensorItem`) and is read as a 0-d tensor where the op's schema takes a Tensor (`mul.Tensor(x,
# item)`): aten wraps a number passed there into a 0-d tensor, which promotes like the number, and the
# pointwise lowering casts both to the compute dtype alike. Anywhere else (a Scalar argument such as
# alpha, a Python operator on it, a graph output) the graph runs eagerly, logged.
@dataclasses.dataclass(frozen=True)
class TensorItem:
    """The number `aten._local_scalar_dense` reads from the one-element tensor `tensor`."""

    tensor: TensorRef


def _items_as_tensors(node, args, kwargs) -> tuple:
    """`args` and `kwargs` with each TensorItem at a Tensor argument of `node`'s schema read as a 0-d view
    of its tensor; GraphNotLowerable when one is anywhere else (NOTE [Numbers read from tensors])."""
    if not any(isinstance(v, TensorItem) for v in pytree.tree_leaves((args, kwargs))):
        return args, kwargs
    schema = getattr(node.target, "_schema", None)
    tensor_args = {a.name for a in schema.arguments if isinstance(a.type, torch.TensorType)} if schema else set()
    names = [a.name for a in schema.arguments] if schema else []

    def as_tensor(name, value):
        if not isinstance(value, TensorItem):
            if any(isinstance(v, TensorItem) for v in pytree.tree_leaves(value)):
                raise GraphNotLowerable(f"{node.target} reads a number read from a tensor (item()) in a list")
            return value
        if name not in tensor_args:
            raise GraphNotLowerable(f"{node.target} reads a number read from a tensor (item()) as its "
                                    f"argument {name!r}")
        ref = value.tensor
        return ref.view((), lambda c: [Const(0)] * len(ref.shape), aten.reshape.default, ([],))

    args = tuple(as_tensor(names[k] if k < len(names) else None, v) for k, v in enumerate(args))
    kwargs = {k: as_tensor(k, v) for k, v in kwargs.items()}
    return args, kwargs


# NOTE [Random draws in eager's layout]
# A random op fills its result in memory order, and its result takes its input's layout (native_dropout,
# bernoulli, rand_like: empty_like(input)): from the same generator state, a channels_last input gets its
# numbers at other elements than a contiguous one. Kernels write their buffers contiguous, where eager's
# op would have kept its input's layout (relu of a channels_last tensor is channels_last), so dropout after
# such an op drew eager's numbers for other elements (a conv net in channels_last trained with other masks
# than eager's). A random extern reads each tensor argument in the strides its traced value had (eager's),
# copied by the wrapper only when the buffer has others (`_as_layout`).
def _random_input_layouts(node, args) -> tuple:
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return ()
    layouts = []
    for k, (arg, value) in enumerate(zip(node.args, args)):
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if isinstance(value, TensorRef) and isinstance(val, torch.Tensor) and \
                torch._prims_common.is_non_overlapping_and_dense_or_false(val):
            layouts.append((k, tuple(val.stride())))
    return tuple(layouts)


def _mutated_buffers(target, args) -> tuple:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ()
    out = []
    for arg, value in zip(schema.arguments, args):
        if arg.alias_info is not None and arg.alias_info.is_write and isinstance(value, TensorRef):
            out.append(value.buffer)
    return tuple(out)


def lower(aten_gm: torch.fx.GraphModule) -> tuple[ir.Graph, list[str]]:
    """The ir.Graph of an aten graph, and the ops that fell back to eager externs."""
    lowerer = Lowerer(aten_gm)
    graph = lowerer.run()
    return graph, lowerer.fallbacks


# ---------------------------------------------------------------------------------------------------
# Views: index arithmetic, never a node
# ---------------------------------------------------------------------------------------------------


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _out_shape(node) -> tuple:
    return tuple(node.meta["val"].shape)


@lowering(aten.view, aten._unsafe_view, aten.reshape)
def _view(lo, node, x: TensorRef, size):
    if isinstance(size, torch.dtype):  # `x.view(torch.int32)` reinterprets the bits (review revE HIGH-2): the
        raise Unlowerable("view as another dtype")  # index map below would only relabel x's values
    shape = _out_shape(node)

    def index(c):
        return ir.delinearize(ir.linearize(c, shape), x.shape)

    return x.view(shape, index, aten.reshape.default, (list(shape),))


@lowering(aten.permute)
def _permute(lo, node, x: TensorRef, dims):
    dims = [_dim(d, len(x.shape)) for d in dims]

    def index(c):
        out = [None] * len(dims)
        for k, d in enumerate(dims):
            out[d] = c[k]
        return out

    return x.view(_out_shape(node), index, aten.permute.default, (dims,))


@lowering(aten.transpose.int)
def _transpose(lo, node, x: TensorRef, a, b):
    dims = list(range(len(x.shape)))
    a, b = _dim(a, len(dims)), _dim(b, len(dims))
    dims[a], dims[b] = dims[b], dims[a]
    return _permute(lo, node, x, dims)


@lowering(aten.expand)
def _expand(lo, node, x: TensorRef, size, implicit=False):
    shape = _out_shape(node)
    offset = len(shape) - len(x.shape)

    def index(c):
        return [Const(0) if s == 1 else c[offset + k] for k, s in enumerate(x.shape)]

    return x.view(shape, index, aten.expand.default, (list(shape),))


@lowering(aten.slice.Tensor)
def _slice(lo, node, x: TensorRef, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, len(x.shape))
    size = x.shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    start = min(max(start, 0), size)

    def index(c):
        c = list(c)
        c[dim] = ir.add(ir.mul(c[dim], step), Const(start))
        return c

    return x.view(_out_shape(node), index, aten.slice.Tensor, (dim, start, end, step))


@lowering(aten.select.int)
def _select(lo, node, x: TensorRef, dim, idx):
    dim = _dim(dim, len(x.shape))
    idx = idx + x.shape[dim] if idx < 0 else idx

    def index(c):
        return list(c[:dim]) + [Const(idx)] + list(c[dim:])

    return x.view(_out_shape(node), index, aten.select.int, (dim, idx))


@lowering(aten.unsqueeze)
def _unsqueeze(lo, node, x: TensorRef, dim):
    dim = _dim(dim, len(x.shape) + 1)

    def index(c):
        return list(c[:dim]) + list(c[dim + 1:])

    return x.view(_out_shape(node), index, aten.unsqueeze.default, (dim,))


@lowering(aten.squeeze)
def _squeeze(lo, node, x: TensorRef, dims=None):
    if dims is None:
        dims = range(len(x.shape))
    elif isinstance(dims, int):
        dims = [dims]
    removed = {_dim(d, len(x.shape)) for d in dims if x.shape[_dim(d, len(x.shape))] == 1}

    def index(c):
        it = iter(c)
        return [Const(0) if k in removed else next(it) for k in range(len(x.shape))]

    return x.view(_out_shape(node), index, aten.squeeze.dims, (sorted(removed),))


@lowering(aten.alias, aten.detach, aten.lift_fresh_copy)
def _alias(lo, node, x: TensorRef):
    return x


@lowering(aten.split.Tensor, aten.split_with_sizes, aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes)
def _split(lo, node, x: TensorRef, split, dim=0):
    dim = _dim(dim, len(x.shape))
    sizes = [int(v.shape[dim]) for v in node.meta["val"]]
    out, start = [], 0
    for size in sizes:
        out.append(_slice_ref(x, dim, start, start + size))
        start += size
    return out


def _slice_ref(x: TensorRef, dim: int, start: int, end: int) -> TensorRef:
    shape = list(x.shape)
    shape[dim] = end - start

    def index(c):
        c = list(c)
        c[dim] = ir.add(c[dim], Const(start))
        return c

    return x.view(shape, index, aten.slice.Tensor, (dim, start, end, 1))


@lowering(aten.unbind.int)
def _unbind(lo, node, x: TensorRef, dim=0):
    dim = _dim(dim, len(x.shape))
    outs = []
    for idx in range(x.shape[dim]):
        shape = x.shape[:dim] + x.shape[dim + 1:]
        outs.append(x.view(shape, lambda c, i=idx: list(c[:dim]) + [Const(i)] + list(c[dim:]),
                           aten.select.int, (dim, idx)))
    return outs


# ---------------------------------------------------------------------------------------------------
# Externs that a library does better
# ---------------------------------------------------------------------------------------------------

LIBRARY_OPS = [
    aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.convolution, aten.embedding,
    aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention,
    aten.scaled_dot_product_attention, aten._scaled_dot_product_attention_math,
]


@lowering(*LIBRARY_OPS)
def _library(lo, node, *args, **kwargs):
    return lo.extern(node, args, kwargs, "library")


@lowering(aten.copy_)
def _copy_(lo, node, dst, src, non_blocking=False):
    # functionalize() writes mutated graph inputs back with copy_ at the end of the graph
    return lo.extern(node, (dst, src), {}, "library")
