"""Run-time checks of captured graphs on the lowered backends (NOTE [Run-time checks as outputs] in
backends/checks.py): a speculated check (NOTE [Speculated checks]) is computed by the ORT program or the
Triton kernels and checked after the call; a failing check reruns the call eagerly, as on the eager backend.
Each test compares eager and compiled over calls whose checks pass and fail, and shows that the graph ran
lowered (ORT session runs, kernel runs)."""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.backends.checks import CheckedGraph
from framejit.backends.joint import JointGraph
from framejit.backends.onnxrt import onnxrt
from framejit.backends.onnxrt.runtime import OrtPart
from framejit.backends.triton import triton
from framejit.backends.triton.dynamic import DynamicGraph
from framejit.backends.triton.runtime import CompiledGraph
from tests.helpers import assert_same, call_capturing

BACKENDS = ["onnxrt", "triton"]


@pytest.fixture(autouse=True)
def _count_runs(monkeypatch):
    """Each OrtPart counts its session runs in `runs` (as in test_training_backends.py), each size-generic
    Triton module its calls."""
    for cls in (OrtPart, DynamicGraph):
        def counted(self, *args, _call=cls.__call__):
            self.runs = getattr(self, "runs", 0) + 1
            return _call(self, *args)
        monkeypatch.setattr(cls, "__call__", counted)


class _Recorder:
    """The backend named, keeping what it made of each graph."""

    def __init__(self, name: str) -> None:
        self.compile = onnxrt if name == "onnxrt" else triton
        self.made: list = []

    def __call__(self, gm, example_inputs):
        self.made.append(self.compile(gm, example_inputs))
        return self.made[-1]

    def lowered_runs(self) -> int:
        """Calls that ran in ONNX Runtime or in Triton kernels, over every graph made; each graph must be a
        CheckedGraph over a lowered program."""
        assert all(isinstance(made, CheckedGraph) for made in self.made), self.made
        return sum(_lowered_runs(made.compiled) for made in self.made)


def _lowered_runs(compiled) -> int:
    """Calls of `compiled` that ran in ONNX Runtime or Triton kernels; training calls count as the runs of the
    joint's forward half, which must be lowered."""
    if isinstance(compiled, JointGraph):
        for half in compiled.compiled_forwards + compiled.compiled_backwards:
            assert half.kernel_count > 0 if isinstance(half, CompiledGraph) else \
                any(row["ort_nodes"] > 0 for row in half.summary())
        return compiled.stats["forward"]
    if isinstance(compiled, CompiledGraph):
        return compiled.runs
    if isinstance(compiled, DynamicGraph):
        assert not compiled.specialised.compiled  # every call ran the size-generic kernels
        return compiled.runs
    assert compiled._run_eagerly is None
    programs = [p for p in compiled.programs.values() if p is not None]
    programs += [p for entries in compiled.dynamic_programs.values() for _, p in entries]
    runs = sum(getattr(part, "runs", 0) for program in programs for part in program.graph_module.modules()
               if isinstance(part, OrtPart))
    return runs + (_lowered_runs(compiled._joint) if compiled._joint is not None else 0)


def _caught(x, log):
    try:
        log.append("start")
        if x.sum() > 0:  # a speculated check: fails for positive sums
            raise KeyError("pos")
        log.append("neg")
    except KeyError as e:
        log.append(f"caught {e}")
    return x * 2 + 1


def _raised(x, flag):
    if (x < 0).any():
        raise ValueError(f"negative entries in a tensor of shape {tuple(x.shape)}")
    if flag:  # the condition is a graph input itself
        raise RuntimeError("flag set")
    return x.sqrt() + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_checks_run_in_the_lowered_graph(backend):
    # before: graphs holding a check ran as their Python code on onnxrt and triton (NOTE [Run-time checks run
    # eagerly], 451191e): correct, but not lowered
    recorder = _Recorder(backend)
    caught, raised = framejit.compile(_caught, backend=recorder), framejit.compile(_raised, backend=recorder)
    graphs = framejit.stats()["graphs"]
    for sign in (-1, 1, -1, 1):
        x = torch.full((3,), 2.0 * sign) + torch.arange(3.0)
        log_e, log_c = [], []
        assert_same(caught(x, log_c), _caught(x.clone(), log_e))
        assert log_c == log_e
    for value, flag in ((1.0, False), (-1.0, False), (2.0, True), (3.0, False), (-2.0, True)):
        x, flag = torch.full((4,), value), torch.tensor(flag)
        out_c, type_c, _ = call_capturing(raised, (x, flag), {})
        out_e, type_e, _ = call_capturing(_raised, (x, flag), {})
        assert type_c is type_e
        if type_e is None:
            assert_same(out_c, out_e)
        else:
            assert str(out_c) == str(out_e)
    assert framejit.stats()["graphs"] - graphs == 2  # failing checks rerun eagerly: no recompile
    assert recorder.lowered_runs() == 9  # every call ran lowered once (a failing one, then eagerly)


def _validated(loc, scale, x):
    return torch.distributions.Normal(loc, scale, validate_args=True).log_prob(x).sum()


def _trained(w, x):
    y = x @ w
    if (y > 100).any():
        raise ValueError("activations too large")
    return y.relu().sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_distribution_validation_and_training_with_checks(backend):
    recorder = _Recorder(backend)
    validated, trained = framejit.compile(_validated, backend=recorder), framejit.compile(_trained, backend=recorder)
    for scale in (1.0, -1.0, 2.0, 0.0, 0.5):
        args = (torch.randn(5), torch.full((5,), scale), torch.randn(5))
        out_c, type_c, _ = call_capturing(validated, args, {})
        out_e, type_e, _ = call_capturing(_validated, args, {})
        assert type_c is type_e and (type_e is None or str(out_c) == str(out_e))
        if type_e is None:
            assert_same(out_c, out_e)
    for scale in (1.0, 100.0, 2.0, 100.0):
        w0, x = torch.randn(4, 3) * scale, torch.rand(2, 4) * scale
        results = []
        for fn in (_trained, trained):
            w = w0.clone().requires_grad_()
            try:
                out = fn(w, x)
                out.backward()
                results.append((out.detach(), w.grad))
            except ValueError as e:
                results.append(str(e))
        if isinstance(results[0], str):
            assert results[1] == results[0]
        else:
            assert_same(results[1], results[0], rtol=1e-5, atol=1e-5)
    assert len(recorder.made) == 2 and recorder.lowered_runs() == 9


_WARM_PROGRAM = '''
import json, sys, torch, framejit
from framejit.backends.onnxrt.runtime import OrtPart
from framejit.backends.triton.runtime import CompiledGraph

runs = []
for cls in (OrtPart, CompiledGraph):
    def counted(self, *args, _call=cls.__call__):
        runs.append(type(self).__name__)
        return _call(self, *args)
    cls.__call__ = counted

def f(x, log):
    try:
        if x.sum() > 0:
            raise KeyError("pos")
        log.append("neg")
    except KeyError as e:
        log.append(f"caught {e}")
    return x * 2 + 1

compiled = framejit.compile(f, backend=sys.argv[1])
logs = []
for sign in (-1, 1, -1, 1):
    x, log = torch.full((3,), 2.0 * sign), []
    logs.append([compiled(x, log).tolist(), log])
print(json.dumps({"logs": logs, "loaded": framejit.stats()["frames_loaded"], "lowered_runs": len(runs)}))
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_checks_of_a_warm_entry_run_in_the_lowered_graph(backend, tmp_path):
    # the backends persist the program of the graph with its checks as outputs and wrap it again on load
    from tests.helpers import run_cache_program
    expected = [[[-3.0] * 3, ["neg"]], [[5.0] * 3, ["caught 'pos'"]]] * 2
    cold = run_cache_program(tmp_path, "warm.py", _WARM_PROGRAM, backend)
    warm = run_cache_program(tmp_path, "warm.py", _WARM_PROGRAM, backend)
    assert cold == {"logs": expected, "loaded": 0, "lowered_runs": 4}
    assert warm == {"logs": expected, "loaded": 1, "lowered_runs": 4}


@pytest.mark.parametrize("backend", BACKENDS)
def test_checks_of_graphs_over_symbolic_sizes(backend):
    recorder = _Recorder(backend)
    caught = framejit.compile(_caught, backend=recorder)
    for n, sign in ((3, -1), (4, 1), (5, -1), (6, 1), (7, -1)):
        x = torch.full((n,), 2.0 * sign)
        log_e, log_c = [], []
        assert_same(caught(x, log_c), _caught(x.clone(), log_e))
        assert log_c == log_e
    assert recorder.lowered_runs() == 5


def _asserts(x):
    torch._assert_async(x.sum() > 0, "the sum must be positive")
    torch._assert_async((x < 10).all())
    x.add_(1)  # a write after a check: a graph break, so a failing check leaves x as eager leaves it
    return x * 2


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
def test_the_users_own_assert_async_is_kept(backend):
    # before: torch._assert_async returns None, so the trace dropped the call: a failing check passed silently
    # (every backend) and the call went on to write x
    compiled = framejit.compile(_asserts, backend=backend)
    for value in (1.0, -1.0, 20.0, 2.0):
        x_e, x_c = torch.full((3,), value), torch.full((3,), value)
        out_c, type_c, _ = call_capturing(compiled, (x_c,), {})
        out_e, type_e, _ = call_capturing(_asserts, (x_e,), {})
        assert type_c is type_e and (type_e is None or str(out_c) == str(out_e))
        if type_e is None:
            assert_same(out_c, out_e)
        assert_same(x_c, x_e)
