"""Shared test helpers: a graph-counting backend and the differential runner.

`run_differential(fn, make_args, ...)` runs `fn` eagerly and compiled on fresh inputs from
`make_args(seed)` for several seeds, compares results (values, types, structure), raised exception types,
printed output, the state of the (cloned) inputs and torch's global state (grad, inference and autocast
modes) after the call, and returns the counting backend so the caller can assert the number of graphs.
"""
from __future__ import annotations

import copy
import dataclasses
import io
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch

import framejit


class CountingBackend:
    """A backend that records each graph it is given and runs it as Python (like `eager`)."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        self.graphs.append(gm)
        self.example_inputs.append(example_inputs)
        return gm.forward

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    def op_count(self, index: int = -1) -> int:
        return sum(1 for n in self.graphs[index].graph.nodes if n.op in ("call_function", "call_method"))


class OnnxrtRecorder:
    """The onnxrt backend, keeping what it compiled (to check what ONNX Runtime really ran)."""

    def __init__(self) -> None:
        self.compiled: list = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        from framejit.backends.onnxrt import onnxrt
        self.compiled.append(onnxrt(gm, example_inputs))
        return self.compiled[-1]

    def rows(self) -> list[dict]:
        """Every compiled program's summary rows (ort_nodes, eager_nodes, eager_graph, symbolic, ...)."""
        return [row for c in self.compiled for row in c.summary()]

    def ort_nodes(self) -> int:
        return sum(row["ort_nodes"] for row in self.rows())


@contextlib.contextmanager
def optimizers_as_shipped():
    """Stock torch.compile's first use in a process (another test's reference run) wraps every optimizer
    class's `_init_group` in torch.compiler.disable, for good; framejit honours that mark (a break before
    the update: one graph per group and more). Tests about torch.optim as shipped put the original methods
    back for their duration (and the wrappers after)."""
    patched = {}
    for cls in vars(torch.optim).values():
        found = vars(cls).get("_init_group") if isinstance(cls, type) else None
        if found is not None and getattr(found, "_torchdynamo_orig_callable", None) is not None:
            patched[cls] = found
            cls._init_group = found._torchdynamo_orig_callable
    try:
        yield
    finally:
        for cls, wrapper in patched.items():
            cls._init_group = wrapper


def reset_with_triton_interpreted(monkeypatch):
    """A fixture body: framejit reset around the test, Triton's kernels run by its interpreter (CPU tensors).
    A test module makes it its autouse fixture: `_reset = pytest.fixture(autouse=True)(reset_with_triton_interpreted)`."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    framejit.reset()
    yield
    framejit.reset()


@contextlib.contextmanager
def shifted(tag, x):
    """A generator manager that prints its entry and exit and yields x + 1 (the context-manager tests)."""
    print("enter", tag)
    try:
        yield x + 1
    finally:
        print("exit", tag)


class RecordingBackend(CountingBackend):
    """Counts graphs and keeps what the named backend compiled each into."""

    def __init__(self, name: str = "onnxrt") -> None:
        super().__init__()
        self.name, self.compiled = name, []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.compiled.append(framejit.lookup_backend(self.name)(gm, example_inputs))
        return self.compiled[-1]


def tanh_sum(x, w):
    """A function whose backward saves tanh's result only (not x): its second derivative in x needs
    double backward through the compiled backward."""
    return torch.tanh(x + w).sum()


def second_order(fn, x, w):
    (g,) = torch.autograd.grad(fn(x, w), w, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x, allow_unused=True)
    return g, gg


def assert_same(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None) -> None:
    assert type(actual) is type(expected), f"type {type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        assert actual.requires_grad == expected.requires_grad
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert actual.is_inference() == expected.is_inference()
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, rtol=rtol, atol=atol)
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys())
        for k in expected:
            assert_same(actual[k], expected[k], rtol=rtol, atol=atol)
    elif dataclasses.is_dataclass(expected):
        assert_same(dataclasses.astuple(actual), dataclasses.astuple(expected), rtol=rtol, atol=atol)
    elif isinstance(expected, float) and expected != expected:
        assert actual != actual
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def assert_same_grads(grads: dict, expected: dict, *, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Gradients by name: the same names, None where the reference has None, close values elsewhere."""
    assert grads.keys() == expected.keys()
    for name, g in grads.items():
        assert (g is None) == (expected[name] is None), name
        if g is not None:
            torch.testing.assert_close(g, expected[name], atol=atol, rtol=rtol)


def clone_args(args: Any) -> Any:
    """A deep copy of the inputs (tensors cloned with their requires_grad), so both runs start equal."""
    def clone(x):
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            c.requires_grad_(x.requires_grad)
            return c
        if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
            return type(x)(clone(i) for i in x)
        if isinstance(x, dict) and type(x) is dict:
            return {k: clone(v) for k, v in x.items()}
        return copy.deepcopy(x) if not isinstance(x, torch.nn.Module) else x
    return clone(args)


def call_capturing(fn: Callable, args: tuple, kwargs: dict) -> tuple[Any, type | None, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            return fn(*args, **kwargs), None, out.getvalue()
        except Exception as e:  # noqa: BLE001 - the exception type is what we compare
            return e, type(e), out.getvalue()


def global_state() -> tuple:
    """The torch global state a compiled call must leave as eager leaves it."""
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"), torch.get_default_dtype())


# NOTE [Seeding without an accelerator]: torch.manual_seed also seeds every accelerator's generators; on a
# machine without one (CI, this machine) it still queues a lazy CUDA, XPU and MTIA seeding each, together
# with `traceback.format_stack()` of the whole pytest stack (kept to explain a failed lazy device init):
# 1.4-2 ms of CPU per call at a test's stack depth, against 1.4 us for what it does here, seeding the CPU
# generator (3.4% of the CPU time of small-function test files, which seed twice per run_differential).
# The runners below seed through `manual_seed`, which does exactly torch.manual_seed's CPU seeding when no
# accelerator is available and calls torch.manual_seed itself otherwise. Tests about seeding and the RNG
# (what compiled code does with torch.manual_seed, get_rng_state...) still call torch's functions.
_ACCELERATOR = torch.accelerator.is_available()


def manual_seed(seed: int) -> None:
    """torch.manual_seed(seed), cheaply where no accelerator is available (NOTE [Seeding without an
    accelerator]): the same CPU generator state."""
    if _ACCELERATOR:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def run_differential(fn: Callable, make_args: Callable[[int], tuple], *, seeds=(0, 1), fullgraph: bool = True,
                     backend: Any = None, kwargs_fn: Callable[[int], dict] | None = None,
                     rtol: float | None = None, atol: float | None = None, compiled: Callable | None = None):
    backend = backend or CountingBackend()
    compiled = compiled or framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for seed in seeds:
        manual_seed(1000 + seed)
        args = make_args(seed)
        kwargs = kwargs_fn(seed) if kwargs_fn else {}
        eager_args, compiled_args = clone_args(args), clone_args(args)
        eager_kwargs, compiled_kwargs = clone_args(kwargs), clone_args(kwargs)
        before = global_state()
        expected, expected_exc, expected_out = call_capturing(fn, eager_args, eager_kwargs)
        expected_state = global_state()
        torch.set_grad_enabled(before[0])
        actual, actual_exc, actual_out = call_capturing(compiled, compiled_args, compiled_kwargs)
        actual_state = global_state()
        torch.set_grad_enabled(before[0])
        assert actual_state == expected_state, f"global state after the call: {actual_state} != {expected_state}"
        assert actual_exc is expected_exc, f"eager raised {expected_exc}, compiled raised {actual_exc}: {actual!r}"
        assert actual_out == expected_out
        if expected_exc is None:
            assert_same(actual, expected, rtol=rtol, atol=atol)
        assert_same(compiled_args, eager_args, rtol=rtol, atol=atol)
    return backend


# NOTE [Programs in forked children]: the cache tests run each step of a program in a new process (the frame
# cache is read from disk, nothing is left in memory from the run before). A new interpreter pays ~1.2 s of
# CPU importing torch and ~1.2 s more importing torch._dynamo on its first trace (FakeTensorMode() imports
# torch._dynamo.config), more than the step itself; the suite runs ~100 of them. So the runs go to a server
# process (tests/program_server.py) that imports torch, torch._dynamo.config (and the third-party modules a
# test names) once and forks a child per run: the child takes the run's environment, then runs the script as
# `python script argv` would, importing framejit itself (framejit reads FRAMEJIT_* when imported), so its
# framejit state is as fresh as a new interpreter's (nothing compiled, nothing loaded), its object addresses
# differ from its siblings' (NOTE [Addresses in forked children]), and it exits normally. One server per
# preload list and non-FRAMEJIT environment serves the whole session (torch read its own variables when the
# server imported it: another environment gets another server). Tests about what a cold process imports
# must use their own interpreter (subprocess.run).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sizes(fn: Callable, make_args: Callable[[int], tuple], sizes, **compile_kwargs) -> CountingBackend:
    """Calls `fn` compiled and eagerly for each size (fresh inputs each time, the same values on both sides),
    comparing results and in-place updates of the arguments; returns the counting backend."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, **compile_kwargs)
    for i, n in enumerate(sizes):
        manual_seed(i)
        args = make_args(n)
        manual_seed(i)
        compiled_args = make_args(n)  # the same values, made anew (markers set on tensors are kept)
        assert_same(compiled(*compiled_args), fn(*args))
        assert_same(compiled_args, args)  # the same in-place updates
    return backend


def server_key(preload: tuple[str, ...], env: dict) -> tuple:
    """What a program server's children inherit from it: the modules it imported and the environment it
    imported them in (FRAMEJIT_* aside: each child takes its own before importing framejit)."""
    return preload, tuple(sorted((k, v) for k, v in _inherited(env).items()))


def _inherited(env: dict) -> dict:
    """The part of `env` a server's imports may have read (not FRAMEJIT_*, not pytest's per-test variable)."""
    return {k: v for k, v in env.items() if not k.startswith("FRAMEJIT_") and k != "PYTEST_CURRENT_TEST"}


class ProgramServer:
    """One tests/program_server.py process (see NOTE [Programs in forked children])."""

    def __init__(self, preload: tuple[str, ...], env: dict) -> None:
        self.key = server_key(preload, env)
        base = _inherited(env)
        self.process = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "program_server.py"),
                                         *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=base, start_new_session=True)
        self._answer()

    def _answer(self, timeout: float = 300) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"program server: no answer in {timeout} s: {self.process.stderr.read()}")
        return json.loads(line)

    def run(self, runs: list[dict]) -> list[int]:
        """Runs (script, argv, stdout, stderr, env each) concurrently in forked children; their exit codes."""
        self.process.stdin.write(json.dumps({"runs": runs}) + "\n")
        self.process.stdin.flush()
        return self._answer()["rcs"]

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


_servers: dict[tuple, ProgramServer] = {}
_MAX_SERVERS = 2  # ~0.5 GB each

# What a backend's cold compile imports, for `preload` (a warm process of these backends imports less; the
# tests that check that run their own interpreter: tests/backends/test_onnxrt_warm_imports.py). Not
# onnxruntime: a child forked after importing it aborts in its first session ("terminate called after
# throwing an instance of 'std::system_error'"). Not framejit.backends.onnxrt: framejit is imported by the
# child (NOTE [Programs in forked children]).
BACKEND_MODULES = {"eager": (), "onnxrt": ("onnx", "onnxscript")}


def close_program_servers() -> None:
    """Ends every program server (tests/conftest.py calls it when the session ends)."""
    while _servers:
        _servers.popitem()[1].close()


def _server(preload: tuple[str, ...], env: dict) -> ProgramServer:
    key = server_key(preload, env)
    server = _servers.pop(key, None)
    if server is None or server.process.poll() is not None:
        while len(_servers) >= _MAX_SERVERS:
            _servers.pop(next(iter(_servers))).close()  # the least recently used
        server = ProgramServer(preload, env)
    _servers[key] = server
    return server


def run_programs(tmp_path, runs: list[tuple], *, env: dict | None = None, preload: tuple[str, ...] = (),
                 pythonpath: str = REPO) -> list:
    """Runs `(script path, argv tuple)` pairs concurrently, each in a new process (a forked child of a
    program server, NOTE [Programs in forked children]) with environment `env` (default: this process's)
    plus PYTHONPATH=`pythonpath` (default the repository; another one gets a server of its own);
    returns (rc, stdout, stderr) for each."""
    env = dict(os.environ if env is None else env, PYTHONPATH=pythonpath)
    n = len(list(tmp_path.glob("run*.out")))
    requests = [{"script": str(script), "argv": [str(a) for a in argv], "stdout": str(tmp_path / f"run{n + i}.out"),
                 "stderr": str(tmp_path / f"run{n + i}.err"), "env": env} for i, (script, argv) in enumerate(runs)]
    rcs = _server(preload, env).run(requests)
    return [(rc, Path(r["stdout"]).read_text(), Path(r["stderr"]).read_text()) for rc, r in zip(rcs, requests)]


def run_program(tmp_path, script, *argv, env: dict | None = None, preload: tuple[str, ...] = (),
                pythonpath: str = REPO) -> tuple:
    """One run of run_programs: (rc, stdout, stderr)."""
    return run_programs(tmp_path, [(script, argv)], env=env, preload=preload, pythonpath=pythonpath)[0]


def run_cache_program(tmp_path, name: str, program: str, *argv: str, preload: tuple[str, ...] = ()) -> dict:
    """Runs `program` (a script that prints one JSON line last) in a new process with the frame cache on,
    in a cache folder under `tmp_path` shared by every run of one test; returns that JSON. The process is a
    forked child of a server that imported torch and the modules in `preload` (NOTE [Programs in forked
    children])."""
    script = tmp_path / name
    script.write_text(program)
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1")
    rc, out, err = run_program(tmp_path, script, *argv, env=env, preload=preload)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Randomness off (dropout, stochastic depth, router jitter: their draws would differ between two
    runs), everything else in train mode. Used by training tests and benchmarks/training.py."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for attr in ("dropout", "dropout_prob", "drop_prob", "jitter"):
            if isinstance(getattr(module, attr, None), float):
                setattr(module, attr, 0.0)
    return model


class LogRecords(logging.Handler):
    """Keeps (pathname, lineno, funcName, message) of each record: where a `stacklevel` points."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.pathname, record.lineno, record.funcName, record.getMessage()))


class _BreakRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.endswith("graph_breaks"):
            self.records.append(record.getMessage())


@contextlib.contextmanager
def logged_breaks():
    """Turns the graph_breaks log on and yields the list its messages are appended to."""
    handler = _BreakRecords()
    logger = logging.getLogger("framejit")
    logger.addHandler(handler)
    framejit.set_logs("graph_breaks")
    try:
        yield handler.records
    finally:
        framejit.set_logs("")
        logger.removeHandler(handler)


def eager_frames() -> int:
    """Frames run wholly eagerly so far in this process: a cumulative stat (framejit.reset() keeps it), so tests
    compare it before and after."""
    return int(framejit.stats()["eager_frames"])
