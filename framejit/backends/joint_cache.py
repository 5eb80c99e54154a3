"""Persisted joints: a warm process's first training call runs no AOT trace, no partition, no backend compile.

A `JointGraph` (joint.py) builds, per input signature, a forward and a backward graph with torch's AOT
autograd, compiles each with the backend and lets AOT autograd glue them into one autograd.Function. This
module saves what that took to the persistent store (cache/) and rebuilds it in another process:

- `joint_key(...)`: the store key of one joint, or None when it cannot be persisted soundly (NOTE
  [What a joint depends on]);
- `Recorder`: while the joint is built, collects AOT autograd's runtime metadata (`_cache_autograd_info`'s
  arguments: ViewAndMutationMeta, the dispatch wrappers, saved-tensor and symint counts, inputs to
  detach); `save(...)` writes the two halves' graphs, their backend artifacts and that metadata once the
  backward has run (the halves compile their programs on first use);
- `load(...)`: the boxed callable AOT autograd would have returned, rebuilt by torch's own cache-hit
  path (`GenericAOTAutogradResult._apply_runtime_wrappers`: the same wrappers AOTAutogradCache applies
  on a hit) around the loaded halves.

NOTE [Persisted joints]
Rebuilding the runtime wrapper from its parts is what torch's AOTAutogradCache does for inductor; framejit
uses the same code path with its own backend halves, so the aliasing, mutation write-back, detach and
saved-tensor logic is torch's, not a copy. Joints that path does not cover are not persisted (logged on
`cache`): tensor subclasses, effect tokens, graph-safe RNG state, symbolic sizes saved for the backward
sizes saved for the backward), BackwardState inputs, graphs with module state (parameters, buffers, submodules), non-tensor
inputs. Halves' graphs are saved node by node (small lifted tensor constants by value) with aten operators by name (OpOverloads do not pickle).
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import pickle
import re
import threading

import torch
import torch.fx

from .. import config, logs

FORMAT = 3  # 2: custom Function calls in the key (NOTE [Persisted custom Function calls]); 3: lifted tensor
# constants by value (NOTE [Lifted tensor constants])
_AOT_LOCK = threading.RLock()  # a joint built while another is (nested) records its own


class NotPersisted(Exception):
    """This joint is kept in memory only (the message says why)."""


# ---- graphs --------------------------------------------------------------------------------------------
def _op_by_name(qualified: str, overload: str):
    namespace, name = qualified.split("::", 1)
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet if overload is None else getattr(packet, overload)


class _GraphPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, torch._ops.OpOverload):
            return _op_by_name, (obj._schema.name, obj._overloadname)
        if isinstance(obj, torch._ops.OpOverloadPacket):
            return _op_by_name, (obj._qualified_op_name, None)
        describe = getattr(obj, "persisted_data", None)
        if describe is not None and callable(describe):
            # a custom Function call of the graph (capture's FunctionCall; NOTE [Persisted custom Function calls]
            # in capture/function_regions.py): its class, plan, region and backward digest are part of the key
            return _key_only, (type(obj).__qualname__, describe())
        return NotImplemented


def _key_only(*data):
    raise NotPersisted("a custom Function call is part of a joint's key, never of a persisted half")


def _dumps(value) -> bytes:
    import io
    buffer = io.BytesIO()
    _GraphPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


class _Ref:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self):
        return _Ref, (self.index,)


# NOTE [Lifted tensor constants]: a tensor the traced code makes from constants (DynamicCache's
# `torch.tensor([])`, made by every HF model with a cache) is lifted by make_fx into an attribute of the
# flat graph (`_tensor_constant0`, read by get_attr), and AOT autograd keeps it so in the halves. A small
# plain CPU tensor of a real dtype is persisted by value with the graph (dtype, shape, items: exact), so it
# is part of the joint's key and set again on the loaded half; any other attribute is module state, not
# persisted.
_CONSTANT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool)


def _constant(gm: torch.fx.GraphModule, node: torch.fx.Node) -> tuple:
    lifted = node.op == "get_attr" and re.fullmatch(r"_tensor_constant\d+", node.target) is not None
    value = getattr(gm, node.target, None) if lifted else None
    written = any(getattr(getattr(u.target, "_schema", None), "is_mutable", False) for u in node.users)
    if (type(value) is not torch.Tensor or value.requires_grad or value.device.type != "cpu" or written
            or value.dtype not in _CONSTANT_DTYPES or value.numel() > 64 or value._base is not None
            or not value.is_contiguous() or value.storage_offset() != 0):
        raise NotPersisted(f"the graph reads module state ({node.op} {node.target})")
    return (str(value.dtype).split(".")[-1], tuple(value.shape), value.tolist())


def dump_graph(gm: torch.fx.GraphModule) -> bytes:
    """`gm`'s nodes as (op, name, target, args, kwargs, effect, constant); raises NotPersisted."""
    index: dict = {}
    nodes = []
    for node in gm.graph.nodes:
        constant = _constant(gm, node) if node.op in ("get_attr", "call_module") else None
        index[node] = len(nodes)
        args = torch.fx.node.map_arg(node.args, lambda n: _Ref(index[n]))
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: _Ref(index[n]))
        nodes.append((node.op, node.name, node.target, args, kwargs, bool(node.meta.get("effect")), constant))
    try:
        return _dumps(nodes)
    except Exception as e:
        raise NotPersisted(f"the graph cannot be pickled: {type(e).__name__}: {e}") from None


def load_graph(data: bytes) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    made: list = []
    for op, name, target, args, kwargs, effect, constant in pickle.loads(data):
        if constant is not None:  # NOTE [Lifted tensor constants]
            dtype, shape, items = constant
            setattr(root, target, torch.tensor(items, dtype=getattr(torch, dtype)).reshape(shape))
        args, kwargs = torch.fx.node.map_aggregate((args, kwargs), lambda a: made[a.index] if isinstance(a, _Ref) else a)
        node = graph.output(args[0]) if op == "output" else graph.create_node(op, target, args, kwargs, name=name)
        if effect:
            node.meta["effect"] = True
        made.append(node)
    return torch.fx.GraphModule(root, graph)


# ---- the key -------------------------------------------------------------------------------------------
# NOTE [What a joint depends on]
# AOT autograd traces the graph under the call's global state with fakes of the call's inputs, so the joint
# (which inputs get gradients, what is saved, how outputs alias inputs) depends on: the graph itself (its
# nodes, targets by reference); each input's type, dtype, shape, strides, storage offset, device, layout,
# requires_grad, leafness, conj/neg bits, and which inputs are the same tensor or share a storage (AOT
# dedupes and builds synthetic bases from that); grad mode, autocast (enabled and dtype, CPU and CUDA),
# deterministic algorithms, the default dtype and torch._functorch's config; the backend's decompositions,
# partition config and revision (the `version` a backend gives), and (through cache_key) framejit's source,
# Python and torch versions. All of it is in the key: a change is a miss, never a wrong joint.
def joint_key(gm: torch.fx.GraphModule, args, version: str, decompositions: dict | None,
              partition_config: dict | None, lstm_layers: bool) -> str:
    """The store key of `gm`'s joint for a call with `args`; raises NotPersisted."""
    from ..cache import cache_key

    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()) or any(True for _ in gm.children()):
        raise NotPersisted("the graph holds module state")
    inputs, storages, seen = [], {}, {}
    for k, value in enumerate(args):
        if not isinstance(value, torch.Tensor) or type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise NotPersisted(f"input {k} is a {type(value).__name__}")
        if value.layout is not torch.strided:
            raise NotPersisted(f"input {k} has layout {value.layout}")
        storage = value.untyped_storage().data_ptr() if value.numel() else ("empty", k)
        inputs.append((type(value).__name__, str(value.dtype), tuple(value.shape), tuple(value.stride()),
                       value.storage_offset(), str(value.device), value.requires_grad, value.is_leaf,
                       value.is_conj(), value.is_neg(), value.is_inference(), seen.setdefault(id(value), k),
                       storages.setdefault(storage, k)))
    state = (torch._C.is_grad_enabled(), torch._C.is_inference_mode_enabled(),
             [(d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d))) for d in ("cpu", "cuda")],
             torch.is_autocast_cache_enabled(), torch.are_deterministic_algorithms_enabled(),
             str(torch._C.get_default_dtype()), sorted((k, repr(v)) for k, v in torch._functorch.config.get_config_copy().items()))
    graph = hashlib.sha256(dump_graph(gm)).hexdigest()
    decomposed = sorted(str(op) for op in (decompositions or {}))
    return cache_key(kind="joint", format=FORMAT, backend=version, graph=graph, inputs=repr(inputs),
                     state=repr(state), decompositions=repr(decomposed),
                     partition=repr(sorted((partition_config or {}).items())), lstm_layers=lstm_layers)


# ---- recording what AOT autograd made ------------------------------------------------------------------
class Recorder:
    """Collects AOT autograd's runtime metadata and the compiled halves while one joint is built."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.aot: dict | None = None
        self.halves: dict[str, tuple] = {}  # kind -> (graph module, backend's compiled object)

    @contextlib.contextmanager
    def recording(self):
        from torch._functorch._aot_autograd import graph_compile

        original = graph_compile._cache_autograd_info
        parameters = inspect.signature(original).parameters

        def record(*args, **kwargs):
            result = original(*args, **kwargs)  # makes the metadata runtime-safe (picklable)
            try:
                self.aot = dict(inspect.signature(original).bind(*args, **kwargs).arguments)
            except TypeError:
                self.aot = None
            return result

        with _AOT_LOCK:
            graph_compile._cache_autograd_info = record if "fw_metadata" in parameters else original
            try:
                yield self
            finally:
                graph_compile._cache_autograd_info = original

    def metadata(self) -> bytes:
        """AOT autograd's runtime metadata, pickled; raises NotPersisted for joints its cache path does not cover."""
        aot = self.aot
        if aot is None or "backward" not in self.halves:
            raise NotPersisted("AOT autograd's metadata or the backward half was not seen")
        if aot["num_symints_saved_for_bw"]:
            raise NotPersisted("the forward saves symbolic sizes for the backward")
        meta = aot["fw_metadata"]
        from torch._functorch._aot_autograd.schemas import SubclassCreationMeta
        subclass_metas = [*getattr(meta, "subclass_inp_meta", ()), *getattr(meta, "subclass_fw_graph_out_meta", ()),
                          *getattr(meta, "subclass_tangent_meta", ())]
        if aot.get("maybe_subclass_meta") is not None or any(isinstance(m, SubclassCreationMeta) for m in subclass_metas):
            raise NotPersisted("tensor subclasses")
        if getattr(meta, "tokens", None) or getattr(meta, "num_graphsafe_rng_states", 0):
            raise NotPersisted("effect tokens or graph-safe RNG state")
        from torch.fx.experimental._backward_state import BackwardState
        if any(isinstance(a, BackwardState) for a in aot["flat_args"]):
            raise NotPersisted("a BackwardState input")
        try:
            return pickle.dumps({"fw_metadata": meta, "wrappers": aot["wrappers"],
                                 "num_fw_outs_saved_for_bw": aot["num_fw_outs_saved_for_bw"],
                                 "indices_of_inps_to_detach": list(aot["_indices_of_inps_to_detach"]),
                                 "num_symints_saved_for_bw": aot["num_symints_saved_for_bw"]})
        except Exception as e:
            raise NotPersisted(f"AOT autograd's metadata cannot be pickled: {type(e).__name__}: {e}") from None


def save(recorder: Recorder, save_half, backend: str) -> bool:
    """Store the joint `recorder` saw under its key (after its backward ran once); whether it was stored."""
    store = _store()
    if store is None:
        return False
    try:
        files = {"aot": recorder.metadata()}
        for kind in ("forward", "backward"):
            gm, compiled = recorder.halves[kind]
            artifact = save_half(compiled)
            if artifact is None:
                raise NotPersisted(f"the backend cannot save the {kind} half")
            files[kind + ".graph"], files[kind + ".artifact"] = dump_graph(gm), artifact
    except (NotPersisted, KeyError) as e:
        logs.log("cache", "joint (%s) kept in memory only: %s", backend, e)
        return False
    ok = store.put(recorder.key, files, {"backend": backend, "kind": "joint"})
    logs.log("cache", "%s joint (%s) forward and backward", "stored" if ok else "could not store", backend)
    return ok


def lookup(key: str):
    store = _store()
    entry = store.get(key) if store is not None else None
    return None if entry is None else entry.files


def load(files: dict, flat_gm: torch.fx.GraphModule, args: list, decompositions, load_half, wrap):
    """The callable AOT autograd returned for this joint, from its persisted parts; raises on any problem.
    `load_half(artifact, gm)` loads a half; `wrap(kind, gm, compiled)` makes what AOT calls (joint._Counted)."""
    from torch._functorch._aot_autograd.aot_autograd_result import GenericAOTAutogradResult
    from torch._functorch.aot_autograd import prepare_aot_module_simplified

    aot = pickle.loads(files["aot"])
    halves = {}
    for kind in ("forward", "backward"):
        gm = load_graph(files[kind + ".graph"])
        halves[kind] = wrap(kind, gm, load_half(files[kind + ".artifact"], gm))
    from .joint import keeps_input_mutations  # NOTE [Writes under no_grad kept in the forward graph]
    prepared = prepare_aot_module_simplified(flat_gm, args, None, decompositions, keeps_input_mutations(flat_gm),
                                             False, flatten=False)
    params_buffers, aot_config = prepared[1], prepared[6]
    result = GenericAOTAutogradResult(
        compiled_fw=None, compiled_bw=_Backward(aot["num_symints_saved_for_bw"]), aot_joint_graph_str=None,
        aot_forward_graph_str=None, aot_backward_graph_str=None, min_cut_info_str=None,
        runtime_metadata=aot["fw_metadata"], dispatch_wrappers=aot["wrappers"], maybe_subclass_meta=None,
        num_fw_outs_saved_for_bw=aot["num_fw_outs_saved_for_bw"],
        indices_of_inps_to_detach=aot["indices_of_inps_to_detach"], forward_time_taken_ns=0,
        backward_time_taken_ns=0, sanitized_aot_config=None, guards_expr=None, serialized_bw_module=None)
    compiled_fn = result._apply_runtime_wrappers(halves["forward"], halves["backward"], True, aot_config)
    from .joint import _runtime_flags
    flags = _runtime_flags()  # what _apply_runtime_wrappers decided just now

    def forward(*call_args):
        return compiled_fn([*params_buffers, *call_args])
    # NOTE [Lean joint calls] in joint_function.py: the same halves, metadata and weights, once the backward ran
    forward.lean_parts = lambda: (halves["forward"], halves["backward"], aot, list(params_buffers), flags)
    forward.boxed = (compiled_fn, list(params_buffers), aot)  # NOTE [Leaf gradients in eager's order]
    return forward


class _Backward:
    """What `_apply_runtime_wrappers` reads of a cached backward."""

    backward_state_indices: list = []

    def __init__(self, num_symints: int) -> None:
        self.num_symints_saved_for_bw_ = num_symints
        self.backward_state_indices = []


def _store():
    if not config.cache_enabled:
        return None
    from ..cache import default_store
    return default_store()
