"""The callable the onnxrt backend returns: per-signature programs of ORT parts and eager torch.

`OnnxrtCompiled(gm, example_inputs, opts)` is called as `compiled(*inputs)` and returns what
`gm(*inputs)` returns. For each input signature (dtypes, shapes, strides, devices, Python scalars) it
builds one `Program` — lower to aten (lowering.py), partition (partition.py), one ORT session per part
(runtime.py) — and reuses it on every later call with that signature.

Invariants (see NOTE [Correct before fast]):
- a call whose inputs or weights require grad while grad mode is on runs through the graph's joint
  (backends/joint.py): a forward and a backward ORT program glued by one autograd.Function;
- any failure while building a program, or the first failure while running one, makes that signature
  run eagerly from then on; it is logged (`eager_fallback`) and never reaches the user;
- what fell back inside a program, and why, is logged on `output_code` when the program is built.
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import re
import time

import torch
import torch.fx
import torch.utils._pytree as pytree

from ... import logs, tensor_watch
from .. import aliasing, joint, state, symbolic
from ..layout import output_layouts, restore as restore_layouts
from . import lowering, partition, runtime, semantics, translate, view_writes
from .options import OnnxrtOptions

# NOTE [Correct before fast]
# Building a program can fail in many places (tracing, a torchlib function, ORT rejecting a kernel);
# the backend retries with the failing FX nodes left to eager (`_MAX_ATTEMPTS` times), then gives up
# on ORT for that signature. A program that fails at run time is retired for good: the graph is
# functional (input mutations are trailing `copy_` nodes in eager parts), so running it again eagerly
# after a partial ORT run repeats no side effect.
_MAX_ATTEMPTS = 8

# NOTE [Revision]
# framejit's version does not change while the backend does, and the cache keys of persisted programs
# (frame cache) and of ONNX models (runtime.py) name only the versions of framejit, torch and the ONNX
# packages. `REVISION` is therefore part of every ONNX model's key and written into every persisted
# artifact, whose `load` refuses another revision (the frame cache then compiles again). Bump it whenever
# lowering, partitioning or translation changes what a graph compiles to.
# 2: in-place ops inside composite ops are functionalized (NOTE [Refunctionalize]).
# 3: transposes folded into Gemm (NOTE [Transposes folded into Gemm]).
# 4: NaN-propagating reductions, copy broadcasting, empty tensors in torch, returned views kept as views
#    (NOTE [Eager semantics in ONNX], NOTE [Returned views stay views]).
# 5: one-sided clamps; atan2, floor_divide, remainder and rounding div of floats run in torch.
# 6: returned views of inputs mutated by the graph are views of the inputs (backends/aliasing.py).
# 7: expm1/log1p and int64 sum/prod/cumprod run in torch (soundness findings #6, #9).
# 8: random ops run in torch, drawing from torch's generator (soundness finding #11).
# 9: the sign of zero as eager (NOTE [Where keeps -0.0]: where, masked_fill, trunc, frac, x ** 0.5,
#    maximum/minimum, tensor clamps); signbit, xlogy, heaviside, topk and max_pool indices run in torch.
# 10: as_strided of a graph input runs in torch (it reads the input's storage).
# 12: sums and means of -0.0s are +0.0, as eager's (NOTE [Eager semantics in ONNX]).
# 13: shapes of symbolic views from the parts' own inputs (NOTE [Shapes from the graph's inputs]).
# 14: batch norm in train mode decomposed (NOTE [Batch norm in train mode on ORT]; programs of 13 and
#     before computed it wrongly).
# 15: gelu as ORT's contrib Gelu/FastGelu (NOTE [Fused ops in the lowering]).
# 16: ops reading float16 run in torch (ORT's CPU provider skipped float16 rounding); as_strided over
#     anything but a dense buffer runs in torch (NOTE [Storage read by as_strided]).
# 17: tensor literals in graphs (lift_fresh kept whole, NOTE [Tensor literals in graphs]) and cats that
#     skip empty vectors run in ORT (NOTE [Cat skips empty vectors]).
# 19: symbolic parts multiply batched operands without flattening views (NOTE [Batched matmuls without views]).
# 20: symbolic lowering drops copies the static trace does not make (NOTE [Copies of the symbolic trace]).
# 21: data movement that feeds no ORT computation runs in torch (NOTE [Copies stay in torch]).
# 22: half-precision arithmetic with an inexact float scalar runs in float32 (NOTE [Scalars of half-precision
#     arithmetic]).
# 23: returned views read by ORT get their own copy of the view chain (NOTE [Returned views read by ORT]);
#     training graphs: convolution_backward as convolutions (NOTE [Convolution gradients as convolutions]),
#     identity view chains between the halves folded (NOTE [Identity views between the halves]).
# 24: attention (written out, or scaled_dot_product_attention) as one MultiHeadAttention (NOTE [Attention as one
#     ORT op]).
# 25: part outputs that torch reads are returned in eager's layout (NOTE [ORT outputs in eager's layout]).
# 26: run-time checks are trailing outputs of the program (NOTE [Run-time checks as outputs] in backends/checks.py).
# 27: frozen running statistics are compared by value (NOTE [Statistics written without a bump]).
# 28: gelu's zeros take eager's sign (NOTE [Sign of gelu's zeros] in translate.py).
# 29: copies that replace a copy or a cat take the op's memory format (NOTE [Copies laid out as the op]).
# 30: a matrix times a 1-D tensor is a product with a column (NOTE [Transposed matrix times a vector]).
# 31: random ops run in torch keep their order between parts (NOTE [Random draws keep their order]).
# 32: joints trace transposed-conv, average-pool and EmbeddingBag gradients as ops ORT runs (training.py).
# 33: joints trace max-pool gradients and adaptive max pools without torch's indices (max_pool_backward.py).
# 34: int64 sums of bools (counts) run in ORT (translate._counts_bools).
# 35: float xlogy as eager's kernel (NOTE [Eager semantics in ONNX]).
# 36: cumprod as a masked product (NOTE [cumprod as a masked product]); max.dim/min.dim of bools over uint8.
# 37: numbers made tensors (scalar_tensor, full) are constants in their own dtype (NOTE [Constants in their own
#     dtype]).
# 38: joints draw dropout's mask in torch and multiply in ORT (NOTE [Dropout's draw apart from its product]).
# 39: joints trace grid_sampler_2d_backward as gathers and scatter-adds (NOTE [grid_sample gradients as scatter-adds]).
# 40: float32/float64 log1p runs in ORT (NOTE [log1p without cancellation]).
# 41: joints trace euclidean _cdist_forward/_cdist_backward as differences (NOTE [Euclidean cdist as differences]).
# 42: float32/float64 expm1 runs in ORT (NOTE [expm1 without cancellation]).
# 43: float64 activations keep their numbers as doubles (NOTE [Float64 activations keep their numbers]).
# 44: inference programs decompose euclidean _cdist_forward too (NOTE [Euclidean cdist as differences]).
# 45: hardsigmoid_backward multiplies by eager's float32 sixth (NOTE [Decompositions that follow eager's kernels]).
# 46: bfloat16/float16 layer_norm, gelu and their backwards stay whole (NOTE [Reduced-precision kernels kept whole
#     on CPU]); batch norms of dtypes eager rejects run eagerly (NOTE [Dtypes eager's batch norm rejects]).
# 47: self-attention whose q, k and v project one input as ORT's Attention (NOTE [Projections inside the attention op]).
# 48: eval-mode native_batch_norm as one BatchNormalization (NOTE [Eval batch norm as one op] in lowering.py).
# 49: attention masked by a boolean -inf masked_fill/where in ORT's attention op, with an exact fallback (NOTE
#     [Boolean masks as an additive bias] in attention_masks.py); split of q, k and v among the moves.
# 50: split/chunk/unbind read piece by piece as one Split (NOTE [Splits as one multi-output Split] in splits.py).
# 51: returned views of temporaries run in torch, symbolic programs too (NOTE [Returned views stay views]).
REVISION = 51


@dataclasses.dataclass
class Program:
    graph_module: torch.nn.Module  # top graph (a GraphModule; persist.RestoredGraph when loaded)
    state: list[torch.Tensor]
    state_names: list[str]  # where each state tensor lives in the backend's input GraphModule
    out_spec: pytree.TreeSpec
    num_parts: int
    ort_nodes: int
    eager_nodes: dict[str, str]  # node name -> reason it runs in eager torch
    build_seconds: float
    bind_source: str = ""  # symbolic programs: the size check (NOTE [One program for every size])
    draws: bool = False  # it runs ops that draw random numbers (NOTE [A failed run draws again])

    def __post_init__(self) -> None:
        spec = self.out_spec  # NOTE [Per-call path]
        self._out_kind = "leaf" if spec.is_leaf() else spec.type if spec.type in (list, tuple) and all(
            child.is_leaf() for child in spec.children()) else None
        self._one_part = _one_part(self.graph_module)

    def __call__(self, inputs) -> object:
        # NOTE [Per-call path]
        # torch's Python pytree took more time than ORT's run on small graphs (flattening 9 tensors and
        # unflattening the result: several us each), and nn.Module.__call__ adds its hook checks. Inputs
        # that are all tensors or Python numbers (a symbolic program's size and int inputs: the pytree path
        # cost ~6 us of the zoo mlp's dynamic=True call, issue 13) are already the leaves; a result that
        # is one tensor, or a list or tuple of tensors, is rebuilt directly; the top GraphModule's forward
        # is called without __call__.
        # A top graph that only calls one ORT part on its inputs and returns that part's one output
        # (the whole graph lowered) calls the part directly with its arguments picked by position
        # (`_one_part`), without the generated forward and its submodule lookup.
        if all(map(isinstance, inputs, _LEAF_TYPES)):
            one_part = self._one_part
            if one_part is not None:
                part, pick = one_part
                return _rebuilt(self, [part(*pick((*self.state, *inputs)))])
            leaves = self.graph_module.forward(*self.state, *inputs)
        else:
            leaves = self.graph_module.forward(*self.state, *pytree.tree_leaves(list(inputs)))
        return _rebuilt(self, leaves)


_LEAF_TYPES = itertools.repeat((torch.Tensor, int, float))  # pytree leaves (bool is an int)


def _rebuilt(program: Program, leaves: list) -> object:
    """The program's result from its flat outputs (NOTE [Per-call path])."""
    kind = program._out_kind
    if kind is list:
        return list(leaves)
    if kind is tuple:
        return tuple(leaves)
    if kind == "leaf":
        return leaves[0]
    return pytree.tree_unflatten(leaves, program.out_spec)


def _one_part(top) -> tuple | None:
    """(the part, a getter of its arguments from the top graph's) when `top` only calls one single-output
    OrtPart on its inputs and returns that output (`one_part_layout`); else None."""
    layout = one_part_layout(top)
    if layout is None:
        return None
    name, positions = layout
    part = getattr(top, name, None)
    if type(part) is not runtime.OrtPart or not part.single_output:
        return None
    pick = operator.itemgetter(*positions) if len(positions) > 1 else (lambda args, k=positions[0]: (args[k],))
    return part, pick


def one_part_layout(top) -> tuple[str, list[int]] | None:
    """(the part's attribute name, the positions of its arguments among the top graph's) when `top` is a
    GraphModule whose graph is `out = part(<placeholders>); return [out]`, or a restored top graph saved
    from one (NOTE [Restored graphs keep the one-part path] in persist.py); else None."""
    if not isinstance(top, torch.fx.GraphModule):
        return getattr(top, "one_part", None)
    nodes = list(top.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op not in ("placeholder", "output")]
    if len(calls) != 1 or calls[0].op != "call_module" or calls[0].kwargs or nodes[-1].op != "output":
        return None
    call = calls[0]
    result = nodes[-1].args[0]
    if not isinstance(result, (list, tuple)) or len(result) != 1 or result[0] is not call:
        return None
    index = {node: k for k, node in enumerate(placeholders)}
    if not call.args or not all(isinstance(a, torch.fx.Node) and a in index for a in call.args):
        return None
    return call.target, [index[a] for a in call.args]


_CPU = torch.device("cpu")


# NOTE [A failed run draws again]: a run of a program that fails (ONNX Runtime raising at run time) is
# rerun in torch (`gm.forward`), and from then on that signature runs eagerly. Random ops of the failed run
# that ran in torch before the failure (NOTE [Random ops stay whole] in lowering.py) had already drawn from
# the generator: the rerun drew again, so that call's masks and the generator's state after it differed
# from eager's. A program that runs such ops keeps the generators' states before each run (`draws`: ~1 us
# per call for the CPU generator, a copy of its 5 KB state) and puts them back before the rerun.
def _generator_states() -> list:
    states = [(torch.set_rng_state, torch.get_rng_state())]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.append((torch.cuda.set_rng_state_all, torch.cuda.get_rng_state_all()))
    return states


def _restore_generators(states: list | None) -> None:
    for setter, saved in states or ():
        setter(saved)


def _signature(inputs) -> tuple:
    sig = []
    for value in inputs:
        if isinstance(value, torch.Tensor):  # `is_cpu` is 3x cheaper than building `device` (NOTE [Per-call path])
            sig.append((value.dtype, value.shape, value.stride(), _CPU if value.is_cpu else value.device))
        elif isinstance(value, (int, float, bool, str, type(None))):
            sig.append((type(value), value))
        else:
            sig.append((type(value), id(value)))
    return tuple(sig)


# NOTE [Weights in the signature]
# A static program is chosen by `_signature` of all the call's inputs, and most of them are weights: the
# zoo's mlp passes 10 parameters and 1 activation, and reading dtype, sizes, strides and device of each
# (then hashing and comparing the tuple) took about 15 us of its ~100 us call outside ORT (issue 17). The
# weights are the same objects call after call, and an object keeps its metadata until something changes
# it in place, which bumps its version counter or tensor_watch.EPOCH (NOTE [Remembered tensor facts] in
# guards/codegen.py lists what does which; `requires_grad` is not part of the signature). So the compiled
# graph remembers, in a `_WeightMemo` made by the last call that read the full signature, the weight
# positions' tensors (held, so that their ids cannot be reused), their versions and the epoch (read
# before the signature: NOTE [Bumped before and after] in tensor_watch.py); while the same objects are
# passed at the same versions and the epoch has not moved, their part of the signature is what it was,
# and the program is found from the signature of the other inputs alone (`table`). Anything else (another
# object, a moved version or epoch, an inference tensor, which has no version) reads the full signature
# as before and remembers afresh. Weight positions: parameters, and tensors whose capture source is a
# module attribute (`_weight_positions`' test); the frontend's guard checks the same facts of the same
# tensors before the call, but the backend does not rely on a caller it does not know (it is also called
# directly, and by torch.compile): it proves them itself, by identity, version and epoch. Graphs that read
# storage offsets (NOTE [Storage offsets read by the graph]) are not remembered. The check that the memo is
# current (same epoch, ids and versions) is written inline in `OnnxrtCompiled.__call__`. A graph with no
# weight positions (`f(x, y)`) gets a memo too, with no weights: its table is keyed by the full signature,
# and the positions are not searched again on every call (that search, with Parameter's Python
# `__instancecheck__`, was ~20% of an `x + y` call outside ORT).
class _WeightMemo:
    __slots__ = ("held", "weights", "ids", "versions", "epoch", "others", "table")

    def __init__(self, positions: list[int], inputs, epoch: int) -> None:
        self.held = _picker(positions)
        self.weights = self.held(inputs)  # keeps the ids below from being reused
        self.ids = list(map(id, self.weights))
        self.versions = list(map(_VERSION, self.weights))
        self.epoch = epoch
        self.others = _picker([k for k in range(len(inputs)) if k not in set(positions)])
        self.table: dict = {}  # signature of the other inputs -> (full signature, program)


def _picker(positions: list[int]):
    """A function of a sequence that returns its items at `positions`, as a tuple."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        return lambda values, k=positions[0]: (values[k],)
    return lambda values: ()


_VERSION = operator.attrgetter("_version")


def _memo_positions(inputs, sources: list) -> list[int]:
    """Input positions whose tensors a `_WeightMemo` remembers: weights (parameters, module attributes)
    that have a version counter."""
    return [k for k, value in enumerate(inputs)
            if isinstance(value, torch.Tensor) and not value.is_inference() and (
                isinstance(value, torch.nn.Parameter) or (k < len(sources) and isinstance(sources[k], str)
                                                          and _ATTRIBUTE_SOURCE.match(sources[k])))]


# NOTE [Symbolic programs by exact signature]
# Choosing a symbolic program reads every input twice: its layout (symbolic.layout_signature: dtype, rank,
# device, contiguity, requires_grad, non-symbolic scalars by value) and its sizes (`bind`, generated), after
# `_has_empty` read every numel; on the zoo's mlp (12 inputs, 10 of them weights) that was ~18 us per call
# where a static program's `_signature` lookup takes ~9 us, a third of the dynamic/static latency gap on
# onnxrt (issue 13). The program chosen for a call is remembered under the call's exact signature
# (`_signature` plus requires_grad: what layout, bind and `_has_empty` read is a function of it, so the
# same signature always chooses the same program, the first of its layout whose bind accepts), and a
# later call with that signature runs it after one lookup. Bounded (`_MAX_DYNAMIC_HITS`, then cleared:
# serving loops repeat few shapes); cleared with the symbolic programs when one fails. A signature that
# no symbolic program serves (a non-contiguous or empty input, a layout whose symbolic program failed or
# that has _MAX_DYNAMIC of them) is remembered as `_PER_SIGNATURE`, so its calls go straight to the
# per-signature programs (before, each such call computed the layout and ran the binds again).
_MAX_DYNAMIC_HITS = 64
_PER_SIGNATURE = object()


def _exact_signature(inputs) -> tuple:
    sig = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            sig.append((value.dtype, value.shape, value.stride(), _CPU if value.is_cpu else value.device,
                        value.requires_grad))
        elif isinstance(value, (int, float, bool, str, type(None))):
            sig.append((type(value), value))
        else:
            sig.append((type(value), id(value)))
    return tuple(sig)


# NOTE [Storage offsets read by the graph]: a graph may read an input's storage offset (`x.storage_offset()`,
# symbolic once it changed, NOTE [Dynamic layouts]). Lowering bakes the example's in, and offsets were not part of a
# static program's signature: a program built for offset 3 was reused for offset 5 and added 3 (fuzzer
# seed 30222). Graphs that read offsets, or storage by position (as_strided: NOTE [Storage read by as_strided]
# runs it in ORT over dense inputs only; rows r = base[i] read row 0's data for `r.as_strided((2,), (1,), 3)`)
# key programs by the inputs' offsets and storage sizes too (a trailing item persist.py does not encode: not
# persisted), and are never served by a symbolic program (symbolic.reads_storage: its fakes are dense).
def _offsets(inputs) -> tuple:
    return ("storage_offsets",) + tuple((value.storage_offset(), value.untyped_storage().nbytes())
                                        if isinstance(value, torch.Tensor) else None for value in inputs)


def _eager_reason(gm: torch.fx.GraphModule) -> str | None:
    """Why `gm` runs eagerly whatever its inputs (backends/state.py), or None."""
    if state.enters_inference_mode(gm):
        return "it enters torch.inference_mode() (its outputs must be inference tensors, as in eager)"
    if state.leaves_inference_mode(gm):  # NOTE [Graphs that leave inference mode] in backends/state.py
        return "it has an inference_mode(False) block (under an outer inference_mode its values are normal tensors)"
    if aliasing.changes_metadata_in_place(gm):
        return "it changes a tensor's shape or strides in place (x.t_()), which functionalization cannot express"
    if view_writes.captured_writes_into_unfold(gm):  # NOTE [Writes through unfold], training graphs included
        return view_writes.REASON
    if state.has_dynamic_float_input(gm):
        return "a float input changes between calls (no ONNX program is built per value)"
    from ..eager_raises import batch_norm_dtypes_rejected  # NOTE [Dtypes eager's batch norm rejects]
    return symbolic.storage_read_after_a_write(gm) or batch_norm_dtypes_rejected(gm)  # NOTE [Storage read after a write]


# NOTE [Empty inputs compile per signature]
# ORT's reductions of nothing differ from eager's (mean, var of an empty dim: 0 in ORT, NaN in eager), so
# nodes that reduce an empty tensor run in torch (translate.unsupported_reason). That is decided from the
# trace's sizes, which a symbolic program does not know: one traced over a (3, 0) input returned 0 for
# `x.mean(1)` on every later empty input. Calls with an empty tensor input use the per-signature programs.
def _has_empty(inputs) -> bool:
    return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in inputs)


def _is_concrete(inputs) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    for value in inputs:
        if isinstance(value, FakeTensor) or isinstance(value, torch.SymInt):
            return False
        if isinstance(value, torch.Tensor) and (value.is_meta or any(isinstance(s, torch.SymInt) for s in value.shape)):
            return False
    return True


_ATTRIBUTE_SOURCE = re.compile(r"^[LG]\[[^\]]+\](\.\w+)+$")  # L['module'].layer.0.weight


def _weight_positions(gm: torch.fx.GraphModule, inputs, state_names: list[str]) -> tuple[set[int], set[int]]:
    """Positions, among the lowered graph's placeholders (state, then input leaves), of the tensors
    that hold weights: `gm`'s own state (named `state_names`), parameters, and inputs whose capture source
    is a module attribute (buffers such as BatchNorm statistics). See NOTE [Frozen weights]. Also those of
    them that are running statistics (NOTE [Statistics written without a bump])."""
    num_state = len(state_names)
    positions = set(range(num_state))
    statistics = {i for i, name in enumerate(state_names) if _statistics_of_a_norm(gm, name)}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    read_as_statistics = _running_statistics(gm)
    offset = num_state
    for index, value in enumerate(inputs):
        count = len(pytree.tree_leaves(value))
        placeholder = placeholders[index] if index < len(placeholders) else None
        source = placeholder.meta.get("source") if placeholder is not None else None
        is_weight = isinstance(value, torch.nn.Parameter) or (
            isinstance(value, torch.Tensor) and isinstance(source, str) and _ATTRIBUTE_SOURCE.match(source))
        if is_weight and count == 1:
            positions.add(offset)
            if placeholder in read_as_statistics:
                statistics.add(offset)
        offset += count
    return positions, statistics


# NOTE [Statistics written without a bump]: batch_norm in training mode updates its running statistics in
# place without bumping their version counters (in eager too: `native_batch_norm`'s schema does not mark the
# write). A part that froze them (an eval-mode graph, NOTE [Frozen weights] in runtime.py) checks versions,
# so it could not tell that the model trained in between (eagerly, or in a graph whose write-back bumped no
# counter) and served the statistics it froze: eval outputs 0.55 off after 3 eager training steps of a
# Conv2d + BatchNorm2d. Frozen running statistics are also compared with a copy taken when they were frozen,
# on every call (one torch.equal per statistics vector).
_BATCH_NORMS = (torch.nn.functional.batch_norm, torch.batch_norm, torch.native_batch_norm)


def _statistics_of_a_norm(gm: torch.fx.GraphModule, name: str) -> bool:
    """`name` (a path in `gm`) is the running statistics buffer of a norm module (a call_module node's)."""
    owner, _, attribute = name.rpartition(".")
    return attribute in ("running_mean", "running_var") and \
        isinstance(gm.get_submodule(owner), torch.nn.modules.batchnorm._NormBase)


def _running_statistics(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes `gm` passes to batch_norm as running statistics (NOTE [Statistics written without a bump])."""
    from torch.fx.operator_schemas import normalize_function

    found = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _BATCH_NORMS:
            bound = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
            if bound is not None:
                found.update(bound.kwargs.get(name) for name in ("running_mean", "running_var"))
    return found


# NOTE [Frozen weights of symbolic programs]: a symbolic program is lowered over fake inputs, which say
# neither which inputs are parameters nor what they hold. Its weight positions are found from the call's
# real inputs, and its sessions are made with those real tensors at the weight positions (weights keep
# their sizes: parameters stay static under dynamic=True), so the symbolic program holds the same ORT
# constants as a static one (NOTE [Frozen weights] in runtime.py: each part still checks on every call
# that the frozen positions receive the same tensors, unchanged). Before, its parts fed every weight on
# every call: 1.3x the static program's per-call time on the zoo's gpt.
# A buffer read as a module attribute is a weight, but under dynamic=True its sizes are symbols (only
# parameters stay static): frozen, its ORT initializer had the real sizes where the model declared the
# symbolic axes, and ORT refused to load the part ("Replacement tensor's dimensions do not match": HF BERT's
# position_ids / token_type_ids buffers), so the whole symbolic program gave up and every size compiled its
# own static program. Such a weight is fed on every call, as any input.
def _has_symbolic_size(value) -> bool:
    return isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in value.shape)


def _real_weights(values: list, weights: set[int], num_state: int, real_inputs: list) -> list:
    """`values` (state, then fake input leaves) with the real tensors at the input weight positions."""
    real = pytree.tree_leaves(list(real_inputs))
    values = list(values)
    for position in weights:
        if position >= num_state and position - num_state < len(real):
            values[position] = real[position - num_state]
    return values


def _device_of(inputs, state) -> torch.device:
    for value in list(inputs) + list(state):
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.device
    return torch.device("cpu")


# NOTE [One program for every size]
# A graph whose placeholders have symbolic sizes (backends/symbolic.py) is lowered once over fake inputs
# with fresh symbols; the ONNX models then have dynamic axes named after the symbols (two inputs that
# share a symbol share an axis) and symbolic int inputs become scalar model inputs, so one ORT session
# serves every size. Such programs are kept per layout (dtypes, ranks, devices, contiguity) as a list of
# (bind, Program): `bind` (the generated size check) accepts the sizes the program was traced for (sizes
# of 2 and more, relations tracing relied on). A call no dynamic program accepts builds another one over
# its own sizes (size 1 specialises there), at most `_MAX_DYNAMIC` per layout; after that, and where the
# graph cannot be served symbolically (non-contiguous inputs, symbolic floats, a device other than CPU),
# calls fall back to the per-signature static programs, with a log line saying why.
_MAX_DYNAMIC = 4


# NOTE [Restored graphs carry no symbols]: a warm process restores a frame's graph from the frame cache
# without its placeholders' fake values (frame_cache.load_graph), so `is_symbolic(gm)` was False there and
# the restored symbolic programs were never consulted: every new size translated and built an ORT program
# of its own (an f-string frame's two graphs over 4 sizes: 8 models translated in the warm process, 2 in the
# cold one). Restored symbolic programs make the graph symbolic again, their layouts telling which inputs
# are symbolic ints (`("int",)`: by type only); each program's own size check (`bind`, persisted) still
# decides every call, and a call none accepts compiles per signature as before.
class OnnxrtCompiled:
    def __init__(self, gm: torch.fx.GraphModule, example_inputs, opts: OnnxrtOptions):
        self.gm = gm
        self.opts = opts
        self.programs: dict[tuple, Program | None] = {}  # None: this signature runs eagerly
        # NOTE [One program for every size]: layout -> [(bind, Program)]
        self.dynamic_programs: dict[tuple, list] = {}
        self._reads_offsets = symbolic.reads_storage(gm)  # NOTE [Storage offsets read by the graph]
        self._symbolic = symbolic.is_symbolic(gm) and not self._reads_offsets
        self._symbolic_ints = symbolic.symbolic_int_positions(gm)
        self._static_layouts: set = set()  # layouts that compile per signature (logged once each)
        self._dynamic_hits: dict = {}  # NOTE [Symbolic programs by exact signature]
        self._joint: joint.JointGraph | None = None  # NOTE: training (backends/joint.py)
        self._weights = [t for t in list(gm.parameters()) + list(gm.buffers())]
        self._grad_inside = state.switches_grad_on(gm)  # NOTE: backends/state.py
        self._run_eagerly = state.eager_only_reason(gm) or _eager_reason(gm)  # NOTE [Calls that run as torch runs them]
        self._out_layouts = output_layouts(gm)  # NOTE [Output strides follow eager] (backends/layout.py)
        self._weight_memo: _WeightMemo | None = None  # NOTE [Weights in the signature]
        self._sources = [n.meta.get("source") for n in gm.graph.nodes if n.op == "placeholder"]
        if self._run_eagerly:
            logs.log("eager_fallback", "onnxrt: the graph runs eagerly: %s", self._run_eagerly)
        if example_inputs is not None and _is_concrete(example_inputs) and not self._run_eagerly:
            if not (self._symbolic and self._build_dynamic(list(example_inputs)) is not None):
                self.programs[self._signature(example_inputs)] = self._build(list(example_inputs))

    def _signature(self, inputs) -> tuple:
        sig = _signature(inputs)
        return sig + (_offsets(inputs),) if self._reads_offsets else sig

    @classmethod
    def restored(cls, gm: torch.fx.GraphModule, opts: OnnxrtOptions, programs: dict,
                 dynamic: dict | None = None) -> "OnnxrtCompiled":
        """A compiled graph with programs loaded by persist.py: nothing is lowered or translated."""
        compiled = cls(gm, None, opts)
        compiled.programs.update(programs)
        if compiled._reads_offsets:  # persisted before NOTE [Storage offsets read by the graph]: offset 0 baked in
            dynamic = None
        for layout, entries in (dynamic or {}).items():
            compiled.dynamic_programs.setdefault(layout, []).extend(entries)
        if compiled.dynamic_programs and not compiled._symbolic:  # NOTE [Restored graphs carry no symbols]
            compiled._symbolic = True
            compiled._symbolic_ints = frozenset(i for layout in compiled.dynamic_programs
                                                for i, key in enumerate(layout) if key == ("int",))
        return compiled

    def __call__(self, *inputs):
        if self._run_eagerly:
            return self.gm.forward(*inputs)
        if (self._grad_inside or torch._C.is_grad_enabled()) and self._needs_grad(inputs):
            return self.training_graph()(*inputs)
        if self._symbolic:  # NOTE [Symbolic programs by exact signature]
            key = _exact_signature(inputs)
            hit = self._dynamic_hits.get(key)
            if hit is not None and hit is not _PER_SIGNATURE:
                return self._run_dynamic(hit, inputs)
            if hit is None:
                program = self._choose_dynamic(inputs, key)
                if program is not None:
                    return self._run_dynamic(program, inputs)
        memo = self._weight_memo  # NOTE [Weights in the signature]; `current` inline (NOTE [Per-call path])
        if memo is not None and tensor_watch.EPOCH[0] == memo.epoch and list(map(id, held := memo.held(inputs))) \
                == memo.ids and list(map(_VERSION, held)) == memo.versions:
            others = _signature(memo.others(inputs))
            found = memo.table.get(others)
            if found is None:
                found = memo.table[others] = self._program_for(self._signature(inputs), inputs)
        else:
            found = self._program_for(self._remember_weights(inputs), inputs)
            memo = self._weight_memo
            if memo is not None:  # the other inputs' signature is their part of the full one
                memo.table[memo.others(found[0])] = found
        sig, program = found
        if program is None:
            return self.gm.forward(*inputs)
        generators = _generator_states() if program.draws else None  # NOTE [A failed run draws again]
        try:
            result = program(inputs)
            return restore_layouts(result, self._out_layouts, inputs) if self._out_layouts else result
        except Exception as exc:
            logs.log("eager_fallback", "onnxrt: a run failed (%s: %s); this signature now runs eagerly",
                     type(exc).__name__, exc)
            self.programs[sig] = None
            self._weight_memo = None  # its table may hold the program
            _restore_generators(generators)
            return self.gm.forward(*inputs)

    def _program_for(self, sig: tuple, inputs) -> tuple:
        """(sig, the program for the signature `sig` of `inputs`, built if there is none; None: eager)."""
        try:
            return sig, self.programs[sig]
        except KeyError:
            program = self.programs[sig] = self._build(list(inputs))
            return sig, program

    def _remember_weights(self, inputs) -> tuple:
        """The full signature of `inputs`; remembers their weights (NOTE [Weights in the signature])."""
        epoch = tensor_watch.EPOCH[0]  # before the metadata it vouches for
        sig = self._signature(inputs)
        memo = None
        if not self._reads_offsets:
            positions = _memo_positions(inputs, self._sources)
            if positions:
                tensor_watch.install()  # `.data` writes are counted from now on
            memo = _WeightMemo(positions, inputs, epoch)  # with no weights: a table by the full signature
        self._weight_memo = memo
        return sig

    def _choose_dynamic(self, inputs, key: tuple) -> Program | None:
        """The symbolic program for a call whose exact signature chose none yet, or None (remembered as
        `_PER_SIGNATURE`: NOTE [Symbolic programs by exact signature])."""
        if len(self._dynamic_hits) >= _MAX_DYNAMIC_HITS:
            self._dynamic_hits.clear()
        if not _has_empty(inputs):  # NOTE [Empty inputs compile per signature]
            for bind, program in self.dynamic_programs.get(symbolic.layout_signature(inputs, self._symbolic_ints), ()):
                if bind(inputs) is not None:
                    self._dynamic_hits[key] = program
                    return program
            program = self._build_dynamic(list(inputs))
            if program is not None:
                return program
        if self._symbolic:  # (a failed build may have turned symbolic programs off: nothing to remember)
            self._dynamic_hits[key] = _PER_SIGNATURE
        return None

    def _run_dynamic(self, program: Program, inputs):
        generators = _generator_states() if program.draws else None  # NOTE [A failed run draws again]
        try:
            return restore_layouts(program(inputs), self._out_layouts, inputs)
        except Exception as exc:
            logs.log("eager_fallback", "onnxrt: a run of the symbolic program failed (%s: %s); "
                     "this graph now compiles per input signature", type(exc).__name__, exc)
            _restore_generators(generators)
            self._symbolic = False
            self.dynamic_programs.clear()
            self._dynamic_hits.clear()
            return self(*inputs)

    def _build_dynamic(self, inputs: list) -> Program | None:
        """Build one program over symbolic sizes for `inputs`' layout (NOTE [One program for every size]);
        None (and a log line) where the graph is compiled per signature instead."""
        layout = symbolic.layout_signature(inputs, self._symbolic_ints)
        if layout in self._static_layouts:
            return None
        known = self.dynamic_programs.setdefault(layout, [])
        why = None
        if len(known) >= _MAX_DYNAMIC:
            why = f"{_MAX_DYNAMIC} symbolic programs for this layout already"
        elif _device_of(inputs, []).type != "cpu":
            why = "symbolic sizes are served on CPU only"
        if why is None:
            try:
                sym = symbolic.SymbolicInputs(self.gm, inputs, strided=True)  # NOTE [Strided inputs of symbolic programs]
                program = self._build(sym.fake_inputs, on_traced=sym.finish, real_inputs=inputs)
            except symbolic.NotSymbolic as exc:
                why, program = str(exc), None
            if program is None and why is None:
                why = "building the symbolic program failed (logged above)"
        if why is not None:  # this layout now compiles per signature, for good
            self._static_layouts.add(layout)
            logs.log("recompiles", "onnxrt: this graph compiles per input size for layout %s: %s", layout, why)
            return None
        program.bind_source = sym.bind_source
        known.append((sym.bind, program))
        logs.log("output_code", "onnxrt: one program for every size (symbols %s), size check:\n%s",
                 ", ".join(map(str, sym.symbols)), sym.bind_source)
        return program

    def training_graph(self) -> joint.JointGraph:
        """The forward and backward ORT programs of this graph (backends/joint.py), made on first use."""
        if self._joint is None:
            # NOTE [Flash attention in training]: torchlib's translation of this op returns its second output
            # (the logsumexp saved for the backward) with another shape than torch's ([2, 8, 32] for [2, 2, 8],
            # checked again with torch 2.13). Joints trace the op and its backward as the attention's math
            # wherever attention_training._supported allows (NOTE [Flash attention as math in training
            # graphs]); an op it declines (dropout, half precision, q/k/v of unequal batch or head sizes,
            # bool masks, symbolic sizes) runs in torch in training programs, by this fallback.
            # Weights change at every optimizer step: training programs feed them (NOTE [Frozen weights]).
            opts = dataclasses.replace(self.opts, freeze_weights=False, fallback_ops=self.opts.fallback_ops | {
                "aten::_scaled_dot_product_flash_attention_for_cpu"})
            # NOTE [Direct calls of training halves]
            from .training import PARTITION_CONFIG, TrainingHalf, decompositions, persistence
            self._joint = joint.JointGraph(
                self.gm, lambda graph, example: TrainingHalf(graph, example, opts), "onnxrt",
                decompositions=decompositions(),  # NOTE [Convolution gradients as convolutions]
                partition_config=PARTITION_CONFIG,  # NOTE [Recomputation for ORT programs]
                lstm_layers=True,  # NOTE [LSTM layers in training graphs] in backends/recurrent.py
                persistence=persistence(opts),  # NOTE [Persisted joints] in backends/joint_cache.py
                lean=True)  # NOTE [Lean joint calls] in backends/joint_function.py
        return self._joint

    def _needs_grad(self, inputs) -> bool:
        return any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs) or any(
            t.requires_grad for t in self._weights)

    def _build(self, inputs: list, on_traced=None, real_inputs: list | None = None) -> Program | None:
        """`on_traced` (symbolic programs) runs after lowering; it may raise symbolic.NotSymbolic.
        `real_inputs`: the call's values when `inputs` are fake (NOTE [Frozen weights of symbolic programs])."""
        start = time.perf_counter()
        try:
            lowered = lowering.lower(self.gm, inputs, translate.translated_op_names())
            if on_traced is not None:
                on_traced(lowered.graph_module)
            aliasing.alias_mutated_inputs(lowered.graph_module)  # views of mutated inputs stay views
            semantics.match_eager(lowered.graph_module)  # NOTE [Eager semantics in ONNX]
            translate.insert_type_promotion(lowered.graph_module)
        except symbolic.NotSymbolic:
            raise
        except Exception as exc:
            if on_traced is not None:
                logs.log("recompiles", "onnxrt: could not trace the graph with symbolic sizes (%s: %s)",
                         type(exc).__name__, exc)
                return None
            logs.log("eager_fallback", "onnxrt: could not trace the graph to aten (%s: %s); it runs eagerly",
                     type(exc).__name__, exc)
            return None
        device = _device_of(inputs, lowered.state)
        values = [*lowered.state, *pytree.tree_leaves(list(inputs))]
        weights, statistics = set(), set()
        if self.opts.freeze_weights:
            weights, statistics = _weight_positions(self.gm, real_inputs or inputs, lowered.state_names)
            if real_inputs is not None:
                weights = {p for p in weights if not _has_symbolic_size(values[p])}
                statistics &= weights
                values = _real_weights(values, weights, len(lowered.state), real_inputs)
        # node name -> why it runs in torch (logged on eager_fallback); NOTE [Tensors on another device]
        blocked: dict[str, str] = state.off_device_nodes(lowered.graph_module, device)
        for _ in range(_MAX_ATTEMPTS):
            try:
                parted = partition.partition(lowered.graph_module, blocked, self.opts.fallback_ops)
                self._attach_sessions(parted, device, values, weights, statistics)
            except translate.NodeTranslationError as exc:
                blocked[exc.node_name] = f"its translation to ONNX failed: {_first_line(exc)}"
                logs.log("output_code", "onnxrt: %s; retrying with it in eager torch", exc)
                continue
            except runtime.SessionLoadError as exc:
                if not exc.node_names:
                    return self._give_up(f"ONNX Runtime could not load a part: {exc}")
                blocked.update(dict.fromkeys(exc.node_names, f"ONNX Runtime could not load its part: {_first_line(exc)}"))
                logs.log("output_code", "onnxrt: ORT rejected %s (%s); retrying", exc.node_names, exc)
                continue
            except Exception as exc:
                return self._give_up(f"{type(exc).__name__}: {exc}")
            program = self._program(parted, lowered, time.perf_counter() - start)
            _log_program(program)
            return program
        return self._give_up(f"still failing after {_MAX_ATTEMPTS} attempts")

    def _attach_sessions(self, parted: partition.Partitioned, device: torch.device, values: list,
                         weights: set[int], statistics: set[int]) -> None:
        """One OrtPart per fused part; `values[k]` is the example value of the k-th top placeholder,
        `weights` the placeholder positions that hold weights (NOTE [Frozen weights]), `statistics` those of
        them that are running statistics (NOTE [Statistics written without a bump])."""
        top = parted.graph_module
        position = {n: k for k, n in enumerate(n for n in top.graph.nodes if n.op == "placeholder")}
        env = {n: values[k] for n, k in position.items()}
        for node in list(top.graph.nodes):
            if node.op != "call_module" or node.target not in parted.parts:
                continue
            sub = parted.parts[node.target]
            data = runtime.model_bytes(sub, self.opts, node.target)
            runtime.drop_unread_args(data, node, sub, parted.eager_reasons)  # NOTE [Shapes from the graph's inputs]
            args = [env.get(a) for a in node.args]
            frozen = tuple(i for i, a in enumerate(node.args)
                           if position.get(a) in weights and isinstance(args[i], torch.Tensor))
            compared = tuple(i for i in frozen if position[node.args[i]] in statistics)
            part = runtime.OrtPart.for_graph(data, sub, device, self.opts, args, frozen, compared)
            setattr(top, node.target, part)
        top.recompile()

    def _program(self, parted, lowered, seconds: float) -> Program:
        ort_nodes = sum(
            1 for sub in parted.parts.values() for n in sub.graph.nodes if n.op == "call_function")
        return Program(parted.graph_module, lowered.state, lowered.state_names, lowered.out_spec,
                       len(parted.parts), ort_nodes, parted.eager_reasons, seconds,
                       draws=any(lowering.draws_random(n.target) for n in parted.graph_module.graph.nodes))

    def _give_up(self, why: str) -> None:
        logs.log("eager_fallback", "onnxrt: this graph runs eagerly: %s", why)
        return None

    def summary(self) -> list[dict]:
        """Per signature: parts, node counts, eager nodes with reasons (for tests and explain); symbolic
        programs (NOTE [One program for every size]) have `symbolic: True`, their layout as `signature`
        and their size check as `bind`."""
        rows = [
            {"signature": sig, "eager_graph": p is None, "parts": p.num_parts if p else 0,
             "ort_nodes": p.ort_nodes if p else 0, "eager_nodes": dict(p.eager_nodes) if p else {},
             "build_seconds": p.build_seconds if p else 0.0, "symbolic": False}
            for sig, p in self.programs.items()
        ]
        for layout, programs in self.dynamic_programs.items():
            rows += [{"signature": layout, "eager_graph": False, "parts": p.num_parts, "ort_nodes": p.ort_nodes,
                      "eager_nodes": dict(p.eager_nodes), "build_seconds": p.build_seconds, "symbolic": True,
                      "bind": p.bind_source} for _, p in programs]
        return rows

    def session_count(self) -> int:
        """ONNX Runtime parts (one session each) over every program built or loaded."""
        programs = [p for p in self.programs.values() if p is not None]
        programs += [p for entries in self.dynamic_programs.values() for _, p in entries]
        return sum(p.num_parts for p in programs)


def _log_program(program: Program) -> None:
    for name, reason in program.eager_nodes.items():
        if reason not in (partition.FREE_OP_REASON, partition.SIZE_REASON, partition.MOVEMENT_REASON,
                          translate.WRITE_BACK_REASON):  # NOTE [Write-backs of mutated inputs]
            logs.log("eager_fallback", "onnxrt: node %s runs in eager torch: %s", name, reason)
    if not logs.enabled("output_code"):
        return
    logs.log("output_code", "onnxrt: %d ORT part(s) with %d aten node(s), %d node(s) in eager torch, "
             "built in %.3f s", program.num_parts, program.ort_nodes, len(program.eager_nodes),
             program.build_seconds)
    for name, reason in program.eager_nodes.items():
        logs.log("output_code", "onnxrt: eager %s: %s", name, reason)
    logs.log("output_code", "onnxrt: top graph:\n%s", program.graph_module.code)


def _first_line(exc: Exception, limit: int = 300) -> str:
    """An error as one short line for the eager_fallback log (torchlib and ORT errors run to many lines)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[:limit] + "..."
