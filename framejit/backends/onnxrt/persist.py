"""Persisting what the onnxrt backend compiled: `save(compiled) -> bytes | None` and
`load(data, gm, example_inputs) -> OnnxrtCompiled` (the contract is in backends/artifact.py; a `CheckedGraph`
over one when `gm` has run-time checks: NOTE [Run-time checks as outputs] in backends/checks.py).

What is saved, per input signature of an `OnnxrtCompiled` (compiler.py):
- the signature itself (dtypes, shapes, strides, devices, Python scalars);
- the program: the Python source FX generated for the partitioned top graph (eager aten ops and calls
  of `ort_<i>` parts) with the imports it needs, the ONNX model bytes of every part with its output
  metadata (and, for a part with frozen weights, the model rewritten with them as initializers, so that
  a warm process never imports `onnx`: NOTE [Frozen models are cached] in runtime.py), the attribute
  paths in `gm` of the state tensors (weights are never saved: NOTE [Weights are inputs]), tensor
  constants created while tracing, and the output structure (a pytree spec);
- or the fact that this signature runs eagerly (tracing failed once; a new process need not retry);
- symbolic programs (NOTE [One program for every size] in compiler.py) under their layout (dtypes,
  ranks, devices, contiguity) with the source of their size check (`bind`), which is compiled again on
  load: a warm process serves every size the check accepts without lowering.
The options the programs were built under are saved too (session settings, fallback ops), and the
backend's `REVISION` (compiler.py): an artifact of another revision is refused with ArtifactError.

`load` executes the saved top-graph source, creates one ORT session per part from the saved bytes (a
part with frozen weights, NOTE [Frozen weights], on its first call, when the weights are at hand) and
returns an `OnnxrtCompiled` that already holds those programs: no make_fx, no partitioning, no
translation. A signature it does not hold is compiled on its first call, as always.

Invariants: a signature that cannot be written as JSON (an input of an unusual type) is skipped; a
compiled object with nothing worth saving gives None; loading checks every state tensor's dtype and
shape against `gm` and raises ArtifactError on any mismatch or damage.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx

from ..artifact import (ArtifactError, dtype_from_text, get_path, pack, resolve_tensor, spec_from_text,
                        spec_to_text, tensor_from_bytes, tensor_meta, tensor_to_bytes, unpack)
from .. import symbolic
from ..checks import CheckedGraph, compile_checked, unchecked
from ..float_inputs import FloatInputsGraph, load_float_inputs, save_float_inputs
from .compiler import REVISION, OnnxrtCompiled, Program, one_part_layout
from .options import OnnxrtOptions, parse_options
from . import runtime

KIND = "onnxrt"
_SCALAR_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "NoneType": type(None)}


class RestoredGraph(torch.nn.Module):
    """A top graph rebuilt from FX's generated source: `forward` is that code, bound to this module,
    whose attributes are the ORT parts (`ort_<i>`) and trace-time tensor constants it reads."""

    def __init__(self, code: str, imports: str, attributes: dict):
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)
        self.code, self.imports, self.attribute_names = code, imports, list(attributes)
        namespace: dict = {}
        exec(compile(imports + "\n" + code, "<framejit onnxrt restored graph>", "exec"), namespace)
        self._forward = namespace["forward"]

    def forward(self, *args):
        return self._forward(self, *args)


# NOTE [Restored graphs keep the one-part path]: a program whose top graph only calls one ORT part on its
# inputs is called through that part directly (`_one_part` in compiler.py, NOTE [Per-call path]); the
# test reads the FX graph, which a restored top graph (FX's source, exec'd) no longer has, so a warm
# process ran every such program through the generated forward (~2 us more per call on a 4-layer MLP).
# The layout (the part's name and its arguments' positions) is saved with the program and given back to
# the restored graph as `one_part`; an artifact without it (written before) takes the generic path.


# -- save -----------------------------------------------------------------------------------------
def save(compiled) -> bytes | None:
    """The artifact of an `OnnxrtCompiled`, or None when it holds nothing that can be persisted."""
    if isinstance(compiled, FloatInputsGraph):  # NOTE [Persisted float inputs] (float_inputs.py)
        return save_float_inputs(compiled, save)
    compiled = unchecked(compiled)  # NOTE [Run-time checks as outputs]: `load` wraps it again
    if not isinstance(compiled, OnnxrtCompiled):
        return None
    blobs: dict[str, bytes] = {}
    programs = []
    for sig, program in compiled.programs.items():
        encoded = _encode_signature(sig)
        if encoded is None:
            continue
        if program is None:
            programs.append({"signature": encoded, "eager": True})
            continue
        program_blobs: dict[str, bytes] = {}
        saved = _save_program(program, len(programs), program_blobs)
        if saved is not None:
            programs.append({"signature": encoded, "eager": False, **saved})
            blobs.update(program_blobs)
    dynamic = []
    for layout, entries in compiled.dynamic_programs.items():
        encoded = symbolic.encode_layout(layout)
        for _, program in entries if encoded is not None else ():
            program_blobs = {}
            saved = _save_program(program, len(programs) + len(dynamic), program_blobs)
            if saved is not None:
                dynamic.append({"layout": encoded, "bind": program.bind_source, **saved})
                blobs.update(program_blobs)
    if not programs and not dynamic:
        return None
    meta = {"revision": REVISION, "options": options_to_json(compiled.opts), "programs": programs,
            "dynamic": dynamic, "out_layouts": _layouts_to_json(compiled._out_layouts)}
    return pack(KIND, meta, blobs)


def _save_program(program: Program, index: int, blobs: dict[str, bytes]) -> dict | None:
    from torch.fx.graph_module import _format_import_block
    from torch.package import sys_importer

    top = program.graph_module
    if not isinstance(top, (torch.fx.GraphModule, RestoredGraph)):
        return None
    try:
        if isinstance(top, RestoredGraph):
            code, imports = top.code, top.imports
        else:
            python_code = top.graph.python_code(root_module="self")
            code, imports = python_code.src, _format_import_block(python_code.globals, sys_importer)
        out_spec = spec_to_text(program.out_spec)
    except Exception:  # a global FX cannot name as an import, a pytree type without serialisation
        return None
    parts, constants = [], []
    for name, child in _attributes(top):
        if "." in name:  # a nested attribute: not made by the partitioner, not worth supporting
            return None
        if isinstance(child, runtime.OrtPart):
            blob = f"p{index}.{name}"
            blobs[blob] = child.model
            part = {"name": name, "blob": blob, "single_output": child.single_output,
                    "outputs": [[str(dtype), [s if isinstance(s, int) else str(s) for s in shape]]
                                for dtype, shape in child.output_meta],
                    "inputs": child.input_names, "frozen": list(child.frozen_positions),
                    "compared": list(child.compared_positions)}
            frozen_model = child.frozen_bytes()
            if frozen_model is not None:  # NOTE [Frozen models are cached] in runtime.py
                part["frozen_blob"] = blob + ".frozen"
                blobs[blob + ".frozen"] = frozen_model
            parts.append(part)
        elif isinstance(child, torch.Tensor):
            blob = f"p{index}.{name}"
            blobs[blob] = tensor_to_bytes(child)
            constants.append({"name": name, "blob": blob})
        else:
            return None
    state = [[path, tensor_meta(t)] for path, t in zip(program.state_names, program.state)]
    device = next((str(p.device) for _, p in _attributes(top) if isinstance(p, runtime.OrtPart)), "cpu")
    return {"code": code, "imports": imports, "out_spec": out_spec, "parts": parts, "constants": constants,
            "one_part": one_part_layout(top),
            "state": state, "device": device, "num_parts": program.num_parts, "ort_nodes": program.ort_nodes,
            "eager_nodes": program.eager_nodes, "build_seconds": program.build_seconds, "draws": program.draws}


def _attributes(top: torch.nn.Module) -> list[tuple[str, object]]:
    """The submodules and tensor attributes the top graph's code reads (`self.<name>`)."""
    if isinstance(top, RestoredGraph):
        return [(name, getattr(top, name)) for name in top.attribute_names]
    targets = [node.target for node in top.graph.nodes if node.op in ("call_module", "get_attr")]
    return [(target, get_path(top, target)) for target in dict.fromkeys(targets)]


def _encode_signature(sig: tuple) -> list | None:
    encoded = []
    for item in sig:
        if len(item) == 4 and isinstance(item[0], torch.dtype):
            dtype, shape, stride, device = item
            encoded.append(["tensor", str(dtype), list(shape), list(stride), str(device)])
        elif len(item) == 2 and isinstance(item[0], type) and item[0].__name__ in _SCALAR_TYPES \
                and item[0] is _SCALAR_TYPES[item[0].__name__]:
            encoded.append(["scalar", item[0].__name__, item[1]])
        else:  # keyed by object identity: meaningless in another process
            return None
    return encoded


def options_to_json(opts: OnnxrtOptions) -> dict:
    values = dataclasses.asdict(opts)
    values["providers"] = None if opts.providers is None else list(opts.providers)
    values["fallback_ops"] = sorted(opts.fallback_ops)
    return {key: value for key, value in values.items() if value is not None}  # None: the default


# -- load -----------------------------------------------------------------------------------------
def load(data: bytes, gm: torch.fx.GraphModule, example_inputs=None) -> OnnxrtCompiled | CheckedGraph:
    """Rebuild the compiled graph saved by `save` for `gm`, without lowering or translating.

    `example_inputs` is accepted for the common signature of backend loaders and not needed here: the
    programs are keyed by the input signatures they were built for."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"onnxrt load(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    with_floats = load_float_inputs(data, gm, example_inputs, load)  # NOTE [Persisted float inputs]
    if with_floats is not None:
        return with_floats
    return compile_checked(gm, lambda graph: _restore(data, graph))  # NOTE [Run-time checks as outputs]


def _restore(data: bytes, gm: torch.fx.GraphModule) -> OnnxrtCompiled:
    meta, blobs = unpack(data, KIND)
    if meta.get("revision") != REVISION:  # made by an older lowering: compile again
        raise ArtifactError(f"onnxrt artifact of revision {meta.get('revision')!r}, expected {REVISION}")
    try:
        opts = parse_options(meta["options"])
        programs = {}
        for saved in meta["programs"]:
            sig = _decode_signature(saved["signature"])
            programs[sig] = None if saved["eager"] else _load_program(saved, blobs, gm, opts)
        dynamic: dict = {}
        for saved in meta.get("dynamic", ()):
            program = _load_program(saved, blobs, gm, opts)
            program.bind_source = saved["bind"]
            layout = symbolic.decode_layout(saved["layout"])
            dynamic.setdefault(layout, []).append((symbolic.compile_bind(saved["bind"]), program))
    except ArtifactError:
        raise
    except Exception as exc:  # a damaged field, generated code that no longer compiles, ORT refusing
        raise ArtifactError(f"corrupt or incompatible onnxrt artifact: {type(exc).__name__}: {exc}") from None
    compiled = OnnxrtCompiled.restored(gm, opts, programs, dynamic)
    if meta.get("out_layouts") is not None:  # NOTE [Output strides follow eager]: a loaded graph has no meta["val"]
        compiled._out_layouts = {int(k): (tuple(order), None if exact is None else tuple(exact))
                                 for k, order, exact in meta["out_layouts"]} or None
    return compiled


def restore_unchecked(data: bytes, gm: torch.fx.GraphModule) -> OnnxrtCompiled:
    """`load` for a graph without run-time checks (a training half: checks leave graphs before joints)."""
    return _restore(data, gm)


def _layouts_to_json(layouts: dict | None) -> list:
    return [[k, list(order), None if exact is None else list(exact)] for k, (order, exact) in (layouts or {}).items()]


def _decode_signature(encoded: list) -> tuple:
    sig = []
    for item in encoded:
        if item[0] == "tensor":
            _, dtype, shape, stride, device = item
            sig.append((dtype_from_text(dtype), torch.Size(shape), tuple(stride), torch.device(device)))
        elif item[0] == "scalar":
            sig.append((_SCALAR_TYPES[item[1]], item[2]))
        else:
            raise ArtifactError(f"unknown signature item {item[0]!r}")
    return tuple(sig)


def _load_program(saved: dict, blobs: dict[str, bytes], gm: torch.fx.GraphModule, opts: OnnxrtOptions) -> Program:
    device = torch.device(saved["device"])
    attributes: dict = {}
    for part in saved["parts"]:
        model, session = blobs[part["blob"]], None
        if not part["frozen"]:  # a part with frozen weights makes its session on its first call
            try:
                session = runtime.make_session(model, opts, device)
            except runtime.SessionLoadError as exc:
                raise ArtifactError(f"ONNX Runtime cannot load part {part['name']}: {exc}") from None
        output_meta = [(dtype_from_text(d), tuple(shape)) for d, shape in part["outputs"]]
        frozen_model = blobs[part["frozen_blob"]] if part.get("frozen_blob") else None
        attributes[part["name"]] = runtime.OrtPart(session, model, part["single_output"], output_meta, device,
                                                   part["inputs"], opts, tuple(part["frozen"]), frozen_model,
                                                   tuple(part["compared"]))
    for constant in saved["constants"]:
        attributes[constant["name"]] = tensor_from_bytes(blobs[constant["blob"]])
    top = RestoredGraph(saved["code"], saved["imports"], attributes)
    if saved.get("one_part"):  # NOTE [Restored graphs keep the one-part path]
        name, positions = saved["one_part"]
        top.one_part = (name, list(positions))
    state = [resolve_tensor(gm, path, meta) for path, meta in saved["state"]]
    return Program(top, state, [path for path, _ in saved["state"]], spec_from_text(saved["out_spec"]),
                   saved["num_parts"], saved["ort_nodes"], dict(saved["eager_nodes"]), saved["build_seconds"],
                   draws=saved.get("draws", True))  # NOTE [A failed run draws again]: not known, so kept
