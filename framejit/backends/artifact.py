"""The byte format of persisted backend artifacts, and the pieces every backend's save/load shares.

A backend that can persist what it compiled has two module functions (see NOTE [Backend artifacts]):

    save(compiled) -> bytes | None          # None: this compiled object cannot be persisted
    load(data, gm, example_inputs) -> callable

`load` rebuilds the callable without lowering, tracing or exporting anything; it raises
`ArtifactError` (a ValueError) when the bytes are not a valid artifact of that backend or do not fit
`gm` (a weight with another shape, say). Callers treat that as a cache miss and compile again.

Format (`pack`/`unpack`): MAGIC, a 4-byte big-endian header length, a JSON header
`{"kind", "format", "meta", "blobs": [[name, length], ...]}`, then the blobs back to back. JSON plus
raw bytes, never pickle: loading an artifact runs no code but the generated source it names.

Helpers for what several backends persist: torch dtypes and devices as text, pytree specs
(`torch.utils._pytree.treespec_dumps`), tensors created at trace time (`torch.save`, loaded with
`weights_only=True`), and the live tensors of `gm` named by their attribute path (`tensor_paths`,
`resolve_tensor`), so that weights are never copied into an artifact.
"""
from __future__ import annotations

import io
import json
import struct

MAGIC = b"FJART1\n"
_LENGTH = struct.Struct(">I")

# NOTE [Backend artifacts]
# What a backend persists is its own compiled program, not the FX graph: onnxrt the ONNX model bytes
# and the plan of eager parts per input signature, triton the generated module source. The graph
# module `gm` is still handed to `load`, because the weights are live tensors of `gm` (never baked into
# an artifact: an optimizer step or load_state_dict is seen as in eager) and because fallback paths
# (a new input signature, grad mode) run `gm` itself. The persistent key under which the caller stores
# the bytes must cover everything that changes them (graph code, input metadata, backend version and
# options); `load` re-checks what it cheaply can (weight shapes and dtypes) and raises otherwise.


class ArtifactError(ValueError):
    """The bytes are not a loadable artifact of this backend, or they do not fit the graph module."""


def pack(kind: str, meta: dict, blobs: dict[str, bytes] | None = None) -> bytes:
    blobs = blobs or {}
    header = {"kind": kind, "format": 1, "meta": meta, "blobs": [[name, len(b)] for name, b in blobs.items()]}
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return b"".join([MAGIC, _LENGTH.pack(len(head)), head, *blobs.values()])


def kind_of(data: bytes) -> str | None:
    """The kind an artifact's header names, or None for bytes that are no readable artifact."""
    try:
        data = bytes(data)
        start = len(MAGIC) + _LENGTH.size
        if not data.startswith(MAGIC) or len(data) < start:
            return None
        (head_len,) = _LENGTH.unpack_from(data, len(MAGIC))
        header = json.loads(data[start:start + head_len])
        return header.get("kind") if isinstance(header, dict) else None
    except (TypeError, ValueError, struct.error):
        return None


def unpack(data: bytes, kind: str) -> tuple[dict, dict[str, bytes]]:
    """The (meta, blobs) of an artifact of `kind`; ArtifactError for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"load(data): data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    start = len(MAGIC) + _LENGTH.size
    if not data.startswith(MAGIC) or len(data) < start:
        raise ArtifactError(f"not a framejit {kind} artifact (bad magic)")
    (head_len,) = _LENGTH.unpack_from(data, len(MAGIC))
    try:
        header = json.loads(data[start:start + head_len])
    except ValueError as exc:
        raise ArtifactError(f"corrupt {kind} artifact header: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != kind or header.get("format") != 1:
        found = header.get("kind") if isinstance(header, dict) else None
        raise ArtifactError(f"expected a {kind} artifact (format 1), found kind {found!r}")
    blobs, offset = {}, start + head_len
    try:
        for name, length in header["blobs"]:
            if offset + length > len(data):
                raise ArtifactError(f"truncated {kind} artifact: blob {name!r} is incomplete")
            blobs[name] = data[offset:offset + length]
            offset += length
        meta = header["meta"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"corrupt {kind} artifact header: {type(exc).__name__}: {exc}") from None
    if offset != len(data):
        raise ArtifactError(f"corrupt {kind} artifact: {len(data) - offset} trailing bytes")
    return meta, blobs


# -- values as JSON -------------------------------------------------------------------------------
def dtype_from_text(text: str):
    import torch

    dtype = getattr(torch, text.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ArtifactError(f"unknown dtype {text!r} in artifact")
    return dtype


def spec_to_text(spec) -> str:
    """A pytree spec as text; ValueError/TypeError when it holds a type pytree cannot serialise."""
    import torch.utils._pytree as pytree

    return pytree.treespec_dumps(spec)


def spec_from_text(text: str):
    import torch.utils._pytree as pytree

    try:
        return pytree.treespec_loads(text)
    except Exception as exc:
        raise ArtifactError(f"cannot rebuild an output structure: {exc}") from None


def tensor_to_bytes(tensor) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(tensor.detach().clone(), buffer)
    return buffer.getvalue()


def tensor_from_bytes(data: bytes):
    import torch

    try:
        tensor = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # torch.load reports damage as pickle, zip or runtime errors
        raise ArtifactError(f"a saved tensor cannot be read: {type(exc).__name__}: {exc}") from None
    if not isinstance(tensor, torch.Tensor):
        raise ArtifactError(f"a saved tensor holds a {type(tensor).__name__}")
    return tensor


def tensor_meta(tensor) -> list:
    return [str(tensor.dtype), list(tensor.shape)]


# -- live tensors of gm ---------------------------------------------------------------------------
def tensor_paths(gm) -> dict[int, str]:
    """id(tensor) -> its attribute path in `gm` (parameters, buffers, plain tensor attributes)."""
    import torch

    paths: dict[int, str] = {}
    for name, tensor in list(gm.named_parameters(remove_duplicate=False)) + list(
            gm.named_buffers(remove_duplicate=False)):
        paths.setdefault(id(tensor), name)
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = get_path(gm, node.target)
            if isinstance(value, torch.Tensor):
                paths.setdefault(id(value), node.target)
    return paths


def get_path(module, path: str):
    value = module
    for part in path.split("."):
        value = getattr(value, part)
    return value


def resolve_tensor(gm, path: str, meta: list):
    """The tensor at `path` in `gm`, checked against the (dtype, shape) recorded when saving."""
    import torch

    try:
        tensor = get_path(gm, path)
    except AttributeError:
        raise ArtifactError(f"the graph module has no tensor {path!r}") from None
    if not isinstance(tensor, torch.Tensor) or tensor_meta(tensor) != meta:
        found = tensor_meta(tensor) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ArtifactError(f"tensor {path!r} of the graph module is {found}, the artifact expects {meta}")
    return tensor
