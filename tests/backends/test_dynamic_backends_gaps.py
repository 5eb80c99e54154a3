"""Dynamic shapes on the lowered backends, issue 13 (h13dyn3): programs a user writes, compiled end to end
with framejit.compile(backend=...) over several sizes, compared with eager, with the number of frontend
graphs and backend programs asserted.

- onnxrt: a size-derived float handed to an ORT part (`F.interpolate(x, size=(2 * h, w + 1))` computes
  its scales as `h / (2 * h)`, a SymFloat) was fed as an int64 scalar, where the exporter declares FLOAT:
  ORT refused the run, and the graph fell back to one static program per input signature
  (runtime._scalar_dtype).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import framejit
from framejit.backends.onnxrt import OnnxrtCompiled
from tests.helpers import assert_same


class _Recording:
    """The onnxrt backend, keeping what it compiled."""

    def __init__(self) -> None:
        self.compiled: list = []

    def __call__(self, gm, example_inputs):
        out = framejit.lookup_backend("onnxrt")(gm, example_inputs)
        self.compiled.append(out)
        return out


def _upsample(x):
    return F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] + 1), mode="bilinear", align_corners=False)


def test_a_size_derived_float_is_fed_to_the_symbolic_onnxrt_program_as_a_float():
    backend = _Recording()
    compiled = framejit.compile(_upsample, backend=backend, dynamic=True)
    for i, (b, h, w) in enumerate([(2, 3, 3), (3, 4, 5), (2, 5, 2), (4, 2, 6)]):
        torch.manual_seed(i)
        x = torch.randn(b, 2, h, w)
        assert_same(compiled(x), _upsample(x), rtol=1e-5, atol=1e-5)
    (program,) = backend.compiled
    assert isinstance(program, OnnxrtCompiled)
    symbolic = sum(len(v) for v in program.dynamic_programs.values())
    assert (symbolic, len(program.programs)) == (1, 0)  # one symbolic program, no per-signature ones
