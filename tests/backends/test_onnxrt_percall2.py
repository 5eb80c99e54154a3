"""The onnxrt per-call path outside ORT's run (issue 17): costs counted, results compared with eager.

Counts (C calls seen by `sys.setprofile`, Python opcodes by `sys.settrace`), never wall time:
- the version wrapper (NOTE [Versions set only where they differ] in capture/input_versions.py) makes no C
  call when the backend's output counters already are eager's;
- a part checks its fed inputs in C loops (NOTE [Fed inputs checked in C loops] in onnxrt/runtime.py): the
  Python work of a part's call does not grow with the number of inputs it feeds.
Results: the state a steady call no longer reads the way it did (output counters, fed inputs' layouts and
the fallbacks of those checks) is changed between calls, and every result is compared with eager.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

import framejit
from framejit.backends.onnxrt import runtime

F32 = dict(rtol=1e-4, atol=1e-5)
RUNTIME = os.path.join("backends", "onnxrt", "runtime.py")


def _c_calls(fn, name: str) -> int:
    """C calls of a function called `name` while `fn()` runs."""
    seen = []

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == name:
            seen.append(arg)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return len(seen)


def _opcodes_in(fn, path_part: str) -> int:
    """Python opcodes executed in frames of files whose path contains `path_part` while `fn()` runs
    (sys.monitoring's INSTRUCTION events from 3.12: settrace's opcode events are unreliable there)."""
    count = [0]
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        tool = next(t for t in range(5, 0, -1) if monitoring.get_tool(t) is None)

        def instruction(code, offset):
            if path_part not in code.co_filename:
                return monitoring.DISABLE
            count[0] += 1

        monitoring.use_tool_id(tool, "percall2")
        monitoring.register_callback(tool, monitoring.events.INSTRUCTION, instruction)
        monitoring.set_events(tool, monitoring.events.INSTRUCTION)
        try:
            fn()
        finally:
            monitoring.set_events(tool, 0)
            monitoring.register_callback(tool, monitoring.events.INSTRUCTION, None)
            monitoring.free_tool_id(tool)
            monitoring.restart_events()
        return count[0]

    def local(frame, event, arg):
        if event == "opcode":
            count[0] += 1
        return local

    def trace(frame, event, arg):
        if path_part not in frame.f_code.co_filename:
            return None
        frame.f_trace_opcodes = True
        return local

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count[0]


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_output_counters_already_eagers_are_not_set_again():
    model = _Mlp().eval()
    compiled = framejit.compile(model, backend="onnxrt", options={"allow_spinning": False})
    x = torch.randn(2, 8)
    with torch.no_grad():
        for _ in range(2):
            compiled(x)
        sets = _c_calls(lambda: compiled(x), "_unsafe_set_version_counter")
        out, expected = compiled(x), model(x)
    assert sets == 0  # 2 before: an empty tuple of written inputs and the output at its version 0
    assert out._version == expected._version == 0
    torch.testing.assert_close(out, expected, **F32)


def _sum8(a, b, c, d, e, f, g, h):
    return (a * b + c * d + e * f + g * h).relu()


def _sum2(a, b):
    return (a * b).relu()


def test_a_parts_python_work_does_not_grow_with_its_fed_inputs():
    gen = torch.Generator().manual_seed(0)
    counts = {}
    for fn, n in ((_sum2, 2), (_sum8, 8)):
        compiled = framejit.compile(fn, backend="onnxrt", options={"allow_spinning": False})
        args = [torch.randn(3, 5, generator=gen) for _ in range(n)]
        for _ in range(2):
            torch.testing.assert_close(compiled(*args), fn(*args), **F32)
        counts[n] = _opcodes_in(lambda: compiled(*args), RUNTIME)
        assert counts[n] > 0, "no ORT part ran"
    assert counts[8] == counts[2], counts  # before: ~25 opcodes more per fed input (a Python loop)


def test_fed_inputs_of_other_layouts_and_kinds_between_calls():
    """The C-loop checks fall back as the Python loop did: non-contiguous inputs are copied, empty tensors
    take the numpy path, and back to the fast path after."""
    def fn(a, b):
        return (a * 2 + b).sum(0)

    compiled = framejit.compile(fn, backend="onnxrt", dynamic=False, options={"allow_spinning": False})
    gen = torch.Generator().manual_seed(1)
    plain = lambda: (torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen))  # noqa: E731
    transposed = lambda: (torch.randn(3, 4, generator=gen).t(), torch.randn(4, 3, generator=gen))  # noqa: E731
    both = lambda: (torch.randn(3, 4, generator=gen).t(), torch.randn(3, 4, generator=gen).t())  # noqa: E731
    empty = lambda: (torch.randn(0, 3, generator=gen), torch.randn(0, 3, generator=gen))  # noqa: E731
    for make in (plain, transposed, plain, both, empty, plain, empty, transposed):
        for _ in range(2):
            args = make()
            torch.testing.assert_close(compiled(*args), fn(*args), **F32)


def test_symbolic_int_inputs_take_the_numpy_path():
    def fn(x):
        return x.reshape(x.shape[0] * x.shape[1]) * 3

    compiled = framejit.compile(fn, backend="onnxrt", dynamic=True, options={"allow_spinning": False})
    for rows in (2, 3, 5, 3):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x), **F32)


def test_output_versions_written_in_the_graph_and_outputs_the_user_keeps():
    """Outputs written in the graph (a shared counter between an output and its view) get eager's versions;
    outputs kept and written by the user are not touched by later calls."""
    def fn(x):
        y = x * 2
        y.add_(1)
        z = y.view(-1)
        z.mul_(3)
        w = x + 1
        return y, z, w

    compiled = framejit.compile(fn, backend="onnxrt", options={"allow_spinning": False})
    kept = []
    with torch.no_grad():
        for seed in range(4):
            x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
            got, expected = compiled(x), fn(x)
            assert [t._version for t in got] == [t._version for t in expected]
            torch.testing.assert_close(got, expected, **F32)
            kept.append((got, [t.clone() for t in got]))
            got[2].add_(5)  # the user writes a returned output
            kept[-1][1][2].add_(5)
    for got, values in kept:  # no later call wrote into what an earlier one returned
        torch.testing.assert_close(list(got), values)


def test_module_state_changed_between_calls_matches_eager():
    """Weights in place, through .data, load_state_dict, a submodule swapped, train/eval, a forward hook,
    another dtype and strides of the input: each between calls, results vs eager on fresh inputs."""
    model = _Mlp().eval()
    compiled = framejit.compile(model, backend="onnxrt", options={"allow_spinning": False})
    gen = torch.Generator().manual_seed(2)

    def check(dtype=torch.float32, transpose=False):
        for _ in range(2):
            x = torch.randn(8, 3, generator=gen, dtype=dtype).t() if transpose else \
                torch.randn(3, 8, generator=gen, dtype=dtype)
            torch.testing.assert_close(compiled(x), model(x), **F32)

    other = _Mlp()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-0.5)
        check()
        model.a.weight.add_(1.0)  # in place
        check()
        model.b.weight.data = torch.randn(4, 8, generator=gen)  # through .data
        check()
        model.load_state_dict(other.state_dict())
        check()
        model.b = torch.nn.Linear(8, 4)  # a submodule swapped
        check()
        model.train()
        check()
        model.eval()
        handle = model.a.register_forward_hook(lambda m, i, o: o * 2)
        check()
        handle.remove()
        check()
        check(transpose=True)
        model.double()
        check(dtype=torch.float64)
