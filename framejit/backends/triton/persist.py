"""Persisting what the triton backend compiled: `save(compiled) -> bytes | None` and
`load(data, gm, example_inputs) -> CompiledGraph | EagerGraph` (the contract is in
backends/artifact.py).

What is saved for a `CompiledGraph` (runtime.py): the generated module source (kernels plus the
`call` wrapper), the input layouts it was specialised for, the output structure (a pytree spec), the
kernel table entries (`runtime.KERNELS`, for offline compilation), the counts shown by `explain`, and
the graph's constants: by attribute path in `gm` when they are `gm`'s own tensors (weights are never
copied), by value (`torch.save`) when tracing created them. Triton's own cache keeps compiled
binaries across processes; what this module saves spares lowering, scheduling and code generation.
A size-generic `DynamicGraph` (dynamic.py) is saved the same way plus its size check and layout (NOTE
[Persisted size-generic modules]).

`load` writes the source to a kernel file and imports it (runtime.load_module). Like the backend
itself, it returns an `EagerGraph` (logged) when the kernels cannot run here: CPU tensors without
TRITON_INTERPRET=1.

Invariants: an `EagerGraph`, or a graph whose wrapper needs `extra` values (objects the source cannot
spell), is not persisted (None); loading checks every constant taken from `gm` against its recorded
dtype and shape and raises ArtifactError on a mismatch or damage.
"""
from __future__ import annotations

import json

import torch

from ..artifact import (ArtifactError, dtype_from_text, pack, resolve_tensor, spec_from_text, spec_to_text,
                        tensor_from_bytes, tensor_meta, tensor_paths, tensor_to_bytes, unpack)
from .. import symbolic
from ..checks import CheckedGraph, compile_checked, unchecked
from ..float_inputs import FloatInputsGraph, load_float_inputs, save_float_inputs
from ..size_floats import SizeFloatsGraph, load_size_floats, save_size_floats
from . import runtime
from .dynamic import DynamicGraph
from .runtime import CompiledGraph, EagerGraph

KIND = "triton"
# Bump whenever lowering or code generation changes what a graph compiles to: `load` refuses an artifact
# of another revision (the frame cache then compiles again), as onnxrt's REVISION does.
# 1: argmax/argmin take the first NaN, clamp keeps NaN and -0.0 as eager (NOTE [NaN in arg reductions]).
# 2: returned views of inputs mutated by the graph are views of the inputs (backends/aliasing.py).
# 3: graphs that change an input's shape or strides in place run eagerly (backends/aliasing.py).
# 4: bool addition is a logical or; sign(nan) and sign(-0.0) are 0.0 (soundness findings #7, #8).
# 5: float maximum/minimum keep the first argument on ties (NOTE [Eager's maximum on ties]).
# 6: size-generic modules whose sizes are fractions of symbols are checked at odd sizes (NOTE [Odd probes]).
# 7: graphs with run-time checks run eagerly; earlier artifacts dropped them
# 8: run-time checks are trailing outputs of the kernels (NOTE [Run-time checks as outputs] in backends/checks.py)
# 9: bfloat16/float16 layer_norm, gelu, their backwards and add/sub with an alpha run eager's CPU kernels (NOTE
#    [Reduced-precision kernels kept whole on CPU], NOTE [Scalars of reduced-precision addition on CPU])
# 10: comparisons convert their operands to the promoted dtype, clamp bounds that overflow the dtype run eager's
#     kernel (NOTE [Operands of comparisons in the promoted dtype]); float64 literals (NOTE [Float64 literals])
# 11: factories under a default dtype set inside are pinned; float16/bfloat16 arithmetic converts a dimensioned
#     operand of another dtype to the result dtype first
# 12: a returned constant (a tensor the graph makes from constants alone) is cloned on every call (NOTE [Returned
#     constants are fresh tensors] in wrapper.py)
# 13: float16/bfloat16 true division and remainder convert a dimensioned operand of another dtype first
# 14: `x.view(dtype)` is an extern op (its lowering relabelled the values: review revE HIGH-2)
REVISION = 18  # (size-generic modules, NOTE [Persisted size-generic modules], add a kind: no bump needed)


def save(compiled) -> bytes | None:
    """The artifact of a `CompiledGraph` or a size-generic `DynamicGraph`, or None when `compiled` cannot
    be persisted."""
    if isinstance(compiled, FloatInputsGraph):  # NOTE [Persisted float inputs] (float_inputs.py)
        return save_float_inputs(compiled, save)
    if isinstance(compiled, SizeFloatsGraph):  # NOTE [Persisted size floats] (size_floats.py)
        return save_size_floats(compiled, save)
    compiled = unchecked(compiled)  # NOTE [Run-time checks as outputs]: `load` wraps it again
    training = _save_training(compiled)
    if training is not None:
        return training
    if isinstance(compiled, DynamicGraph):
        return _save_dynamic(compiled)
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
    blobs: dict[str, bytes] = {"module.py": compiled.source.encode()}
    meta = {"revision": REVISION, "expected": expected, "out_spec": out_spec, **_module_meta(compiled, blobs)}
    return pack(KIND, meta, blobs)


def _module_meta(compiled, blobs: dict[str, bytes]) -> dict:
    """What a generated module needs besides its source: constants (by path in gm, else by value, into
    `blobs`), the kernel table entries of its file, the counts `explain` shows."""
    paths = tensor_paths(compiled.gm)
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
    return {"constants": constants, "kernels": kernels, "kernel_count": compiled.kernel_count,
            "extern_count": compiled.extern_count, "fallbacks": list(compiled.fallbacks)}


# NOTE [Persisted size-generic modules]: a `DynamicGraph` (NOTE [Size-generic modules] in dynamic.py) is
# saved as its generated source, its size check (`bind`'s source, which needs no shape environment to be
# rebuilt), the layout signature it serves (dtypes, ranks, devices, contiguity), the positions of its
# size-int inputs and the same constants and kernel table as a static module. A warm process then serves
# every size the size check accepts without lowering or probing again. Its per-shape specialisations
# (sizes the check rejects: 0, 1, a relation) are compiled on first use in each process, as before: they
# are a cache of their own, keyed by concrete shapes, not part of the generic module.
def _save_dynamic(compiled: DynamicGraph) -> bytes | None:
    layout = symbolic.encode_layout(compiled.layout)
    if layout is None or not compiled.bind_source:
        return None
    try:
        out_spec = spec_to_text(compiled.out_spec)
    except Exception:  # a pytree type without serialisation
        return None
    blobs: dict[str, bytes] = {"module.py": compiled.source.encode()}
    meta = {"revision": REVISION, "dynamic": {"bind": compiled.bind_source, "layout": layout,
                                              "ints": sorted(compiled.symbolic_ints), "device": str(compiled.device),
                                              "opts": _plain_options(compiled.opts)},
            "out_spec": out_spec, **_module_meta(compiled, blobs)}
    return pack(KIND, meta, blobs)


def _plain_options(opts: dict) -> dict | None:
    """The backend options as JSON data (they are part of the frame cache key already)."""
    try:
        json.dumps(opts)
        return dict(opts)
    except (TypeError, ValueError):
        return None


def load(data: bytes, gm: torch.fx.GraphModule, example_inputs=None) -> CompiledGraph | EagerGraph | DynamicGraph | \
        CheckedGraph:
    """Rebuild the compiled graph saved by `save` for `gm`, importing its saved source.

    `example_inputs` is accepted for the common signature of backend loaders and not needed: the input
    layouts the kernels were specialised for are part of the artifact (other inputs run `gm` eagerly)."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"triton load(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    with_floats = load_float_inputs(data, gm, example_inputs, load)  # NOTE [Persisted float inputs]
    if with_floats is not None:
        return with_floats
    with_size_floats = load_size_floats(data, gm, example_inputs, load)  # NOTE [Persisted size floats]
    if with_size_floats is not None:
        return with_size_floats
    return compile_checked(gm, lambda graph: _restore(data, graph))  # NOTE [Run-time checks as outputs]


# NOTE [Persisted training graphs] (triton): a training graph is a JointGraph whose joints the joint cache
# persists on their own (NOTE [Persisted joints] in joint_cache.py); what the frame entry needs is that the
# graph is one: the artifact says so (with the options), and `load` makes the JointGraph again without
# compiling anything (its joints load from the joint cache on first use, its inference kernels compile on
# the first call made without autograd, as in the cold process). Before, the frame was traced again in
# every warm process ("the backend could not save this graph").
def _save_training(compiled) -> bytes | None:
    from .. import joint
    from . import _InferenceOnFirstUse
    if not isinstance(compiled, joint.JointGraph) or not isinstance(compiled.inference, _InferenceOnFirstUse):
        return None
    options = compiled.inference.options
    try:
        encoded = json.loads(json.dumps(options))
    except (TypeError, ValueError):
        return None
    if encoded != options:
        return None
    return pack(KIND, {"revision": REVISION, "training": True, "options": encoded})


def _restore(data: bytes, gm: torch.fx.GraphModule) -> CompiledGraph | EagerGraph | DynamicGraph:
    meta, blobs = unpack(data, KIND)
    if meta.get("revision") != REVISION:  # made by an older code generator: compile again
        raise ArtifactError(f"triton artifact of revision {meta.get('revision')!r}, expected {REVISION}")
    if meta.get("training"):  # NOTE [Persisted training graphs]
        from . import training_graph
        return training_graph(gm, meta["options"])
    if "dynamic" in meta:
        return _load_dynamic(meta, blobs, gm)
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
    _register(path, kernels)
    compiled = CompiledGraph(gm, module, path, [], constants, [], out_spec, *counts, source=source)
    compiled.expected = expected
    return compiled


def _register(path: str, kernels: list) -> None:
    for name, signature, constexprs, kernel_source in kernels:
        runtime.KERNELS[(path, name)] = (dict(signature), dict(constexprs), kernel_source)


def _load_dynamic(meta: dict, blobs: dict, gm: torch.fx.GraphModule):
    """A `DynamicGraph` from a saved size-generic module (NOTE [Persisted size-generic modules])."""
    try:
        saved = meta["dynamic"]
        device = torch.device(saved["device"])
        problem = _device_problem({device})
        if problem is not None:
            runtime.log_once("eager_fallback", f"triton: running the graph eagerly: {problem}")
            return EagerGraph(gm, problem)
        if saved["opts"] is None:
            raise ArtifactError("the size-generic module was saved without its options")
        constants = [resolve_tensor(gm, c["path"], c["meta"]) if "path" in c
                     else tensor_from_bytes(blobs[c["blob"]]) for c in meta["constants"]]
        out_spec = spec_from_text(meta["out_spec"])
        source = blobs["module.py"].decode()
        bind = symbolic.compile_bind(saved["bind"])
        layout = symbolic.decode_layout(saved["layout"])
        module, path = runtime.load_module(source)
    except ArtifactError:
        raise
    except Exception as exc:  # a damaged field, or saved source that no longer imports
        raise ArtifactError(f"corrupt or incompatible triton artifact: {type(exc).__name__}: {exc}") from None
    _register(path, meta["kernels"])
    counts = (meta["kernel_count"], meta["extern_count"], list(meta["fallbacks"]))
    return DynamicGraph(gm, module, path, source, bind, saved["bind"], layout, frozenset(saved["ints"]), constants,
                        out_spec, counts, device, saved["opts"])


def _device_problem(devices: set) -> str | None:
    """Why kernels for these devices cannot run in this process (as the backend itself decides)."""
    from . import interpreting

    if any(d.type == "cuda" for d in devices) and not torch.cuda.is_available():
        raise ArtifactError("the artifact holds CUDA kernels and this process has no CUDA device")
    if any(d.type == "cpu" for d in devices) and not interpreting():
        return "CPU tensors and TRITON_INTERPRET is not set (Triton needs a GPU)"
    return None
