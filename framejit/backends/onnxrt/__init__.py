"""The `onnxrt` backend: FX graph -> ONNX models -> ONNX Runtime sessions, with eager torch for the rest.

Usage: `framejit.compile(m, backend="onnxrt", options={...})`, or
`torch.compile(m, backend=framejit.backends.onnxrt)` (this module is callable). Options are listed in
`options.py`; unknown keys raise ValueError naming the accepted ones.

How a graph is compiled (per input signature, see compiler.py):
1. lowering.py: make_fx under fake tensors + functionalize + torch._decomp -> a flat aten graph whose
   first inputs are the weights (weights are never baked into models: NOTE [Weights are inputs]).
2. partition.py: capability-based partitioning; nodes torchlib cannot translate, that use dtypes ORT
   does not run, or that mutate memory stay in eager torch; every fallback is logged with its reason.
3. translate.py: each part is translated node by node with onnxscript's torchlib functions into an
   ONNX model (bytes: the artifact stored in framejit's persistent cache).
4. runtime.py: one InferenceSession per part, created once and reused; numpy views in and out
   (NOTE [Zero-copy I/O]); idle ORT workers spin at most `spin_duration_us` (NOTE [Bounded spinning]); weights
   are session constants, rebuilt when they change (NOTE [Frozen weights]).

NOTE [Export route]
Choice: a direct translation of framejit's own make_fx graph with torchlib (via torch's ONNX registry
and op recorder; NOTE [Private torch.onnx pieces]), not `torch.onnx.export`. Measured on this 2-core
machine (torch 2.13, onnxscript 0.7.2), for a Linear-GELU-LayerNorm-Linear MLP:
`torch.onnx.export(dynamo=True)` 1.7-3.4 s per small graph (it runs torch.export); TorchScript
exporter (`dynamo=False`, deprecated) 0.08-0.28 s; this route: make_fx with fake tensors 0.05-0.65 s
(the first trace in a process pays torch's warm-up), translation 4 ms, session creation 3 ms, plus a
one-time 0.55 s to build the torchlib registry. Translation reuses torchlib's op coverage (~500 aten
ops) instead of hand-written ONNX patterns.

Persistence (persist.py): `save(compiled) -> bytes | None` and `load(data, gm, example_inputs)` write
and rebuild the per-signature programs (model bytes, plan of eager parts) without lowering again.

Eager semantics: where ORT's operators differ from torch (NaN in max/argmax, sign(nan), broadcasting
copies), the lowered graph is rewritten first (semantics.py, NOTE [Eager semantics in ONNX]); reductions
of empty tensors run in torch; returned views of inputs or outputs are made in torch, so they alias as
in eager (partition.py, NOTE [Returned views stay views]). Bad `options` raise (`check_options` runs
at `framejit.compile`).

Training: a graph that needs gradients runs through its joint (backends/joint.py): a forward and a
backward graph, each compiled as above into its own ORT program (training.py: the halves AOT autograd
calls; NOTE [Direct calls of training halves]), glued by one autograd.Function.

Limits: bfloat16 and complex ops run in eager torch; ops with
data-dependent output shapes (nonzero) are traced with unbacked sizes, and where that tracing fails the
whole graph runs eagerly (logged).
"""
from __future__ import annotations

from ..checks import compile_checked
from ..float_inputs import compile_with_float_tensors
from ...logs import log
from ..registry import make_module_callable
from .compiler import OnnxrtCompiled
from .options import ACCEPTED_KEYS, OnnxrtOptions, parse_options
from .persist import load, save

__all__ = ["onnxrt", "OnnxrtCompiled", "OnnxrtOptions", "ACCEPTED_KEYS", "check_options", "load", "save"]


def check_options(options) -> None:
    """Raise TypeError/ValueError naming the bad key and the accepted ones (registry.check_options)."""
    parse_options(options)


def onnxrt(gm, example_inputs, options=None):
    """Compile `gm` for ONNX Runtime; returns a callable with `gm`'s calling convention and results."""
    import torch

    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"onnxrt(gm): gm must be a torch.fx.GraphModule, got {type(gm).__name__}")
    opts = parse_options(options)
    # NOTE [Float inputs as tensors] (backends/float_inputs.py)
    with_floats = compile_with_float_tensors(gm, example_inputs, lambda graph, examples: onnxrt(graph, examples, options),
                                             lambda why: log("eager_fallback", "onnxrt: float inputs stay floats: %s", why))
    if with_floats is not None:
        return with_floats
    # NOTE [Run-time checks as outputs] (backends/checks.py)
    return compile_checked(gm, lambda graph: OnnxrtCompiled(graph, example_inputs, opts))


make_module_callable(__name__, "onnxrt")
