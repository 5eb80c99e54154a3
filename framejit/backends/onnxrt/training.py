"""The onnxrt backend's training halves: the forward or backward graph of a joint (backends/joint.py).

`TrainingHalf(graph, example_inputs, opts)` is an `OnnxrtCompiled` that AOT autograd calls with one flat
sequence of tensors per call (parameters and inputs for the forward; saved tensors and output gradients
for the backward) and that returns a flat tuple. Its first call goes through `OnnxrtCompiled.__call__`
(lowering, partitioning, ORT sessions, every check); then it serves later calls straight from that
program (NOTE [Direct calls of training halves]), whose ORT parts are `TrainingPart`s: OrtParts fed and
read through OrtValue vectors (NOTE [OrtValue vectors in training parts]). `PARTITION_CONFIG` is what
onnxrt joints are partitioned with (NOTE [Recomputation for ORT programs]); `decompositions()` what they
are traced with: ops torchlib cannot translate (or not as eager computes them) as ops it can (convolution,
pooling, padding and EmbeddingBag gradients, CPU flash attention: conv_backward.py, pool_backward.py,
pad_backward.py, embedding_bag.py, attention_training.py).
"""
from __future__ import annotations

import functools

import torch

from ... import logs
from .compiler import OnnxrtCompiled, _generator_states, _restore_generators
from .runtime import _NUMPY_DTYPES, OrtPart

# NOTE [Direct calls of training halves]
# A joint is built per input signature (JointGraph._signature: dtypes, shapes, strides, requires_grad),
# so each of its halves sees the same dtypes and shapes on every call. The generic path still computed a
# signature over every input (61 inputs in the zoo's gpt backward: 60 us), flattened and unflattened
# them with pytree and called the FX module through nn.Module's __call__ (another 100 us per call; the
# ORT run itself is 120-300 us). Once the half has run through the generic path with a single static
# program, its calls go to the program's graph code directly after checking that every input is a tensor
# of the recorded shape (strides need no check: ORT parts feed contiguous copies of non-contiguous
# inputs, and torch parts of the program take any strides). Anything else (another shape, grad mode on
# in the call, a program that raises) takes the generic path, which handles it as before (a run that
# raises there retires the program to eager torch, logged); a direct call that raised is not tried again.

# NOTE [Recomputation for ORT programs]
# torch's min-cut partitioner (backends/joint.py, NOTE [Partition]) is tuned for inductor, whose views are
# free and whose backward kernels fuse recomputed pointwise ops. It saves views (`t(w)` of a weight: 6 of
# the 16 forward outputs of the zoo's mlp) and never recomputes a pointwise op whose result the backward
# materialises anyway (a matmul input). For ORT programs every saved tensor costs on its own (an ORT
# output, an autograd save, an ORT input of the backward; a saved view also runs as a torch op). Measured
# (interleaved, thread CPU time, shared machine at load 16-28): `recompute_views` plus
# `aggressive_recomputation` gave mlp 0.71 -> 0.78x eager, cnn 0.68 -> 0.69x, gpt 0.86 -> 0.91x, moe 0.89 ->
# 0.95x, lstm 0.49 -> 0.54x (against this path with the default config). It was first left off: with
# `recompute_views` the backward recomputes views of saved tensors with the strides they had when traced,
# and ORT returned every output contiguous (transformers' GPT-2 backward failed to build: `view` of a
# transposed saved tensor). ORT parts now return what torch reads in eager's layout (NOTE [ORT outputs in
# eager's layout] in partition.py), and both are on (transformers' gpt2, llama and vit train as eager with
# them, test_training_backends.py; gpt2 did so even without that layout change, at c9c34af). Measured again (interleaved in one process, thread CPU
# time, 1 thread, zoo small, 3 rounds of 50-60 steps, load 9-11), eager/framejit without -> with: mlp
# 0.73 -> 0.72x, gpt 0.84 -> 0.92x, moe 0.79 -> 0.80x, cnn 0.86 -> 0.90x, bert 0.83 -> 0.88x, vit 0.86 ->
# 0.91x, gru_cell 0.75 -> 0.88x. Saved views' costs are also cut elsewhere: ORT parts read their own copy
# of a returned `t(w)` (NOTE [Returned views read by ORT] in partition.py) and `t(t(w))` chains between the
# halves are their base (NOTE [Identity views between the halves] in backends/joint.py).
PARTITION_CONFIG: dict = {"recompute_views": True, "aggressive_recomputation": True}


@functools.lru_cache(maxsize=None)
def decompositions() -> dict:
    """What onnxrt joints are traced with: joint.training_decompositions(), convolution_backward as
    convolutions (NOTE [Convolution gradients as convolutions] in conv_backward.py) and average-pooling
    gradients as convolutions and products (NOTE [Pooling gradients as convolutions and products] in
    pool_backward.py), EmbeddingBag gradients as scatter-adds (NOTE [EmbeddingBag gradients as scatter-adds]
    in embedding_bag.py) and CPU flash attention as its math (NOTE [Flash attention as math in training graphs]
    in attention_training.py), replication-pad gradients as scatter-adds (pad_backward.py) and max-pool
    gradients from recomputed argmaxes (NOTE [Max-pool gradients from recomputed argmaxes] in
    max_pool_backward.py); dropout's draw apart from its product (NOTE [Dropout's draw apart from its product]
    in dropout.py); grid_sample's gradients as scatter-adds (NOTE [grid_sample gradients as scatter-adds] in
    grid_sample_backward.py); euclidean cdist and its gradient (NOTE [Euclidean cdist as differences] in
    cdist.py)."""
    from .. import joint
    from . import (attention_training, cdist, conv_backward, dropout, embedding_bag, grid_sample_backward,
                   max_pool_backward, pad_backward, pool_backward)

    return {**joint.training_decompositions(), **conv_backward.decomposition(), **pool_backward.decomposition(),
            **embedding_bag.decomposition(), **attention_training.decomposition(), **pad_backward.decomposition(),
            **max_pool_backward.decomposition(), **dropout.decomposition(), **grid_sample_backward.decomposition(),
            **cdist.decomposition()}


def persistence(opts):
    """How onnxrt joints are persisted (NOTE [Persisted joints] in backends/joint_cache.py): each half is
    saved as any onnxrt artifact (persist.py) and loaded as a TrainingHalf; the version names the revision,
    ONNX Runtime's version and the options the halves are built with."""
    import json

    import onnxruntime

    from .. import joint
    from . import persist
    from .compiler import REVISION

    def load_half(data: bytes, gm):
        half = persist.restore_unchecked(data, gm)
        half.__class__ = TrainingHalf
        return half
    version = f"onnxrt REVISION={REVISION} ort={onnxruntime.__version__} " + json.dumps(
        persist.options_to_json(opts), sort_keys=True)
    return joint.Persistence(version, persist.save, load_half)


class TrainingHalf(OnnxrtCompiled):
    _direct = None  # (graph forward, state tuple, output container type, input shapes)
    _direct_failed = False

    def _build(self, inputs: list, on_traced=None, real_inputs=None):
        from .. import joint
        joint.STATS["half_programs_built"] += 1  # NOTE [Persisted joints]: a warm process builds none
        return super()._build(inputs, on_traced, real_inputs)

    def __call__(self, *inputs):
        direct = self._direct
        if direct is not None and not torch._C.is_grad_enabled():
            forward, state, kind, shapes, draws = direct
            if len(inputs) == len(shapes) and all(
                    isinstance(a, torch.Tensor) and a.shape == s for a, s in zip(inputs, shapes)):
                generators = _generator_states() if draws else None  # NOTE [A failed run draws again]
                try:
                    return kind(forward(*state, *inputs))
                except Exception as exc:  # the generic path below decides what to do with it
                    _restore_generators(generators)
                    self._direct, self._direct_failed = None, True
                    logs.log("output_code", "onnxrt: a direct call of a training half raised (%s: %s); "
                             "it takes the generic path from now on", type(exc).__name__, exc)
        result = super().__call__(*inputs)
        if self._direct is None and not self._direct_failed:
            self._direct = self._direct_call(inputs)
        return result

    def _direct_call(self, inputs) -> tuple | None:
        if self._run_eagerly or self._symbolic or self.dynamic_programs or len(self.programs) != 1:
            return None
        program = next(iter(self.programs.values()))
        if program is None or not all(isinstance(a, torch.Tensor) for a in inputs):
            return None
        spec = program.out_spec
        if spec.type not in (tuple, list) or not all(child.is_leaf() for child in spec.children()):
            return None
        graph = program.graph_module
        use_training_parts(graph)  # NOTE [OrtValue vectors in training parts]
        return graph.forward, tuple(program.state), spec.type, [a.shape for a in inputs], program.draws


# NOTE [OrtValue vectors in training parts]
# Training halves pass many tensors (the zoo's lstm backward takes 235 saved tensors and output
# gradients). OrtPart's CPU path feeds a dict of numpy views and turns each ORT output into a tensor with
# `torch.from_numpy`: about 3.5 us per tensor in and out. A training part instead wraps all its inputs in
# one OrtValueVector (`push_back_batch`: OrtValues over the tensors' own memory, no copy; ORT keeps the
# tensors alive while it uses them), runs `run_with_ortvaluevector`, and hands every output to torch
# through DLPack in one call (`to_dlpacks`: the tensor owns ORT's buffer, no copy). Measured on 100
# [2, 16] float inputs and outputs through 100 Relu nodes (1 thread): 355 us -> 207 us per run; 10 of
# them: 44 -> 25 us. Non-contiguous inputs are made contiguous first (the only copy), as before; a part
# with a non-tensor input (a symbolic int) or an empty tensor (no data pointer, which
# `push_back_batch` rejects) takes OrtPart's path for that call.
class TrainingPart(OrtPart):
    """An OrtPart of a training half's program, run through OrtValue vectors (NOTE [OrtValue vectors in
    training parts]). Made by `use_training_parts`, which swaps the class of a program's parts."""

    _vector_run = None  # (session, feed names, positions, input devices, output names, output devices, options)

    def _run_cpu(self, args) -> list[torch.Tensor]:
        run = self._vector_run
        if run is None:
            run = self._vector_run = self._prepare_vector_run()
        sess, names, positions, in_devices, out_names, out_devices, options = run
        tensors = [args[p] for p in positions]
        for k, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.data_ptr() == 0:  # a symbolic int, an empty tensor
                return self._run_cpu_feeds(args)  # what OrtPart._run_cpu does with such an input
            if not t.is_contiguous():
                tensors[k] = t.contiguous()
        from onnxruntime.capi._pybind_state import OrtValueVector

        feeds = OrtValueVector()
        feeds.reserve(len(tensors))
        feeds.push_back_batch(tensors, [t.data_ptr() for t in tensors], [_NUMPY_DTYPES[t.dtype] for t in tensors],
                              [t.shape for t in tensors], in_devices)
        fetches = OrtValueVector()
        sess.run_with_ortvaluevector(options, names, feeds, out_names, fetches, out_devices)
        return fetches.to_dlpacks(torch._C._from_dlpack)

    def _prepare_vector_run(self) -> tuple:
        import onnxruntime as ort
        from onnxruntime.capi._pybind_state import OrtDevice

        cpu = OrtDevice(OrtDevice.cpu(), OrtDevice.default_memory(), 0)
        names = [name for name, _ in self._fed]
        positions = [position for _, position in self._fed]
        return (self.session._sess, names, positions, [cpu] * len(names), list(self.output_names),
                [cpu] * len(self.output_names), ort.RunOptions())


def use_training_parts(graph_module: torch.nn.Module) -> None:
    """Make the CPU OrtParts of a training half's top graph TrainingParts."""
    for module in graph_module.children():
        if type(module) is OrtPart and module.device.type == "cpu" and not module.frozen_positions:
            module.__class__ = TrainingPart
            module._vector_run = None  # an OrtPart's run arguments are laid out otherwise (runtime.py)
