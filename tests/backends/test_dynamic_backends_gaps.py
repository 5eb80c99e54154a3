"""Dynamic shapes on the lowered backends, issue 13 (h13dyn3): programs a user writes, compiled end to end
with framejit.compile(backend=...) over several sizes, compared with eager, with the number of frontend
graphs and backend programs asserted.

- onnxrt: a size-derived float handed to an ORT part (`F.interpolate(x, size=(2 * h, w + 1))` computes
  its scales as `h / (2 * h)`, a SymFloat) was fed as an int64 scalar, where the exporter declares FLOAT:
  ORT refused the run, and the graph fell back to one static program per input signature
  (runtime._scalar_dtype).
- triton: a graph with four symbolic sizes in one input (dynamic=True on an image batch) allocated probe
  inputs of 464 x 496 x 592 x 656 elements; the allocator's RuntimeError reached the backend's catch-all and
  the graph ran eagerly for every size. It now compiles per shape, with the reason logged (NOTE [Probes too
  large to allocate], triton/dynamic.py).
- triton: an int argument made symbolic and then specialised by a later trace (`torch.ones(n)` with n == 1)
  stays a graph input whose SymInt is a number; the lowering takes tensors only, so that graph ran eagerly
  ('a graph input is not a tensor'). Its ints are baked in (NOTE [Int inputs fixed by the frontend]).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import framejit
from framejit.backends.onnxrt import OnnxrtCompiled
from tests.helpers import RecordingBackend, assert_same


_Recording = RecordingBackend


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


def _rows_of_pixels(x):
    b, c, h, w = x.shape
    y = x.reshape(b, c, h * w).permute(0, 2, 1)
    return y.reshape(b * h * w, c).sum(-1).view(b, h, w)


def test_a_graph_whose_probe_inputs_cannot_be_allocated_compiles_per_shape_on_triton():
    from framejit.backends.triton.dynamic import DynamicGraph, SpecialisingGraph
    backend = _Recording("triton")
    compiled = framejit.compile(_rows_of_pixels, backend=backend, dynamic=True)
    for i, (b, h, w) in enumerate([(2, 3, 4), (3, 2, 2)]):
        torch.manual_seed(i)
        x = torch.randn(b, 2, h, w)
        assert_same(compiled(x), _rows_of_pixels(x))
    (graph,) = backend.compiled
    # a size-generic module where the probes fit in memory, else one compiled graph per shape; never eager
    assert isinstance(graph, (DynamicGraph, SpecialisingGraph)), type(graph)


def _ones_of(n: int, x):
    return torch.ones(n, x.size(-1)) @ x.t() + n


def test_an_int_input_the_frontend_fixed_is_baked_in_on_triton():
    from framejit.backends.triton.runtime import EagerGraph
    backend = _Recording("triton")
    compiled = framejit.compile(_ones_of, backend=backend)
    for i, n in enumerate([3, 5, 1, 4, 1]):
        torch.manual_seed(i)
        x = torch.randn(2, 3)
        assert_same(compiled(n, x), _ones_of(n, x))
    assert len(backend.compiled) == 3  # n == 3, n symbolic, n == 1
    assert not any(isinstance(g, EagerGraph) for g in backend.compiled), backend.compiled
