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


def run_differential(fn: Callable, make_args: Callable[[int], tuple], *, seeds=(0, 1), fullgraph: bool = True,
                     backend: Any = None, kwargs_fn: Callable[[int], dict] | None = None,
                     rtol: float | None = None, atol: float | None = None, compiled: Callable | None = None):
    backend = backend or CountingBackend()
    compiled = compiled or framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for seed in seeds:
        torch.manual_seed(1000 + seed)
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


def run_cache_program(tmp_path, name: str, program: str, *argv: str) -> dict:
    """Runs `program` (a script that prints one JSON line last) in a new process with the frame cache on,
    in a cache folder under `tmp_path` shared by every run of one test; returns that JSON."""
    import json
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / name
    script.write_text(program)
    env = dict(os.environ, PYTHONPATH=repo, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1")
    result = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


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
