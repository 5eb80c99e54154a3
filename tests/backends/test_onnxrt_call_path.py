"""The onnxrt per-call path (NOTE [Per-call path] in onnxrt/compiler.py, NOTE [Zero-copy I/O] in runtime.py):
structural facts of the fast paths, each with results equal to eager while inputs, shapes and weights change."""
from __future__ import annotations

import torch

import framejit
from framejit.backends.onnxrt import compiler, runtime


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.ReLU()).eval()


def _programs(monkeypatch) -> list:
    made = []
    post_init = compiler.Program.__post_init__
    monkeypatch.setattr(compiler.Program, "__post_init__", lambda self: (post_init(self), made.append(self))[0])
    return made


def _no_generated_forward(program):
    def forward(*args):
        raise AssertionError("the top graph's generated forward ran")
    program.graph_module.forward = forward


def test_a_whole_graph_program_calls_its_part_directly(monkeypatch):
    """A program whose top graph only calls one part runs the part without the generated forward; the part
    still sees weight changes (in place, a new Parameter) and each new shape compiles its own program."""
    programs = _programs(monkeypatch)
    model = _mlp()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for step, rows in enumerate((3, 3, 5, 5)):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled(x), model(x))
            for program in programs:
                assert program._one_part is not None
                _no_generated_forward(program)
            if step == 1:
                model[0].weight.mul_(-1)
            if step == 2:
                model[2].weight = torch.nn.Parameter(torch.randn(4, 16))
    assert len(programs) >= 2  # a program per shape


def test_a_program_with_eager_nodes_runs_its_generated_forward(monkeypatch):
    """A top graph with more than the one part call (here an op ORT is not given) keeps the generated forward."""
    programs = _programs(monkeypatch)

    def fn(x):
        return torch.sin(x).cumsum(0) * 2

    compiled = framejit.compile(fn, backend="onnxrt", options={"fallback_ops": frozenset({"aten::cumsum"})})
    for _ in range(2):
        x = torch.randn(6)
        torch.testing.assert_close(compiled(x), fn(x))
    assert programs and all(p._one_part is None for p in programs)


def test_tensor_inputs_go_through_ort_value_vectors(monkeypatch):
    """Parts on CPU feed non-empty tensors as one OrtValueVector (the numpy-dict path never runs for them),
    with frozen weights, non-contiguous inputs and every output dtype; an empty input takes the dict path."""
    parts = []
    for_graph = runtime.OrtPart.for_graph.__func__
    monkeypatch.setattr(runtime.OrtPart, "for_graph",
                        classmethod(lambda cls, *a, **k: parts.append(for_graph(cls, *a, **k)) or parts[-1]))
    feeds_path = runtime.OrtPart._run_cpu_feeds
    dict_calls = []
    monkeypatch.setattr(runtime.OrtPart, "_run_cpu_feeds", lambda self, args: (dict_calls.append(1), feeds_path(self, args))[1])

    def fn(x, i, w):
        y = x @ w
        return y, y > 0, i * 2, (x * 2).to(torch.float16), (x.sum() + i.sum())

    compiled = framejit.compile(fn, backend="onnxrt")
    for step in range(3):
        x = torch.randn(5, 3).t()  # non-contiguous
        i = torch.arange(4) + step
        w = torch.randn(5, 2)
        for got, want in zip(compiled(x, i, w), fn(x, i, w)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want)
    assert parts and not dict_calls
    assert all(p._vector_run is not None for p in parts)

    model = _mlp(1)
    compiled_model = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for rows in (2, 2):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(compiled_model(x), model(x))
        model[0].bias.add_(1)  # a frozen weight changes: a new session, fed again through a vector
        x = torch.randn(2, 8)
        torch.testing.assert_close(compiled_model(x), model(x))
    assert not dict_calls

    def empty(x, y):
        return x * 2 + y

    compiled_empty = framejit.compile(empty, backend="onnxrt", dynamic=False)
    for _ in range(2):
        x, y = torch.randn(0, 3), torch.randn(3)
        torch.testing.assert_close(compiled_empty(x, y), empty(x, y))
    assert dict_calls  # an empty tensor has no data pointer to put in a vector
