"""Runtime of the triton backend: kernel files, module loading, and the callables it returns.

Generated modules are written to real `.py` files (Triton refuses `@jit` functions defined from
strings) named by the hash of their source, under `config.dump_dir/triton` when set, else under one
temporary directory per process; then imported with importlib. A module is loaded once per process
and source (`_MODULES`); Triton's own cache keeps compiled binaries across processes.

`CompiledGraph` checks on each call that the inputs still have the shapes, strides and dtypes the
kernels were specialized for, and that no autograd is needed; otherwise it runs the FX graph eagerly
(logged once per reason). `EagerGraph` is what the backend returns when it cannot compile at all.
`KERNELS` records every generated kernel (file, name, signature, block sizes) so tests can compile
them all offline for a real GPU target.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile

import torch
import torch.utils._pytree as pytree

from framejit import config, logs
from framejit.backends.layout import output_layouts, restore as restore_layouts
from framejit.backends.state import switches_grad_on

_MODULES: dict = {}
_TEMP_DIR: list = []
KERNELS: dict = {}  # (path, kernel name) -> (signature, constexprs, kernel source)
_LOGGED: set = set()


def log_once(artifact: str, message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        logs.log(artifact, "%s", message)


def kernel_dir() -> str:
    if config.dump_dir:
        path = os.path.join(config.dump_dir, "triton")
        os.makedirs(path, exist_ok=True)
        return path
    if not _TEMP_DIR:
        path = tempfile.mkdtemp(prefix="framejit-triton-")
        _TEMP_DIR.append(path)
        atexit.register(shutil.rmtree, path, True)
    return _TEMP_DIR[0]


def load_module(source: str):
    """Write `source` to `graph_<hash>.py` (atomically) and import it; cached per process."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    path = os.path.join(kernel_dir(), f"graph_{digest}.py")
    cached = _MODULES.get(path)
    if cached is not None:
        return cached, path
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"framejit_triton_graph_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _MODULES[path] = module
    return module, path


def register_kernels(path: str, kernels) -> None:
    for kernel in kernels:
        constexprs = {"XBLOCK": kernel.config.xblock}
        if "RBLOCK" in kernel.signature:
            constexprs["RBLOCK"] = kernel.config.rblock
        KERNELS[(path, kernel.name)] = (dict(kernel.signature), constexprs, kernel.source)


def _offset(t) -> int | None:
    return t.storage_offset() if isinstance(t, torch.Tensor) else None


def _input_key(t) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else (type(t), t)


# NOTE [Restrided inputs of training halves]
# The halves of a joint (backends/joint.py) are compiled for the strides AOT autograd traced, but the
# forward half's kernels may return a tensor with other strides than the trace said (transformers' llama:
# the attention output saved for the backward was traced as (256, 16, 32, 1) and came back contiguous),
# and the backward half then ran eagerly on every call. A half's inputs are read-only values (parameters,
# inputs, saved tensors, output gradients) whose aliasing nobody observes through the half, so an input of
# the right shape, dtype and device with other strides is copied into a tensor with the compiled strides
# (`restride_inputs`, set for joint halves only: an inference graph may return views of its inputs).
# Expected strides with overlaps (a 0 stride) are not made: such calls run eagerly, logged, as before.
def _restrided(args, expected: list) -> list | None:
    """`args` with each tensor whose strides differ from `expected` copied into the expected strides; None
    when anything else differs."""
    restrided = []
    for arg, key in zip(args, expected):
        actual = _input_key(arg)
        if actual == key:
            restrided.append(arg)
            continue
        if not isinstance(arg, torch.Tensor) or actual[0] != key[0] or actual[2:] != key[2:] or 0 in key[1]:
            return None
        restrided.append(torch.empty_strided(key[0], key[1], dtype=key[2], device=key[3]).copy_(arg))
    return restrided


def needs_autograd(args, params_require_grad: bool, grad_inside: bool = False) -> bool:
    """Autograd would record the call: grad mode is on (at the call, or switched on inside the graph:
    backends/state.py) and an input or weight requires grad."""
    if not (torch._C.is_grad_enabled() or grad_inside):
        return False
    return params_require_grad or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


class EagerGraph:
    """Runs the FX graph as Python, with the reason it was not compiled."""

    kernel_count = 0
    extern_count = 0
    source_path = None

    def __init__(self, gm: torch.fx.GraphModule, reason: str):
        self.gm, self.reason = gm, reason

    def __call__(self, *args):
        return self.gm.forward(*args)


# NOTE [Input writes of a failing kernel program]: the kernels run a functionalised graph, whose writes into
# its inputs (`x.add_(1)`) are `copy_` calls made after the values they write are computed. A program that
# raises at run time (an index out of range, found only by the kernel or an extern op) has then written no
# input, where eager, running op by op, made every write before the failing op (and the frontend's replay of
# the frame's other effects, NOTE [Effects before a failing graph], assumes the graph did what eager did). So
# a program whose graph writes its inputs and draws no random numbers is rerun as the captured graph, op by
# op, when it raises and no input's version moved during the failed call (a moved version means some write
# already happened: the error is raised as it is). The rerun makes eager's writes and raises eager's own
# exception; were the failure the program's own, the rerun returns eager's outputs.
def rerun_on_error(gm) -> bool:
    from framejit.capture.requests import draws_random, mutates_in_place
    return mutates_in_place(gm) and not any(
        node.op in ("call_function", "call_method") and draws_random(node.target, node.args, node.kwargs)
        for node in gm.graph.nodes)


def written_versions(rerun: bool, args) -> list | None:
    if not rerun:
        return None
    try:
        return [a._version for a in args if isinstance(a, torch.Tensor)]
    except RuntimeError:  # an inference tensor has no counter (under inference_mode): a write cannot be seen
        return None


def rerun_exactly(rerun: bool, args, versions: list | None) -> bool:
    return rerun and versions is not None and versions == [a._version for a in args if isinstance(a, torch.Tensor)]


class CompiledGraph:
    """Generated kernels for one graph, specialized to the example inputs' shapes and strides."""

    def __init__(self, gm, module, path: str, example_inputs, constants: list, extra: list, out_spec,
                 kernel_count: int, extern_count: int, fallbacks: list, source: str | None = None):
        self.gm, self.module, self.source_path, self.source = gm, module, path, source
        self.expected = [_input_key(t) for t in example_inputs]
        self.constants, self.extra, self.out_spec = constants, extra, out_spec
        self.kernel_count, self.extern_count, self.fallbacks = kernel_count, extern_count, fallbacks
        self.params_require_grad = any(p.requires_grad for p in gm.parameters()) or \
            any(t.requires_grad for t in constants)
        self.grad_inside = switches_grad_on(gm)
        self.reason = None
        self.runs = 0  # calls that ran the kernels (tests: proof a graph ran compiled)
        self._training = None  # backends/joint.py JointGraph, made when a call needs autograd
        self.restride_inputs = False  # NOTE [Restrided inputs of training halves]
        # NOTE [Storage offsets read by the graph] (backends/onnxrt/compiler.py): kernels bake the example's
        # offsets in; a graph that reads them runs eagerly for other offsets
        from ..symbolic import reads_storage_offset
        self.offsets = [_offset(t) for t in example_inputs] if reads_storage_offset(gm) else None
        self.out_layouts = output_layouts(gm)  # NOTE [Output strides follow eager] (backends/layout.py)
        self.rerun_on_error = rerun_on_error(gm)  # NOTE [Input writes of a failing kernel program]

    def __call__(self, *args):
        if needs_autograd(args, self.params_require_grad, self.grad_inside):
            if self._training is None:  # compiled for inference, now trained: forward and backward kernels
                from . import training_graph
                self._training = training_graph(self.gm)
            return self._training(*args)
        if self.offsets is not None and [_offset(a) for a in args] != self.offsets:
            log_once("eager_fallback", f"triton: graph at {self.source_path} runs eagerly: it reads storage "
                                       "offsets, which differ from those it was compiled for")
            return self.gm.forward(*args)
        if len(args) != len(self.expected) or any(_input_key(a) != k for a, k in zip(args, self.expected)):
            restrided = _restrided(args, self.expected) if self.restride_inputs else None
            if restrided is None:
                log_once("eager_fallback", f"triton: graph at {self.source_path} runs eagerly: inputs differ "
                                           "from the shapes/strides/dtypes it was compiled for")
                return self.gm.forward(*args)
            args = restrided
        self.runs += 1
        versions = written_versions(self.rerun_on_error, args)
        try:
            flat = self.module.call(*args, *self.constants, self.extra)
        except Exception:
            if rerun_exactly(self.rerun_on_error, args, versions):
                return self.gm.forward(*args)  # NOTE [Input writes of a failing kernel program]
            raise
        return restore_layouts(pytree.tree_unflatten(list(flat), self.out_spec), self.out_layouts, args)
