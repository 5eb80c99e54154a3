"""Persisting what the triton backend compiled: `save(compiled) -> bytes | None` and
`load(data, gm, example_inputs) -> CompiledGraph | EagerGraph` (the contract is in
backends/artifact.py).

What is saved for a `CompiledGraph` (runtime.py): the generated module source (kernels plus the
`call` wrapper), the input layouts it was specialised for, the output structure (a pytree spec), the
kernel table entries (`runtime.KERNELS`, for offline compilation), the counts shown by `explain`, and
the graph's constants: by attribute path in `gm` when they are `gm`'s own tensors (weights are never
copied), by value (`torch.save`) when tracing created them. Triton's own cache keeps compiled
binaries across processes; what this module saves spares lowering, scheduling and code generation.

`load` writes the source to a kernel file and imports it (runtime.load_module). Like the backend
itself, it returns an `EagerGraph` (logged) when the kernels cannot run here: CPU tensors without
TRITON_INTERPRET=1.

Invariants: an `EagerGraph`, or a graph whose wrapper needs `extra` values (objects the source cannot
spell), is not persisted (None); loading checks every constant taken from `gm` against its recorded
dtype and shape and raises ArtifactError on a mismatch or damage.
"""
from __future__ import annotations

import torch

from ..artifact import (ArtifactError, dtype_from_text, pack, resolve_tensor, spec_from_text, spec_to_text,
                        tensor_from_bytes, tensor_meta, tensor_paths, tensor_to_bytes, unpack)
from . import runtime
from .runtime import CompiledGraph, EagerGraph

KIND = "triton"
# Bump whenever lowering or code generation changes what a graph compiles to: `load` refuses an artifact
# of another revision (the frame cache then compiles again), as onnxrt's REVISION does.
# 1: argmax/argmin take the first NaN, clamp keeps NaN and -0.0 as eager (NOTE [NaN in arg reductions]).
# 2: returned views of inputs mutated by the graph are views of the inputs (backends/aliasing.py).
# 3: graphs that change an input's shape or strides in place run eagerly (backends/aliasing.py).
# 4: bool addition is a logical or; sign(nan) and sign(-0.0) are 0.0 (soundness findings #7, #8).
# 5: float maximum/minimum keep the first argument on ties (NOTE [Eager's maximum on ties]).
REVISION = 5


def save(compiled) -> bytes | None:
    """The artifact of a `CompiledGraph`, or None when `compiled` cannot be persisted."""
    if not isinstance(compiled, CompiledGraph) or compiled.extra or compiled.source is None:
        return None
    expected = []
    for key in compiled.expected:
        if len(key) != 4 or not isinstance(key[2], torch.dtype):
            return None
        shape, stride, dtype, device = key
        expected.append([list(shape), list(stride), str(dtype), str(device)])
    try:
        out_spec = spec_to_text(compiled.out_spec)
    except Exception:  # a pytree type without serialisation
        return None
    paths = tensor_paths(compiled.gm)
    blobs: dict[str, bytes] = {"module.py": compiled.source.encode()}
    constants = []
    for index, tensor in enumerate(compiled.constants):
        path = paths.get(id(tensor))
        if path is not None:
            constants.append({"path": path, "meta": tensor_meta(tensor)})
        else:
            blobs[f"const{index}"] = tensor_to_bytes(tensor)
            constants.append({"blob": f"const{index}"})
    kernels = [[name, signature, constexprs, source]
               for (path, name), (signature, constexprs, source) in runtime.KERNELS.items()
               if path == compiled.source_path]
    meta = {"revision": REVISION, "expected": expected, "out_spec": out_spec, "constants": constants, "kernels": kernels,
            "kernel_count": compiled.kernel_count, "extern_count": compiled.extern_count,
            "fallbacks": list(compiled.fallbacks)}
    return pack(KIND, meta, blobs)


def load(data: bytes, gm: torch.fx.GraphModule, example_inputs=None) -> CompiledGraph | EagerGraph:
    """Rebuild the compiled graph saved by `save` for `gm`, importing its saved source.

    `example_inputs` is accepted for the common signature of backend loaders and not needed: the input
    layouts the kernels were specialised for are part of the artifact (other inputs run `gm` eagerly)."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"triton load(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    meta, blobs = unpack(data, KIND)
    if meta.get("revision") != REVISION:  # made by an older code generator: compile again
        raise ArtifactError(f"triton artifact of revision {meta.get('revision')!r}, expected {REVISION}")
    try:
        expected = [(tuple(shape), tuple(stride), dtype_from_text(dtype), torch.device(device))
                    for shape, stride, dtype, device in meta["expected"]]
        problem = _device_problem({key[3] for key in expected})
        if problem is not None:
            runtime.log_once("eager_fallback", f"triton: running the graph eagerly: {problem}")
            return EagerGraph(gm, problem)
        constants = [resolve_tensor(gm, c["path"], c["meta"]) if "path" in c
                     else tensor_from_bytes(blobs[c["blob"]]) for c in meta["constants"]]
        out_spec = spec_from_text(meta["out_spec"])
        source = blobs["module.py"].decode()
        kernels = meta["kernels"]
        counts = (meta["kernel_count"], meta["extern_count"], list(meta["fallbacks"]))
        module, path = runtime.load_module(source)
    except ArtifactError:
        raise
    except Exception as exc:  # a damaged field, or saved source that no longer imports
        raise ArtifactError(f"corrupt or incompatible triton artifact: {type(exc).__name__}: {exc}") from None
    for name, signature, constexprs, kernel_source in kernels:
        runtime.KERNELS[(path, name)] = (dict(signature), dict(constexprs), kernel_source)
    compiled = CompiledGraph(gm, module, path, [], constants, [], out_spec, *counts, source=source)
    compiled.expected = expected
    return compiled


def _device_problem(devices: set) -> str | None:
    """Why kernels for these devices cannot run in this process (as the backend itself decides)."""
    from . import interpreting

    if any(d.type == "cuda" for d in devices) and not torch.cuda.is_available():
        raise ArtifactError("the artifact holds CUDA kernels and this process has no CUDA device")
    if any(d.type == "cpu" for d in devices) and not interpreting():
        return "CPU tensors and TRITON_INTERPRET is not set (Triton needs a GPU)"
    return None
