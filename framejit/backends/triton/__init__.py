"""framejit's optimizing backend: FX graph -> aten -> loop-level IR -> fused Triton kernels.

Pipeline (one module per stage, each small):
    lowering.py (+ lowering_pointwise.py, lowering_reductions.py)  FX -> aten (make_fx) -> ir.Graph
    scheduler.py                                                   fusion over a networkx DAG
    codegen.py                                                     one @triton.jit kernel per group
    wrapper.py                                                     the module: kernels + call()
    runtime.py                                                     files, loading, the callables

`triton(gm, example_inputs, options=None)` follows the torch.compile backend contract and never raises
for graphs it cannot handle: it returns an `EagerGraph` (the FX graph run as Python) and logs why on
`eager_fallback`. The returned callable exposes `kernel_count`, `extern_count` and `source_path`.
A graph that needs autograd (grad mode on, an input or weight requires grad) becomes a `JointGraph`
(backends/joint.py, `training_graph`): its forward and backward halves are each compiled as above.

Persistence (persist.py): `save(compiled) -> bytes | None` keeps the generated module source;
`load(data, gm, example_inputs)` imports it again, with no lowering, scheduling or code generation.

Options: `autotune` (bool, default False): let Triton pick among a few block sizes per kernel;
`persistent_reduction_limit` (int, default 1024): rows up to this many elements are reduced in
registers in one pass, longer rows in a loop.

Without a GPU: with CPU tensors and TRITON_INTERPRET=1 the kernels run in Triton's interpreter;
with CPU tensors otherwise the graph runs eagerly (logged once).
"""
from __future__ import annotations

import os

import torch

from framejit import logs
from framejit.backends import registry, symbolic
from framejit.backends.aliasing import alias_mutated_inputs, changes_metadata_in_place
from framejit.backends.checks import compile_checked
from framejit.backends.float_inputs import compile_with_float_tensors
from framejit.backends.size_floats import compile_with_size_floats
from framejit.backends.eager_raises import batch_norm_dtypes_rejected
from framejit.backends.state import eager_only_reason, enters_inference_mode, leaves_inference_mode, off_device_outputs, switches_grad_on
from framejit.backends.state import higher_order_reason

from ...grad_mode import grad_mode
from . import lowering_pointwise, lowering_reductions  # noqa: F401  (register lowerings)
from . import dynamic
from .codegen import choose_config, generate_kernel
from .lowering import GraphNotLowerable, lower, to_aten
from .persist import load, save
from .runtime import CompiledGraph, EagerGraph, load_module, needs_autograd, register_kernels
from .scheduler import FusedGroup, describe, schedule
from .wrapper import generate_module

OPTIONS = {"autotune": bool, "persistent_reduction_limit": int}
DEFAULTS = {"autotune": False, "persistent_reduction_limit": 1024}


def _options(options) -> dict:
    if options is None:
        return dict(DEFAULTS)
    if not isinstance(options, dict):
        raise TypeError(f"triton backend: options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"triton backend: unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"accepted: {', '.join(OPTIONS)}")
    for key, value in options.items():
        if not isinstance(value, OPTIONS[key]) or (OPTIONS[key] is int and isinstance(value, bool)):
            raise TypeError(f"triton backend: option {key!r} must be {OPTIONS[key].__name__}, got {value!r}")
    if options.get("persistent_reduction_limit", 1) < 1:
        raise ValueError("triton backend: option 'persistent_reduction_limit' must be >= 1")
    return {**DEFAULTS, **options}


def check_options(options) -> None:
    """Raise TypeError/ValueError naming the bad key and the accepted ones (registry.check_options)."""
    _options(options)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def _device_problem(example_inputs) -> tuple[str | None, torch.device | None]:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if len(tensors) != len(example_inputs):
        return "a graph input is not a tensor", None
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        return f"inputs live on several devices {sorted(map(str, devices))}", None
    device = devices.pop() if devices else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not interpreting():
        return "CPU tensors and TRITON_INTERPRET is not set (Triton needs a GPU)", None
    if device.type not in ("cpu", "cuda"):
        return f"device {device} is not supported", None
    return None, device


def triton(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """Compile `gm` into fused Triton kernels; see the module docstring."""
    opts = _options(options)
    # NOTE [Floats of sizes as inputs] (backends/size_floats.py)
    with_size_floats = compile_with_size_floats(gm, example_inputs,
                                                lambda graph, examples: triton(graph, examples, options),
                                                lambda why: logs.log("recompiles", "triton: %s", why))
    if with_size_floats is not None:
        return with_size_floats
    # NOTE [Float inputs as tensors] (backends/float_inputs.py)
    with_floats = compile_with_float_tensors(gm, example_inputs, lambda graph, examples: triton(graph, examples, options),
                                             lambda why: logs.log("eager_fallback", "triton: float inputs stay floats: %s", why))
    if with_floats is not None:
        return with_floats
    # NOTE [Run-time checks as outputs] (backends/checks.py)
    return compile_checked(gm, lambda graph: _compile(graph, example_inputs, opts, options))


def _compile(gm: torch.fx.GraphModule, example_inputs, opts: dict, options: dict | None):
    size_inputs = symbolic.symbolic_int_positions(gm)  # ints that are sizes (NOTE [Size-generic modules])
    # NOTE [Int inputs fixed by the frontend], NOTE [Plain int inputs]
    fixed_ints = symbolic.constant_int_positions(gm) | (_plain_int_positions(gm, example_inputs) - size_inputs)
    problem, device = _device_problem([v for i, v in enumerate(example_inputs)
                                       if i not in size_inputs | fixed_ints])
    training = problem is None and needs_autograd(example_inputs, any(p.requires_grad for p in gm.parameters()),
                                                  switches_grad_on(gm))
    if problem is None:  # NOTE [Storage read after a write] in backends/symbolic.py
        problem = symbolic.storage_read_after_a_write(gm)
    if problem is None and changes_metadata_in_place(gm):
        problem = "the graph changes a tensor's shape or strides in place (x.t_()); eager does that exactly"
    if problem is None:  # NOTE [Calls that run as torch runs them] in backends/state.py
        problem = eager_only_reason(gm) or higher_order_reason(gm)
    if problem is None and enters_inference_mode(gm):
        problem = "the graph enters torch.inference_mode() (its outputs must be inference tensors, as in eager)"
    if problem is None and leaves_inference_mode(gm):  # NOTE [Graphs that leave inference mode] in state.py
        problem = "the graph has an inference_mode(False) block (under an outer inference_mode its values are normal tensors)"
    if problem is None and (off := off_device_outputs(gm, device)):  # NOTE [Tensors on another device] in state.py
        problem = f"the graph returns tensors on {', '.join(off)}, its kernels run on {device}"
    if problem is None and (rejected := batch_norm_dtypes_rejected(gm)):  # NOTE [Dtypes eager's batch norm
        problem = rejected  # rejects] in backends/eager_raises.py: eager's kernel raises its own error
    if problem is not None:
        # once per compiled graph (log_once would hide it for every later graph with the same reason)
        logs.log("eager_fallback", "triton: running the graph eagerly: %s", problem)
        return EagerGraph(gm, problem)
    if training:  # forward and backward kernels, inference kernels compiled on first use (backends/joint.py)
        return training_graph(gm, options)
    if symbolic.is_symbolic(gm):
        try:
            return dynamic.compile_dynamic(gm, list(example_inputs), device, opts)
        except dynamic.NotGeneric as why:
            logs.log("recompiles", "triton: no size-generic module; the graph compiles per shape: %s", why)
            return dynamic.SpecialisingGraph(gm, device, opts, str(why), size_inputs | fixed_ints)
        except Exception as error:  # internal failures never reach the user
            logs.log("eager_fallback", "triton: compiling failed (%s: %s); running the graph eagerly",
                     type(error).__name__, error)
            return EagerGraph(gm, f"internal error: {type(error).__name__}: {error}")
    if fixed_ints:
        return dynamic.SpecialisingGraph(gm, device, opts, "int inputs are baked in (one compilation per value)",
                                         fixed_ints)
    try:
        return compile_graph(gm, list(example_inputs), device, opts)
    except GraphNotLowerable as why:
        logs.log("eager_fallback", "triton: running the graph eagerly: %s", why)
        return EagerGraph(gm, str(why))
    except Exception as error:  # NOTE: internal failures never reach the user; eager is always right
        logs.log("eager_fallback", "triton: compiling failed (%s: %s); running the graph eagerly",
                 type(error).__name__, error)
        return EagerGraph(gm, f"internal error: {type(error).__name__}: {error}")


# NOTE [Int inputs fixed by the frontend]: an int argument made symbolic after it changed (NOTE [Dynamic
# ints]) stays a graph input when a later trace specialises it (`torch.ones(n)` with n == 1: the env
# guards n == 1 and the placeholder's SymInt is the number 1). The lowering takes tensors only, so such a
# graph ran eagerly ('a graph input is not a tensor'); its ints are baked in per call signature like size
# ints (SpecialisingGraph, `_IntsBaked`), which the frontend's guards make one signature.
# NOTE [Plain int inputs]: the halves of a joint (training_graph) take the Python ints of the call (an HF-style
# decoder block's position offset) as placeholders with no symbolic value (AOT autograd traces per input
# signature, ints by value: backends/joint.py `_signature`), so every training graph with an int argument
# ran its halves eagerly ('a graph input is not a tensor'). An int input whose placeholder is not a symbolic
# size is baked in like a fixed int (SpecialisingGraph, one compilation per value of the ints, which the
# joint's signature makes one), also when a graph is handed to the backend directly.
def _plain_int_positions(gm, example_inputs) -> frozenset:
    vals = symbolic.placeholder_vals(gm)
    return frozenset(i for i, (val, real) in enumerate(zip(vals, example_inputs))
                     if type(real) is int and not isinstance(val, (torch.SymFloat, torch.SymBool)))


def _materialized(example_inputs) -> list:
    """Real tensors with the examples' sizes, strides, dtypes and devices (AOT autograd hands its compilers
    fake tensors of its own fake mode; lowering traces with a fake mode of its own)."""
    return [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device) if isinstance(t, torch.Tensor)
            else t for t in example_inputs]


class _InferenceOnFirstUse:
    """The inference kernels of a training graph, compiled on the first call made without autograd."""

    def __init__(self, gm, options):
        self.gm, self.options, self.compiled = gm, options, None

    def __call__(self, *args):
        if self.compiled is None:
            with grad_mode(False):
                self.compiled = triton(self.gm, [a.detach() if isinstance(a, torch.Tensor) else a for a in args],
                                       self.options)
        return self.compiled(*args)


def training_graph(gm, options=None):
    """`gm` as a JointGraph (backends/joint.py): calls that need autograd run forward and backward kernels
    lowered from the joint graph's two halves; other calls run inference kernels."""
    from framejit.backends import joint

    def compile_part(graph, examples):
        compiled = triton(graph, _materialized(examples), options)
        if isinstance(compiled, (CompiledGraph, dynamic.SpecialisingGraph)):
            compiled.restride_inputs = True  # NOTE [Restrided inputs of training halves] (runtime.py)
        return compiled
    return joint.JointGraph(gm, compile_part, "triton", inference=_InferenceOnFirstUse(gm, options),
                            decompositions=joint.training_decompositions(with_backward_ops=True),
                            persistence=_persistence(options),  # NOTE [Persisted joints] in backends/joint_cache.py
                            lstm_layers=True,  # NOTE [LSTM layers in training graphs] in backends/recurrent.py
                            lean=True)  # NOTE [Lean joint calls] in backends/joint_function.py


def _persistence(options):
    """Triton halves persist as any triton artifact (persist.py) and load with their inputs restrided, as
    compile_part makes them; the version names the code generator's revision, Triton's version and the options."""
    import json

    import triton as triton_package

    from framejit.backends import joint
    from .persist import REVISION, _restore

    def load_half(data: bytes, gm):
        compiled = _restore(data, gm)
        if isinstance(compiled, CompiledGraph):
            compiled.restride_inputs = True  # NOTE [Restrided inputs of training halves] (runtime.py)
        return compiled
    version = f"triton REVISION={REVISION} triton={triton_package.__version__} " + json.dumps(
        options or {}, sort_keys=True, default=repr)
    return joint.Persistence(version, save, load_half)


def compile_graph(gm, example_inputs, device: torch.device, opts: dict) -> CompiledGraph:
    with grad_mode(False):
        aten_gm = to_aten(gm, example_inputs)
    alias_mutated_inputs(aten_gm)  # returned views of mutated inputs stay views of the inputs
    graph, fallbacks = lower(aten_gm)
    sched = schedule(graph)
    buffers = graph.buffers()
    kernels = {}
    for step in sched.steps:
        if isinstance(step, FusedGroup) and step.xnumel * step.rnumel > 0:
            config = choose_config(step, device.type == "cpu", opts["persistent_reduction_limit"])
            kernels[step.name] = generate_kernel(step, buffers, config)
    summary = describe(sched)
    source, extra = generate_module(sched, kernels, device, opts["autotune"], summary)
    module, path = load_module(source)
    register_kernels(path, kernels.values())
    logs.log("output_code", "triton: %s\n%s", path, source)
    externs = sum(1 for s in sched.steps if not isinstance(s, FusedGroup))
    constants = [graph.constants[name] for name in graph.constants]
    return CompiledGraph(gm, module, path, example_inputs, constants, extra, graph.output_spec,
                         len(kernels), externs, fallbacks, source)


registry.make_module_callable(__name__, "triton")
