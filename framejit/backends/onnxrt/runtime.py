"""ONNX Runtime parts: model bytes (through the persistent cache) -> InferenceSession -> OrtPart module.

`OrtPart` replaces one fused `ort_<i>` submodule of the partitioned graph. It is built once per graph
and input signature and reused for every call with that signature.

Main types and functions:
- `model_bytes(sub, opts) -> bytes`: the ONNX model of a partition, from the cache when present
  (the cacheable artifact is exactly these bytes: no weights, see NOTE [Weights are inputs]).
- `make_session(data, opts, device, sub=None)`: an InferenceSession; raises `SessionLoadError` naming
  the FX nodes of `sub` ORT rejected (parsed from ORT's message, using translate's node-naming
  invariant).
- `OrtPart`: feeds torch tensors to the session and returns torch tensors; see NOTE [Zero-copy I/O].
"""
from __future__ import annotations

import re

import numpy as np
import torch
import torch.fx

from ... import logs
from .options import OnnxrtOptions, providers_for, session_options
from . import translate

# NOTE [Zero-copy I/O]
# On CPU, `session.run` with numpy views of the torch tensors (`tensor.numpy()` shares memory) and
# `torch.from_numpy` on the outputs ORT allocated moves no tensor data. It is also the fastest call
# path measured here: for a 2-op graph on 16x16 floats, `run` took 4-6 us per call, while
# `run_with_iobinding` took 30-38 us (binding reused or not) and `run_with_ort_values` 38 us.
# Non-contiguous inputs are made contiguous first (the only copy). On CUDA, inputs and preallocated
# outputs are bound by data pointer with io_binding (nothing leaves the device).

_NUMPY_DTYPES = {
    torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_,
}


class SessionLoadError(RuntimeError):
    def __init__(self, message: str, node_names: list[str]):
        super().__init__(message)
        self.node_names = node_names


def _meta_str(sub: torch.fx.GraphModule) -> str:
    parts = []
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            val = node.meta["val"]
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


def make_session(data: bytes, opts: OnnxrtOptions, device: torch.device, sub: torch.fx.GraphModule | None = None):
    import onnxruntime as ort

    providers = providers_for(opts, device)
    if providers is None:
        raise RuntimeError(f"no ONNX Runtime execution provider for device {device}")
    try:
        return ort.InferenceSession(data, session_options(opts), providers=providers)
    except Exception as exc:  # ORT raises its own exception types (Fail, NotImplemented, ...)
        names = set(_NODE_NAME.findall(str(exc)))
        fx_names = [n.name for n in sub.graph.nodes if n.name in names] if sub is not None else []
        raise SessionLoadError(f"{type(exc).__name__}: {exc}", fx_names) from exc


class OrtPart(torch.nn.Module):
    """One ONNX Runtime session standing in for a fused partition; called like the submodule it replaces.

    It keeps the model bytes it was made from (`model`), so that a compiled program can be persisted
    (onnxrt/persist.py) without translating again. `output_meta` is (dtype, shape) per output.
    """

    def __init__(self, session, model: bytes, single_output: bool, output_meta: list, device: torch.device):
        super().__init__()
        self.session = session
        self.model = model
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        self.single_output = single_output
        self.output_meta = output_meta
        self.device = device

    @classmethod
    def for_graph(cls, session, model: bytes, sub: torch.fx.GraphModule, device: torch.device) -> "OrtPart":
        """The part standing in for the fused submodule `sub` (its output node gives the output metadata)."""
        out_node = next(n for n in sub.graph.nodes if n.op == "output")
        single_output = not isinstance(out_node.args[0], (tuple, list))
        outs = [out_node.args[0]] if single_output else list(out_node.args[0])
        output_meta = [(o.meta["val"].dtype, tuple(o.meta["val"].shape)) for o in outs]
        return cls(session, model, single_output, output_meta, device)

    def forward(self, *args):
        if self.device.type == "cpu":
            results = self._run_cpu(args)
        else:
            results = self._run_bound(args)
        return results[0] if self.single_output else tuple(results)

    def _run_cpu(self, args) -> list[torch.Tensor]:
        feeds = {}
        for name, arg in zip(self.input_names, args):
            if arg.requires_grad:
                arg = arg.detach()
            feeds[name] = arg.contiguous().numpy()
        outs = self.session.run(self.output_names, feeds)
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
