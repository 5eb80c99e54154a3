"""The onnxrt backend's training halves: the forward or backward graph of a joint (backends/joint.py).

`TrainingHalf(graph, example_inputs, opts)` is an `OnnxrtCompiled` that AOT autograd calls with one flat
sequence of tensors per call (parameters and inputs for the forward; saved tensors and output gradients
for the backward) and that returns a flat tuple. Its first call goes through `OnnxrtCompiled.__call__`
(lowering, partitioning, ORT sessions, every check); then it serves later calls straight from that
program (NOTE [Direct calls of training halves]).
"""
from __future__ import annotations

import torch

from ... import logs
from .compiler import OnnxrtCompiled

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


class TrainingHalf(OnnxrtCompiled):
    _direct = None  # (graph forward, state tuple, output container type, input shapes)
    _direct_failed = False

    def __call__(self, *inputs):
        direct = self._direct
        if direct is not None and not torch.is_grad_enabled():
            forward, state, kind, shapes = direct
            if len(inputs) == len(shapes) and all(
                    isinstance(a, torch.Tensor) and a.shape == s for a, s in zip(inputs, shapes)):
                try:
                    return kind(forward(*state, *inputs))
                except Exception as exc:  # the generic path below decides what to do with it
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
        return graph.forward, tuple(program.state), spec.type, [a.shape for a in inputs]
