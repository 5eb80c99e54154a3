"""ONNX Runtime parts: model bytes (through the persistent cache) -> InferenceSession -> OrtPart module.

`OrtPart` replaces one fused `ort_<i>` submodule of the partitioned graph. It is built once per graph
and input signature and reused for every call with that signature.

Main types and functions:
- `model_bytes(sub, opts) -> bytes`: the ONNX model of a partition, from the cache when present
  (the cacheable artifact is exactly these bytes: no weights, see NOTE [Weights are inputs]).
- `make_session(data, opts, device, sub=None, frozen=None, frozen_model=None)`: an InferenceSession; raises
  `SessionLoadError` naming the FX nodes of `sub` ORT rejected (parsed from ORT's message, using
  translate's node-naming invariant). `frozen` maps model input names to weight tensors that the
  session treats as constants (NOTE [Frozen weights]); `frozen_model` is then `freeze_model(data, frozen)`
  (NOTE [Frozen models are cached]).
- `OrtPart`: feeds torch tensors to the session and returns torch tensors; see NOTE [Zero-copy I/O].
"""
from __future__ import annotations

import collections
import operator
import re
import weakref

import numpy as np
import torch
import torch.fx

from ... import logs
from .options import OnnxrtOptions, providers_for, session_options
from . import translate, watch

# NOTE [Zero-copy I/O]
# On CPU, a part hands its inputs to ORT as one OrtValueVector over the tensors' own memory
# (`push_back_batch`: data pointers, no copy; ORT keeps the tensors alive while it uses them), runs
# `run_with_ortvaluevector`, and hands every output to torch through DLPack in one call (`to_dlpacks`:
# the tensor owns ORT's buffer, no copy) -- the path training parts took first (NOTE [OrtValue vectors in
# training parts] in training.py). Measured on inference parts in one process, interleaved, loaded (1
# thread, thread CPU time, medians of 15 rounds): Linear+ReLU x4 on 8x64, whole compiled call 219 -> 191
# us; (a + b).relu() on 4 floats 96 -> 76 us (the machine ran ~5x slower than quiet; the saving is the
# dict of `array_over` arrays and one `torch.from_numpy` per output). A call with an input that is not a
# non-empty tensor of a dtype numpy knows (a symbolic int, an empty tensor) takes the older path:
# `session.run` with numpy arrays over the tensors (`array_over`) and `torch.from_numpy` on the outputs.
# Non-contiguous inputs are made contiguous first (the only copy). On CUDA, inputs and preallocated
# outputs are bound by data pointer with io_binding (nothing leaves the device).

_NUMPY_DTYPES = {
    torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_,
}


# NOTE [Frozen weights]
# The model bytes take weights as inputs (NOTE [Weights are inputs]), but ORT optimises a model far
# better when weights are constants: Transposes and BatchNorms fold into Gemm/Conv, Conv switches to
# its NCHWc kernels and MLAS prepacks Gemm weights. Measured on the zoo's bench sizes (2 threads): cnn
# 22.3 -> 13.8 ms per call, mlp 0.53 -> 0.48 ms. So at session creation the inputs that hold weights
# (compiler.py decides which: parameters, buffers, module attributes) become initializers with
# external data, handed to ORT as OrtValues over the live tensors (`add_external_initializers`;
# the model bytes, the cacheable artifact, are unchanged). ORT may copy or repack them, so the part
# checks on every call that each frozen position still receives the same tensor object at the same
# `_version`, and that no `.data` of a frozen tensor was used since (watch.py, NOTE [Writes through
# .data]): in-place updates (optimizer steps, load_state_dict, `with no_grad(): w.mul_(2)`, copy_),
# assignments of new tensors and writes through `w.data` make the part rebuild its session from the
# new values. After `_MAX_REFREEZE` rebuilds the part stops freezing and feeds every input (a
# "weight" that changes every call). Freezing is on by default for inference programs; training
# programs (backends/joint.py) never freeze (compiler.py). Not seen: see watch.py.
_MAX_REFREEZE = 2
_MAX_ALTERNATES = 2  # other frozen sessions a part keeps (NOTE [A session per set of weights])


# NOTE [Weights whose storage is held elsewhere are fed]
# A frozen weight is trusted while its object, `_version` and `.data` use count stay (NOTE [Frozen
# weights]). A tensor over the same storage with a version counter of its own defeats that: `d = w.data`
# (or a NumPy array over `w`) taken before the weight was frozen and
# written later (`d.mul_(0.5)`) changes the weight's memory with no bump anywhere, and the session served
# the old values. Such a holder may be anywhere, but it holds the StorageImpl: when the session is made,
# a storage held by anything but the weight's own TensorImpl, the query's storage object and the arrays of
# sessions (a use count above 2 + `_SESSION_HOLDS`: another part may freeze the same weight; the part drops
# its own old session first) is fed on every call (zero-copy, NOTE [Zero-copy I/O]) instead of frozen, for
# the part's life. Views and `detach()` of the weight also hold its storage and would be safe (they share
# its version counter), but cannot be told apart: their weights are fed too (ORT's constant folding is
# lost, never a value). `torch.from_dlpack(w)` makes a StorageImpl of its own over w's memory and holds
# w's TensorImpl instead: a TensorImpl use count above 1 (2 for a leaf that requires grad, whose
# AccumulateGrad node may hold it; such a tensor cannot be exported without `detach()`, a new TensorImpl
# over the storage) is a holder too.
# Holders made after the session: views and `detach()` bump the shared counter, `.data` is counted, and
# the part compares both use counts with those it saw after making its session on every call (NOTE
# [Holders appearing after the freeze]); a NumPy array counts a use when made (NOTE [NumPy arrays count a
# use] in tensor_watch.py; so do `set_`, DLPack exports and writes through `untyped_storage()`: NOTE [Storage
# writes count a use]). Not seen (watch.py): a capsule from `torch.utils.dlpack.to_dlpack`, and raw pointers
# (ctypes).
def _held_elsewhere(tensor: torch.Tensor) -> bool:
    try:
        if tensor._use_count() > 1 + (tensor.is_leaf and tensor.requires_grad):
            return True  # a DLPack capsule, or a tensor made from one, holds the TensorImpl itself
        key = tensor.untyped_storage()._cdata
        return torch._C._storage_Use_Count(key) > 2 + _SESSION_HOLDS[key]
    except Exception:  # no storage or no such function: trust the version as before
        return False


# NOTE [ORT optimizers we turn off]
# SkipLayerNormFusion turns Add + LayerNormalization into com.microsoft SkipLayerNormalization, whose CPU
# kernel was 2.7x slower than the two ops it replaces (1024x256 float32, 1 thread, ORT 1.32: 1443 us vs
# 544 us; torch's add + layer_norm: 419 us); the zoo's bert spent 16% of its ORT time in it.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


class SessionLoadError(RuntimeError):
    def __init__(self, message: str, node_names: list[str]):
        super().__init__(message)
        self.node_names = node_names


def _meta_str(sub: torch.fx.GraphModule) -> str:
    parts = []
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            val = node.meta["val"]
            if not isinstance(val, torch.Tensor):  # a symbolic int input (NOTE [One program for every size])
                parts.append(f"{node.name}:{type(val).__name__}")
                continue
            parts.append(f"{node.name}:{val.dtype}{list(val.shape)}{list(val.stride())}:{val.device.type}")
    return ";".join(parts)


def _cache_key_and_store(sub: torch.fx.GraphModule, opts: OnnxrtOptions):
    try:
        from framejit.cache import cache_key, default_store
    except ImportError:  # the persistent cache is optional
        return None, None
    from ..registry import entry_for
    from .compiler import REVISION

    store = default_store()
    if store is None:
        return None, None
    key = cache_key(kind="onnx", graph=sub.code, inputs=_meta_str(sub),
                    backend=f"{entry_for('onnxrt').version_key()};torch={torch.__version__};rev={REVISION}",
                    options=opts.cache_repr())
    return key, store


def model_bytes(sub: torch.fx.GraphModule, opts: OnnxrtOptions, label: str) -> bytes:
    """The partition's ONNX model, read from or written to the persistent cache when it is enabled."""
    key, store = _cache_key_and_store(sub, opts)
    if store is not None:
        entry = store.get(key)
        if entry is not None and "model.onnx" in entry.files:
            logs.log("cache", "onnxrt: hit for %s (%s)", label, key[:16])
            return entry.files["model.onnx"]
    data = translate.to_onnx_bytes(sub, opts.opset)
    if store is not None:
        try:
            stored = store.put(key, files={"model.onnx": data}, meta={"backend": "onnxrt", "part": label})
        except Exception as exc:  # a cache that cannot write is not an error of the user's program
            logs.log("cache", "onnxrt: could not store %s: %s", label, exc)
        else:
            if stored:
                logs.log("cache", "onnxrt: stored %s (%s, %d bytes)", label, key[:16], len(data))
            else:  # the store logged why (read-only directory, entry too large, ...)
                logs.log("cache", "onnxrt: %s was not stored (%s)", label, key[:16])
    return data


_NODE_NAME = re.compile(r"node_([A-Za-z0-9_]+?)__\d+")


# NOTE [Frozen models are cached]
# Turning the frozen inputs into external initializers rewrites the model protobuf, which needs the `onnx`
# package (0.6-0.7 s to import: it loads ml_dtypes), while running a model needs only onnxruntime. The
# rewritten bytes depend only on the model and the frozen names, so a part keeps them (`frozen_model`) and
# onnxrt/persist.py saves them beside the model: a warm process hands them to ORT as they are and never
# imports `onnx` (tests/backends/test_onnxrt_warm_imports.py). The weights themselves are still fed at
# session creation from the live tensors (`add_external_initializers`), never stored.
def freeze_model(data: bytes, names) -> bytes:
    """`data` with the inputs named in `names` turned into external initializers (fed at session creation)."""
    import onnx

    names = set(names)
    model = onnx.load_from_string(data)
    kept = [i for i in model.graph.input if i.name not in names]
    for value in model.graph.input:
        if value.name in names:
            init = model.graph.initializer.add()
            init.name = value.name
            init.data_type = value.type.tensor_type.elem_type
            init.dims.extend(d.dim_value for d in value.type.tensor_type.shape.dim)
            init.data_location = onnx.TensorProto.EXTERNAL
            entry = init.external_data.add()
            entry.key, entry.value = "location", "framejit-frozen-weight"
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model.SerializeToString()


# NOTE [Arrays over tensors leave storages resizable]
# `Tensor.numpy()` marks the tensor's storage as not resizable for good (the array would dangle if it
# moved), so feeding ORT `x.numpy()` left every tensor an onnxrt program read unresizable afterwards:
# `x.resize_(n)` on an input the program had read raised "Trying to resize storage that is not resizable"
# where eager does not. ORT is handed a numpy array over the same memory made from `__array_interface__`
# instead (no copy; the array keeps the tensor alive through its base): about 1 us more per fed tensor than
# `.numpy()`, and kept per position for parameters (NOTE [Leaf views]). Frozen weights (NOTE [Frozen
# weights]) are handed over the same way: FSDP2's `fully_shard` frees the unsharded parameters' storages
# after each forward and backward (`untyped_storage().resize_(0)`) and allocates them again for the next
# all-gather, which raised "Trying to resize storage that is not resizable" when the session had pinned
# them with `.numpy()`. The session may then hold the address of freed memory, so a part checks on every
# call, with the tensor and its version, that each frozen tensor's data pointer is the one the session
# was made with (a changed pointer rebuilds the session; a storage given back at the same address was
# written again, which bumps the version) and never runs the old session on moved memory. Outputs are
# still `torch.from_numpy` of ORT's buffers: growing a returned tensor with `resize_` raises where eager's
# would grow (a tensor over memory torch did not allocate cannot be resized).
# NOTE [Empty outputs keep eager's strides]
# An empty tensor ORT hands back (DLPack or numpy) has all-zero strides: `x + 1` on a (0,) input gave
# stride (0,), `torch.zeros(0, 3)` (0, 0), where eager's are the contiguous (1,) and (3, 1) (red team 15;
# `.stride()` and anything computed from it differ). Sizes 0 are static in the frontend (NOTE [Layouts
# read from hints] in layout.py), so the outputs that are empty are known when the part is made: only
# those are replaced, by a fresh contiguous empty tensor (no data to copy); the other outputs pay nothing.
def _with_contiguous_strides(results: list, positions: list) -> list:
    results = list(results)
    for k in positions:
        t = results[k]
        strides, step = [], 1
        for size in reversed(t.shape):
            strides.append(step)
            step *= max(size, 1)
        if t.stride() != tuple(reversed(strides)):
            results[k] = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return results


class _Memory:
    """A tensor's memory as numpy sees it (NOTE [Arrays over tensors leave storages resizable])."""
    __slots__ = ("tensor", "__array_interface__")


_TYPESTRS = {dtype: np.dtype(np_dtype).str for dtype, np_dtype in _NUMPY_DTYPES.items()}


def array_over(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over a contiguous CPU tensor's memory that leaves its storage resizable."""
    typestr = _TYPESTRS.get(tensor.dtype)
    if typestr is None:  # a dtype ORT parts are not given (complex): numpy's own conversion
        return tensor.numpy()
    memory = _Memory()
    memory.tensor = tensor
    memory.__array_interface__ = {"data": (tensor.data_ptr(), False), "shape": tuple(tensor.shape),
                                  "typestr": typestr, "version": 3}
    return np.asarray(memory)


_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr
_DTYPE = operator.attrgetter("dtype")
_SHAPE = operator.attrgetter("shape")
_IS_CONTIGUOUS = torch.Tensor.is_contiguous
_FROM_DLPACK = torch._C._from_dlpack
_ORT_VALUE_VECTOR = None  # onnxruntime's OrtValueVector, imported with the first vector run


# NOTE [Holders appearing after the freeze]: `h.set_(w)`, `a = w.detach().numpy()`, `torch.frombuffer(a)`,
# `torch.from_dlpack(w.detach())` made after the session was made hold w's StorageImpl (or TensorImpl) with
# a version counter of their own; writes through them changed w's memory with no bump and the session
# served the old weights (framejit onnxrt before: the unchanged model's outputs). The part records both use
# counts of every frozen weight once its session holds it (`_holder_counts`) and compares them on every
# call (C loops, NOTE [Per-call path]); a change is a new holder (refreeze: `_make_session` then sees it
# and feeds the weight, NOTE [Weights whose storage is held elsewhere are fed]) unless `_held_elsewhere`
# finds only sessions' arrays over it (another part froze the same weight): then the counts are taken anew.
_STORAGE_USES = torch._C._storage_Use_Count
_IMPL_USES = torch.Tensor._use_count


def _holder_counts(tensors: list) -> tuple:
    """(storage keys, their use counts, the tensors' own use counts) of the frozen `tensors`."""
    try:
        keys = [t.untyped_storage()._cdata for t in tensors]
        return keys, list(map(_STORAGE_USES, keys)), list(map(_IMPL_USES, tensors))
    except Exception:  # no storage or no such function: trust the version as before
        return None


def _frozen_check(frozen: list) -> tuple:
    """(a getter of the frozen positions' arguments as a tuple, their ids, versions and data pointers)."""
    positions = [position for position, *_ in frozen]
    getter = operator.itemgetter(*positions) if len(positions) > 1 else (
        (lambda args, p=positions[0]: (args[p],)) if positions else (lambda args: ()))
    return (getter, [id(t) for _, t, _, _, _ in frozen], [v for _, _, v, _, _ in frozen],
            [p for _, _, _, _, p in frozen])


# NOTE [Initializers outlive their session]: ORT does not copy external initializers (nor keep a reference
# to them): the session reads the OrtValues' memory for as long as it lives. A frozen weight that is not
# contiguous (transposed in place: `linear.weight.t_()` under no_grad) is handed over as a contiguous copy,
# which nothing else held: it was freed when `_feed_frozen` returned, and the session computed with freed
# memory (outputs of 1e25 after `m.weight.t_()`, issue 17). The session keeps the OrtValues (and through
# their arrays the copies) as an attribute.
def _feed_frozen(frozen: dict, so) -> list:
    """Hand the frozen weights to the session options as OrtValues over the tensors' memory, leaving their
    storages resizable (NOTE [Arrays over tensors leave storages resizable]); returns the OrtValues, which
    must live as long as the session (NOTE [Initializers outlive their session])."""
    import onnxruntime as ort

    names = list(frozen)
    values = [ort.OrtValue.ortvalue_from_numpy(array_over(_held_by_a_session(frozen[n]))) for n in names]
    so.add_external_initializers(names, values)
    return values


_SESSION_HOLDS: collections.Counter = collections.Counter()  # storage -> sessions' arrays over it (NOTE [Weights
# whose storage is held elsewhere are fed])


def _held_by_a_session(weight: torch.Tensor) -> torch.Tensor:
    """The contiguous tensor a session's initializer is made over, counted in `_SESSION_HOLDS` while it lives."""
    held = weight.detach().contiguous()
    key = held.untyped_storage()._cdata
    _SESSION_HOLDS[key] += 1
    weakref.finalize(held, _SESSION_HOLDS.subtract, (key,))  # our own tensor: no weak reference on the user's
    return held


def make_session(data: bytes, opts: OnnxrtOptions, device: torch.device, sub: torch.fx.GraphModule | None = None,
                 frozen: dict | None = None, frozen_model: bytes | None = None):
    """An InferenceSession for `data`; with `frozen`, for `frozen_model` (freeze_model(data, frozen)) with
    the frozen weights fed as initializers."""
    import onnxruntime as ort

    providers = providers_for(opts, device)
    if providers is None:
        raise RuntimeError(f"no ONNX Runtime execution provider for device {device}")
    so = session_options(opts)
    try:
        model, initializers = data, None
        if frozen:
            model = frozen_model
            initializers = _feed_frozen(frozen, so)
        session = ort.InferenceSession(model, so, providers=providers, disabled_optimizers=DISABLED_OPTIMIZERS)
        session._framejit_initializers = initializers  # NOTE [Initializers outlive their session]
        return session
    except Exception as exc:  # ORT raises its own exception types (Fail, NotImplemented, ...)
        names = set(_NODE_NAME.findall(str(exc)))
        fx_names = [n.name for n in sub.graph.nodes if n.name in names] if sub is not None else []
        raise SessionLoadError(f"{type(exc).__name__}: {exc}", fx_names) from exc


def drop_unread_args(data: bytes, call: torch.fx.Node, sub: torch.fx.GraphModule, eager_nodes: dict) -> None:
    """Remove from the top graph's `call` of part `sub` the arguments whose placeholders the model `data`
    does not take (sizes the part reads from its tensor inputs, NOTE [Shapes from the graph's inputs] in
    shapes.py), and then the size computations nothing else uses (and their `eager_nodes` entries)."""
    taken = set(model_input_names(data, sub))
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    if len(taken) == len(placeholders):
        return
    call.args = tuple(a for a, p in zip(call.args, placeholders) if p.name in taken)
    graph = call.graph
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and not node.users and isinstance(node.meta.get("val"), torch.SymInt):
            eager_nodes.pop(node.name, None)
            graph.erase_node(node)


def model_input_names(data: bytes, sub: torch.fx.GraphModule) -> list[str]:
    """`sub`'s placeholder names that the model `data` takes as inputs, in order."""
    import onnx

    taken = {value.name for value in onnx.ModelProto.FromString(data).graph.input}
    return [n.name for n in sub.graph.nodes if n.op == "placeholder" and n.name in taken]


def _scalar_dtype(value: object) -> type:
    """The numpy dtype of a scalar input as torch's ONNX exporter declares it (_handle_placeholder_node):
    a SymBool is BOOL, a SymFloat FLOAT (float32; `h / (2 * h)`, the scale F.interpolate computes from a
    size-derived target), any other int INT64. A float fed as int64 was refused by ORT, and the symbolic
    program gave up for per-signature ones."""
    if type(value) is bool:
        return np.bool_
    return np.float32 if type(value) is float else np.int64


class OrtPart(torch.nn.Module):
    """One ONNX Runtime session standing in for a fused partition; called like the submodule it replaces.

    It keeps the model bytes it was made from (`model`), and the frozen rewrite of them (`frozen_model`, NOTE
    [Frozen models are cached]), so that a compiled program can be persisted (onnxrt/persist.py) without
    translating again. `output_meta` is (dtype, shape) per output.
    `frozen_positions` are the argument positions whose tensors the session holds as constants (NOTE
    [Frozen weights]); a part made with `session=None` creates its session on its first call.
    """

    def __init__(self, session, model: bytes, single_output: bool, output_meta: list, device: torch.device,
                 input_names: list[str], opts: OnnxrtOptions, frozen_positions: tuple = (),
                 frozen_model: bytes | None = None, compared_positions: tuple = ()):
        super().__init__()
        self.model = model
        self.frozen_model = frozen_model  # freeze_model(model, frozen names) (NOTE [Frozen models are cached])
        self.input_names = list(input_names)
        self.output_names = [f"out{i}" for i in range(len(output_meta))]
        self.single_output = single_output
        self.output_meta = output_meta
        self.device = device
        self.opts = opts
        self.frozen_positions = tuple(frozen_positions) if device.type == "cpu" else ()
        # frozen running statistics, also compared by value (NOTE [Statistics written without a bump] in compiler.py)
        self.compared_positions = tuple(compared_positions)
        self._copies: list = []  # (position, copy of the tensor the session was made with)
        self.refreezes = 0
        self.session = session
        self._frozen: list = []  # (position, tensor, version, `.data` uses, data pointer) the session was made with
        self._epoch = -1  # watch.EPOCH when the session was made
        self._fed: list = [(n, i) for i, n in enumerate(self.input_names) if i not in self.frozen_positions]
        # NOTE [Empty outputs keep eager's strides]
        self._empty_outputs = [i for i, (_, shape) in enumerate(output_meta)
                               if any(type(s) is int and s == 0 for s in shape)]
        if session is not None:
            self.output_names = [o.name for o in session.get_outputs()]

    @classmethod
    def for_graph(cls, model: bytes, sub: torch.fx.GraphModule, device: torch.device, opts: OnnxrtOptions,
                  example_args: list, frozen_positions: tuple, compared_positions: tuple = ()) -> "OrtPart":
        """The part standing in for the fused submodule `sub`, its session made with `example_args`'
        weights (its output node gives the output metadata). Raises SessionLoadError."""
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        single_output = not isinstance(out_node.args[0], (tuple, list))
        outs = [out_node.args[0]] if single_output else list(out_node.args[0])
        output_meta = [(o.meta["val"].dtype, tuple(o.meta["val"].shape)) for o in outs]
        names = model_input_names(model, sub)  # the arguments drop_unread_args left
        part = cls(None, model, single_output, output_meta, device, names, opts, frozen_positions,
                   compared_positions=compared_positions)
        part._make_session(example_args, sub)
        return part

    def _make_session(self, args, sub: torch.fx.GraphModule | None = None) -> None:
        epoch = watch.EPOCH[0]  # read before what it vouches for (NOTE [Bumped before and after] in tensor_watch.py)
        self.session = self._vector_run = None  # its initializers hold the old weights' storages
        shared = [i for i in self.frozen_positions if _held_elsewhere(args[i])]
        if shared:  # NOTE [Weights whose storage is held elsewhere are fed]
            self._stop_freezing(shared)
        self._frozen = [(i, args[i], args[i]._version, watch.watch(args[i]), args[i].data_ptr())
                        for i in self.frozen_positions]
        self._copies = [(i, args[i].clone()) for i in self.compared_positions if i in self.frozen_positions]
        self._frozen_check = _frozen_check(self._frozen)
        self._vector_run = None  # the session and the fed names change (NOTE [Zero-copy I/O])
        self._epoch = epoch
        frozen = {self.input_names[i]: t for i, t, _, _, _ in self._frozen}
        self.session = make_session(self.model, self.opts, self.device, sub, frozen,
                                    self.frozen_bytes() if frozen else None)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._holders = _holder_counts(list(frozen.values()))  # NOTE [Holders appearing after the freeze]

    def _stop_freezing(self, positions) -> None:
        """Feed the weights at `positions` on every call from now on instead of freezing them."""
        self.frozen_positions = tuple(i for i in self.frozen_positions if i not in positions)
        self.frozen_model = None  # made again for the names left (NOTE [Frozen models are cached])
        self._alternates = None  # NOTE [A session per set of weights]
        self._fed = [(n, i) for i, n in enumerate(self.input_names) if i not in self.frozen_positions]
        self._vector_run = None

    def frozen_bytes(self) -> bytes | None:
        """The model with the frozen inputs as initializers, made once (NOTE [Frozen models are cached])."""
        if self.frozen_model is None and self.frozen_positions:
            self.frozen_model = freeze_model(self.model, [self.input_names[i] for i in self.frozen_positions])
        return self.frozen_model

    _frozen_check: tuple = ((), (), (), ())  # (positions getter, ids, versions, data pointers) of `_frozen`

    def _frozen_current(self, args) -> bool:
        """The session's constants are still what the frozen positions hold (NOTE [Frozen weights])."""
        # NOTE [Arrays over tensors leave storages resizable]: the memory may move, so the pointers too.
        # NOTE [Per-call path]: identities, versions and pointers are compared as lists made by `map`
        # (C loops) rather than in a Python loop; the ids are of tensors `_frozen` keeps alive.
        getter, ids, versions, pointers = self._frozen_check
        held = getter(args)
        if list(map(id, held)) != ids or list(map(_VERSION, held)) != versions or \
                list(map(_DATA_PTR, held)) != pointers:
            return False
        if self._copies and any(not torch.equal(args[position], copy) for position, copy in self._copies):
            return False  # NOTE [Statistics written without a bump] in compiler.py
        epoch = watch.EPOCH[0]  # read once, before the uses it vouches for (NOTE [Bumped before and after])
        if epoch != self._epoch:  # some watched tensor's `.data` was used: one of ours?
            if any(watch.uses(tensor) != count for _, tensor, _, count, _ in self._frozen):
                return False
            self._epoch = epoch
        return self._holders_unchanged(held)

    _holders: tuple | None = None

    def _holders_unchanged(self, held) -> bool:
        """No holder of a frozen weight appeared since the session was made (NOTE [Holders appearing after
        the freeze]); `held` are the frozen positions' tensors, checked the same objects as `_frozen`'s."""
        if self._holders is None:
            return True
        keys, storage_counts, impl_counts = self._holders
        if list(map(_STORAGE_USES, keys)) == storage_counts and list(map(_IMPL_USES, held)) == impl_counts:
            return True
        if any(map(_held_elsewhere, held)):
            return False
        self._holders = _holder_counts(list(held))  # only sessions' arrays came or went
        return True

    def _check_frozen(self, args) -> None:
        if self.session is not None and self._frozen_current(args):
            return
        if self.session is not None and self._switch_session(args):
            return
        self.refreezes += self.session is not None
        if self.refreezes > _MAX_REFREEZE:
            logs.log("output_code", "onnxrt: weights of a part changed %d times; it stops freezing them",
                     self.refreezes)
            self._stop_freezing(self.frozen_positions)
        self._make_session(args)

    # NOTE [A session per set of weights]
    # One compiled program serves every instance of a module class whose calls pass its guards (the weights
    # are the graph's inputs), so two instances called in turn gave the part another instance's weights at
    # every call: it rebuilt its session each time and after `_MAX_REFREEZE` rebuilds stopped freezing, which
    # lost ORT's prepacking and constant folding (zoo lstm, 2 instances called in turn, 1 thread: 0.80x eager
    # against 0.95-0.99x for one instance; 0.94-0.97x with this). So the part keeps up to `_MAX_ALTERNATES` other
    # frozen sessions, each with the state that vouches for it, and switches to one whose frozen tensors are
    # the objects now fed and which passes the same check (`_frozen_current`: versions, data pointers,
    # `.data` uses, holders, compared copies). An alternate made for these same tensor objects that fails the
    # check can never pass again (versions and use counts only grow) and is dropped; a new set of weights
    # still counts a rebuild. Stopping freezing drops them all. A kept session keeps its weights alive (as the
    # current one does) until it is dropped, also after their module is gone.
    _SESSION_STATE = ("session", "_vector_run", "_frozen", "_copies", "_frozen_check", "_epoch", "output_names",
                      "_holders")
    _alternates: list | None = None

    def _switch_session(self, args) -> bool:
        """Stash the current session and take a kept one made for the fed weights (NOTE [A session per set
        of weights]); False, the current one stashed unless its own tensors changed, when none fits."""
        names = self._SESSION_STATE
        ids = list(map(id, self._frozen_check[0](args)))
        current = tuple(getattr(self, name) for name in names)
        kept = [] if self._frozen_check[1] == ids else [current]  # its own tensors changed: never again
        found = None
        attributes = vars(self)  # not nn.Module.__setattr__: none of these is a module, parameter or buffer
        for state in self._alternates or []:
            attributes.update(zip(names, state))
            if found is None and self._frozen_check[1] == ids:
                if self._frozen_current(args):
                    found = tuple(getattr(self, name) for name in names)
                continue  # a match, or these very tensors changed and it can never serve again
            kept.append(state)
        self._alternates = kept[-_MAX_ALTERNATES:]
        attributes.update(zip(names, found or current))
        return found is not None

    def forward(self, *args):
        if self.device.type == "cpu":
            if (self.frozen_positions or self.session is None) and not (
                    self.session is not None and self._frozen_current(args)):
                self._check_frozen(args)
            results = self._run_cpu(args)
            if self._empty_outputs:
                results = _with_contiguous_strides(results, self._empty_outputs)
        else:
            if self.session is None:
                self._make_session(args)
            results = self._run_bound(args)
        return results[0] if self.single_output else tuple(results)

    __call__ = forward  # no module hooks on a part: skip nn.Module.__call__ (NOTE [Per-call path])

    # NOTE [Leaf views]
    # Training programs feed the parameters on every call (they change at every optimizer step), and
    # `p.detach().numpy()` costs about 2.5 us per tensor (30 parameters: 80 us of a 450 us forward call of
    # the zoo's gpt). The numpy view of a leaf tensor that requires grad (a parameter) is kept per input
    # position and reused while the position receives the same tensor object with the same data pointer
    # and shape: the view shares the tensor's memory, so in-place updates (optimizer steps) are seen;
    # `p.data = other` changes the data pointer and makes a new view. Only leaves are kept (an activation
    # kept here would stay alive after its step). `_sess.run` is ORT's own run without the Python
    # wrapper's per-call checks (every input is fed, so its missing-input check cannot fail).
    _leaf_views: dict | None = None

    def _feed(self, position: int, arg: torch.Tensor):
        if not arg.requires_grad:  # NOTE [Arrays over tensors leave storages resizable]
            return array_over(arg.contiguous())
        view = array_over(arg.detach()) if arg.is_leaf and arg.is_contiguous() else None
        if view is None:
            return array_over(arg.detach().contiguous())
        if self._leaf_views is None:
            self._leaf_views = {}
        self._leaf_views[position] = (arg, arg.data_ptr(), arg.shape, view)
        return view

    _vector_run = None  # (session, getter of the fed arguments, feed names, input devices, output names,
    #                      output devices, options); TrainingPart's differs (training.py)

    def _run_cpu(self, args) -> list[torch.Tensor]:
        """NOTE [Zero-copy I/O]: every fed input a non-empty tensor: one OrtValueVector in, DLPack out."""
        run = self._vector_run
        if run is None:
            run = self._prepare_vector_run()
            if run is None:
                return self._run_cpu_feeds(args)
        sess, pick, names, in_devices, out_names, out_devices, options = run
        # NOTE [Fed inputs checked in C loops]: the checks below run as `map`s over the fed inputs, not a
        # Python loop per input (issue 17's per-call path). A symbolic int has no dtype (AttributeError).
        tensors = pick(args)
        try:
            dtypes = list(map(_NUMPY_DTYPES.get, map(_DTYPE, tensors)))
        except AttributeError:
            return self._run_cpu_feeds(args)
        pointers = list(map(_DATA_PTR, tensors))
        if None in dtypes or 0 in pointers:  # a dtype numpy lacks, an empty tensor
            return self._run_cpu_feeds(args)
        if not all(map(_IS_CONTIGUOUS, tensors)):
            tensors = [t if t.is_contiguous() else t.detach().contiguous() for t in tensors]
            pointers = list(map(_DATA_PTR, tensors))
        feeds = _ORT_VALUE_VECTOR()
        feeds.push_back_batch(tensors, pointers, dtypes, list(map(_SHAPE, tensors)), in_devices)
        fetches = _ORT_VALUE_VECTOR()
        sess.run_with_ortvaluevector(options, names, feeds, out_names, fetches, out_devices)
        return fetches.to_dlpacks(_FROM_DLPACK)

    def _prepare_vector_run(self) -> tuple | None:
        """The arguments of `run_with_ortvaluevector` for this session, or None (no C session to run)."""
        global _ORT_VALUE_VECTOR
        sess = getattr(self.session, "_sess", None)
        if sess is None or any(dtype not in _NUMPY_DTYPES for dtype, _ in self.output_meta):
            return None
        import onnxruntime as ort
        from onnxruntime.capi._pybind_state import OrtDevice, OrtValueVector

        _ORT_VALUE_VECTOR = OrtValueVector
        cpu = OrtDevice(OrtDevice.cpu(), OrtDevice.default_memory(), 0)
        names = [name for name, _ in self._fed]
        positions = [position for _, position in self._fed]
        pick = operator.itemgetter(*positions) if len(positions) > 1 else \
            (lambda args, k=positions[0]: (args[k],)) if positions else (lambda args: ())
        self._vector_run = (sess, pick, names, [cpu] * len(names), list(self.output_names),
                            [cpu] * len(self.output_names), ort.RunOptions())
        return self._vector_run

    def _run_cpu_feeds(self, args) -> list[torch.Tensor]:
        """A dict of numpy arrays in, numpy arrays out (inputs that are not all non-empty tensors)."""
        feeds = {}
        views = self._leaf_views or {}
        for name, position in self._fed:
            arg = args[position]
            if not isinstance(arg, torch.Tensor):  # a symbolic size: a scalar input (NOTE [One program for every size])
                feeds[name] = np.array(arg, dtype=_scalar_dtype(arg))
                continue
            kept = views.get(position)  # NOTE [Leaf views]
            if kept is not None and kept[0] is arg and arg.data_ptr() == kept[1] and arg.shape == kept[2]:
                feeds[name] = kept[3]
            else:
                feeds[name] = self._feed(position, arg)
        run = getattr(self.session, "_sess", None)
        outs = run.run(self.output_names, feeds, None) if run is not None else self.session.run(self.output_names, feeds)
        return [torch.from_numpy(out) for out in outs]

    def _run_bound(self, args) -> list[torch.Tensor]:
        binding = self.session.io_binding()
        device_id = self.device.index or 0
        for name, arg in zip(self.input_names, args):
            arg = arg.detach().contiguous()
            binding.bind_input(name, self.device.type, device_id, _NUMPY_DTYPES[arg.dtype],
                               list(arg.shape), arg.data_ptr())
        results = []
        for name, (dtype, shape) in zip(self.output_names, self.output_meta):
            out = torch.empty(shape, dtype=dtype, device=self.device)
            binding.bind_output(name, self.device.type, device_id, _NUMPY_DTYPES[dtype], list(shape),
                                out.data_ptr())
            results.append(out)
        self.session.run_with_iobinding(binding)
        return results
