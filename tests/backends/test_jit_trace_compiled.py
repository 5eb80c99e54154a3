"""Compiled callables under torch's other tracers (NOTE [Compiled callables under the TorchScript tracer] in
capture/breaks.py): `torch.jit.trace` and `torch.onnx.export(..., dynamo=False)` of a compiled module or
function record the same ops as tracing the uncompiled one (review revO O10: a segfault with onnxrt, a
TracingCheckError with the eager backend), on every backend, before and after the compiled form has run;
`torch.jit.script` of a compiled function scripts the function. Every result is compared with eager."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import framejit

BACKENDS = ("eager", "onnxrt", "triton")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) * 2 + x.sum(-1, keepdim=True)


def _ops(traced) -> list[str]:
    return [node.kind() for node in traced.inlined_graph.nodes()]


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _trace(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings of the traced code itself
        return torch.jit.trace(fn, args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("warm", [False, True])
def test_jit_trace_of_a_compiled_module_records_the_module_ops(backend, warm):
    torch.manual_seed(0)
    model = Net()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(3, 4)
    if warm:  # an entry exists whose guards accept the traced call
        _close(compiled(x), model(x))
    traced = _trace(compiled, x)
    assert _ops(traced) == _ops(_trace(model, x))
    for rows in (3, 5, 2):
        y = torch.randn(rows, 4)
        _close(traced(y), model(y))
        _close(compiled(y), model(y))  # the compiled module is unchanged by the trace
    with torch.no_grad():
        model.a.weight.mul_(2)  # the trace holds the module's parameters, as a trace of the module does
    y = torch.randn(4, 4)
    _close(traced(y), model(y))
    _close(compiled(y), model(y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_trace_of_a_model_calling_compiled_callables(backend):
    def head(h, w):
        return torch.sin(h) @ w + 1

    compiled_head = framejit.compile(head, backend=backend)

    class Outer(torch.nn.Module):
        def __init__(self, block) -> None:
            super().__init__()
            self.block = block
            self.w = torch.nn.Parameter(torch.randn(2, 3))

        def forward(self, x):
            return compiled_head(self.block(x), self.w).tanh()

    torch.manual_seed(1)
    block = Net()
    outer, eager = Outer(framejit.compile(block, backend=backend)), Outer(block)
    eager.w = outer.w
    x = torch.randn(3, 4)
    for _ in range(2):
        _close(outer(x), eager(x))
    traced = _trace(outer, x)
    assert _ops(traced) == _ops(_trace(eager, x))
    for rows in (3, 6):
        y = torch.randn(rows, 4)
        _close(traced(y), eager(y))
        _close(outer(y), eager(y))
    w = torch.randn(4, 3)
    traced_fn = _trace(compiled_head, (x, w))
    _close(traced_fn(x * 2, w), head(x * 2, w))


@pytest.mark.parametrize("backend", BACKENDS)
def test_onnx_export_without_dynamo_of_a_compiled_module(backend):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(2)
    model = Net()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(3, 4)
    _close(compiled(x), model(x))
    exported = {}
    for name, root in (("compiled", compiled), ("eager", model)):
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(root, (x,), buffer, dynamo=False)
        exported[name] = buffer.getvalue()
    session = ort.InferenceSession(exported["compiled"])
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    _close(torch.from_numpy(out), model(x))
    assert len(exported["compiled"]) == len(exported["eager"])
    _close(compiled(x + 1), model(x + 1))


def test_jit_script_of_compiled_callables():
    def fn(x, w):
        return torch.sin(x) @ w + 1

    torch.manual_seed(3)
    model = Net()
    compiled_fn, compiled_model = framejit.compile(fn), framejit.compile(model)
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    _close(compiled_fn(x, w), fn(x, w))
    scripted_fn, scripted_model = torch.jit.script(compiled_fn), torch.jit.script(compiled_model)
    for rows in (3, 5):
        y = torch.randn(rows, 4)
        _close(scripted_fn(y, w), fn(y, w))
        _close(scripted_model(y), model(y))
