"""Errors eager does not have, and errors framejit must raise instead of hiding.

- the recompile limit 0 means "never compile" (every call runs eagerly, one log line), not an IndexError;
- bad environment values are rejected at import, naming the variable and the accepted values;
- a generator that raises StopIteration inside a try block leaves tracebacks that format (every frame of
  a resume function has a line number);
- a shape error the user catches prints nothing (the fake-tensor error log stays quiet while tracing);
- framejit.disable functions called at a graph break run as plain Python, never captured;
- a backend that raises or returns a non-callable raises framejit.BackendCompilerFailed naming it, with
  fullgraph=False too; bad options of built-in backends raise at compile().
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential, run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT_")}
    environment.update(FRAMEJIT_CACHE="0", PYTHONPATH=ROOT)
    environment.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          cwd=ROOT, timeout=300)


# -- recompile limit 0 ----------------------------------------------------------------------------------
def _add_one(x, k):
    return x * k + 1


def test_recompile_limit_zero_runs_eagerly_without_compiling(monkeypatch, caplog):
    monkeypatch.setattr(framejit.config, "recompile_limit", 0)
    backend = CountingBackend()
    compiled = framejit.compile(_add_one, backend=backend)
    run_differential(_add_one, lambda seed: (torch.randn(3), seed + 2), seeds=(0, 1, 2), compiled=compiled,
                     backend=backend)
    assert backend.graph_count == 0
    messages = [r.getMessage() for r in caplog.records if "recompile limit is 0" in r.getMessage()]
    assert len(messages) == 1 and "_add_one" in messages[0]


def test_recompile_limit_zero_from_the_environment(tmp_path):
    # a forked child of the program server, which imports framejit (reading FRAMEJIT_*) as a new interpreter
    # would; the environment as _python gives it (NOTE [Programs in forked children] in tests/helpers.py)
    script = tmp_path / "limit_zero.py"
    script.write_text("import torch, framejit\n"
                      "f = framejit.compile(lambda x: x + 1)\n"
                      "print([f(torch.ones(2)).tolist() for _ in range(3)], framejit.stats()['frames_traced'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT_")}
    env.update(FRAMEJIT_CACHE="0", FRAMEJIT_RECOMPILE_LIMIT="0")
    rc, out, err = run_program(tmp_path, script, env=env)
    assert rc == 0, err
    assert out.strip() == "[[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]] 0"
    assert "recompile limit is 0" in err


# -- bad environment values -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, value, accepted", [
    ("FRAMEJIT_CACHE_SIZE_MB", "-5", "integer >= 0"),
    ("FRAMEJIT_CACHE_SIZE_MB", "big", "integer >= 0"),
    ("FRAMEJIT_DISABLE", "maybe", "1, true, yes, on"),
    ("FRAMEJIT_CACHE", "sometimes", "0, false, no, off"),
    ("FRAMEJIT_RECOMPILE_LIMIT", "-1", "integer >= 0"),
    ("FRAMEJIT_RECOMPILE_LIMIT", "lots", "integer >= 0"),
    ("FRAMEJIT_DYNAMIC_FLOATS", "2", "1, true, yes, on"),
])
def test_bad_environment_values_are_rejected(name, value, accepted):
    result = _python("import framejit.config", **{name: value})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError:") and name in last and repr(value) in last and accepted in last, last


def test_good_environment_values_are_read():
    code = ("import json, framejit.config as c\n"
            "print(json.dumps([c.disable, c.cache_size_mb, c.recompile_limit, c.dynamic_floats]))\n")
    result = _python(code, FRAMEJIT_DISABLE=" Yes ", FRAMEJIT_CACHE_SIZE_MB="0", FRAMEJIT_RECOMPILE_LIMIT="3",
                     FRAMEJIT_DYNAMIC_FLOATS="off")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [True, 0, 3, False]
    unset = _python(code, FRAMEJIT_DISABLE="", FRAMEJIT_RECOMPILE_LIMIT="")
    assert json.loads(unset.stdout) == [False, 1024, 8, True]


# -- StopIteration in a generator under try ----------------------------------------------------------------
def _gen_raising_stop_iteration(x):
    try:
        yield x + 1
        next(iter([]))  # StopIteration inside a generator: a RuntimeError for the caller (PEP 479)
    finally:
        pass


def _sum_generator_in_try(x):
    try:
        for t in _gen_raising_stop_iteration(x):
            x = x + t
    except RuntimeError:
        return x * 2
    return x


@pytest.mark.parametrize("fullgraph", [False, True])
def test_stop_iteration_in_generator_under_try_keeps_tracebacks_formattable(fullgraph):
    compiled = framejit.compile(_sum_generator_in_try, fullgraph=fullgraph)
    for seed in range(3):
        x = torch.randn(2, generator=torch.Generator().manual_seed(seed))
        expected = _sum_generator_in_try(x.clone())
        try:
            actual = compiled(x.clone())
        except framejit.Unsupported as e:  # allowed with fullgraph=True only
            assert fullgraph
            frames = traceback.extract_tb(e.__traceback__)
            assert all(isinstance(f.lineno, int) for f in frames), [(f.name, f.lineno) for f in frames]
            text = "".join(traceback.format_exception(e))
            assert "_sum_generator_in_try" in text
            assert e.graph_break.user_stack and e.graph_break.user_stack[-1].lineno != \
                _sum_generator_in_try.__code__.co_firstlineno
        else:
            torch.testing.assert_close(actual, expected)


# -- a caught shape error prints nothing -----------------------------------------------------------------
def _matmul_or_sum(x, y):
    try:
        return x @ y
    except RuntimeError:
        return x.sum()


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])  # triton: tests/backends (TRITON_INTERPRET)
def test_caught_shape_error_prints_nothing(capfd, backend):
    compiled = framejit.compile(_matmul_or_sum, backend=backend)
    for shape in [(2, 3), (3, 3), (2, 3)]:
        x, y = torch.ones(2, 3), torch.ones(*shape)
        torch.testing.assert_close(compiled(x, y), _matmul_or_sum(x, y))
    out, err = capfd.readouterr()
    assert out == "" and err == "", err


# -- framejit.disable at a graph break -----------------------------------------------------------------
SEEN: list = []


@framejit.disable
def _disabled_helper(x):
    SEEN.append(type(x).__name__)
    return x * 3 + 1


def _breaks_then_calls_disabled(x):
    y = x.sin()
    print("break")
    z = _disabled_helper(y)
    return z.cos()


class _Recording(CountingBackend):
    """Records each graph and hands it to a real backend."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.real = framejit.lookup_backend(name)

    def __call__(self, gm, example_inputs):
        super().__call__(gm, example_inputs)
        return self.real(gm, example_inputs)


@pytest.mark.parametrize("backend_name", ["eager", "onnxrt"])
def test_disabled_function_called_at_a_break_runs_as_python(backend_name, capsys):
    SEEN.clear()
    backend = run_differential(_breaks_then_calls_disabled, lambda seed: (torch.randn(4),), seeds=(0, 1, 2),
                               fullgraph=False, backend=_Recording(backend_name), atol=1e-5, rtol=1e-5)
    assert SEEN == ["Tensor"] * 6  # 3 eager + 3 compiled calls, each a real call with a real tensor
    assert backend.graph_count == 2  # sin before the break, cos after the helper
    for gm in backend.graphs:  # no graph holds the helper's ops (x * 3 + 1)
        targets = [str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
        assert not any("mul" in t or "add" in t for t in targets), targets


# -- backends that fail -----------------------------------------------------------------------------------
def _raising_backend(gm, example_inputs):
    raise RuntimeError("this backend is broken")


def _none_backend(gm, example_inputs):
    return None


def _one_graph(x):
    return x.sin() + 1


def _with_break(x):
    y = x.sin()
    print("break")
    return y.cos()


# (with fullgraph=True a frame with a break raises Unsupported before any backend runs)
@pytest.mark.parametrize("fn, fullgraph", [(_one_graph, False), (_one_graph, True), (_with_break, False)],
                         ids=["one_graph", "one_graph_fullgraph", "graph_break"])
@pytest.mark.parametrize("backend, message", [(_raising_backend, "this backend is broken"),
                                              (_none_backend, "returned NoneType")])
def test_failing_backend_raises_naming_it(fn, fullgraph, backend, message):
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for _ in range(2):  # every call raises: nothing eager was installed in its place
        with pytest.raises(framejit.BackendCompilerFailed) as info:
            compiled(torch.ones(3))
        assert backend.__name__ in str(info.value) and message in str(info.value)
        assert info.value.backend_name.endswith(backend.__name__)
        if backend is _raising_backend:
            assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize("backend, options, words", [
    ("onnxrt", {"bogus": 1}, ["onnxrt", "bogus", "providers"]),
    ("onnxrt", {"opset": 2}, ["onnxrt", "opset", "18"]),
    ("onnxrt", {"graph_optimization_level": "max"}, ["onnxrt", "graph_optimization_level", "extended"]),
    ("triton", {"autotune": "yes"}, ["triton", "autotune", "bool"]),
    ("triton", {"blocks": 4}, ["triton", "blocks", "persistent_reduction_limit"]),
])
def test_bad_builtin_backend_options_raise_at_compile(backend, options, words):
    with pytest.raises((ValueError, TypeError)) as info:
        framejit.compile(lambda x: x + 1, backend=backend, options=options)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_bad_options_of_a_backend_module_given_as_callable_raise_at_the_call():
    import framejit.backends.onnxrt as onnxrt_module

    compiled = framejit.compile(lambda x: x + 1, backend=onnxrt_module, options={"bogus": 1})
    with pytest.raises(framejit.BackendCompilerFailed, match="bogus") as info:
        compiled(torch.ones(2))
    assert isinstance(info.value.__cause__, ValueError)
