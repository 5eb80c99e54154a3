"""Backend artifacts: `save(compiled) -> bytes | None` and `load(data, gm, example_inputs) -> callable`
of the eager, onnxrt and triton backends (backends/artifact.py), and how the registry exposes them.

The central test saves what each backend compiled and loads it in a fresh process (persist_worker.py, in a
forked child of a program server) whose lowering entry points raise: results equal eager (tolerance 1e-4
relative / 1e-5 absolute, float32) on two input sets with zero lowering calls. The other tests run in-process.
"""
from __future__ import annotations

import json
import logging
import os

import pytest
import torch

import framejit.cache
from framejit import logs
from framejit.backends import artifact, registry
from framejit.backends.onnxrt import persist as onnx_persist
from framejit.backends.triton.runtime import EagerGraph
from tests.backends.persist_worker import F32, build, compile_with
from tests.helpers import BACKEND_MODULES, run_program

BACKENDS = ("eager", "onnxrt", "triton")


def _compiled(backend: str):
    gm, make_inputs, options = build(backend)
    with torch.no_grad():
        return gm, make_inputs, compile_with(backend, gm, make_inputs(0), options)


@pytest.fixture(scope="module")
def fresh_process_results(tmp_path_factory):
    """Save with every backend here; load in one fresh process; its JSON report per backend."""
    directory = tmp_path_factory.mktemp("artifacts")
    for backend in BACKENDS:
        _, _, compiled = _compiled(backend)
        data = registry.entry_for(backend).save_artifact(compiled)
        assert isinstance(data, bytes)
        (directory / f"{backend}.bin").write_bytes(data)
    env = dict(os.environ, TRITON_INTERPRET="1", FRAMEJIT_CACHE="0")
    env.pop("FRAMEJIT_LOGS", None)
    # `python -m tests.backends.persist_worker DIR` in a forked child of a program server, which never
    # imports framejit (NOTE [Programs in forked children] in tests/helpers.py): torch is not imported anew
    script = tmp_path_factory.mktemp("worker") / "persist_worker_main.py"
    script.write_text("import runpy\nrunpy.run_module('tests.backends.persist_worker', run_name='__main__')\n")
    rc, out, err = run_program(script.parent, script, directory, env=env, preload=BACKEND_MODULES["onnxrt"])
    assert rc == 0, err[-4000:]
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["backend"]: r for r in results}


@pytest.mark.parametrize("backend,loaded_type", [("onnxrt", "OnnxrtCompiled"), ("triton", "CompiledGraph")])
def test_loaded_in_a_fresh_process_without_lowering(fresh_process_results, backend, loaded_type):
    result = fresh_process_results[backend]
    assert result["type"] == loaded_type
    assert result["lowered_when_loading"] == 0
    assert result["lowered_for_new_signature"] >= 1  # the patched entry points are the ones used


def test_eager_loaded_in_a_fresh_process(fresh_process_results):
    assert fresh_process_results["eager"]["type"] == "method"


def test_eager_artifact_is_empty_and_loads_the_graph_forward():
    gm, make_inputs, compiled = _compiled("eager")
    entry = registry.entry_for("eager")
    assert entry.save_artifact(compiled) == b""
    loaded = entry.load_artifact(b"", gm, make_inputs(0))
    inputs = make_inputs(1)
    torch.testing.assert_close(loaded(*inputs), gm(*inputs), rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_round_trip_in_process_is_stable(backend):
    gm, make_inputs, compiled = _compiled(backend)
    entry = registry.entry_for(backend)
    data = entry.save_artifact(compiled)
    loaded = entry.load_artifact(data, gm, make_inputs(0))
    for seed in (3, 4):
        inputs = make_inputs(seed)
        with torch.no_grad():
            torch.testing.assert_close(loaded(*inputs), gm(*inputs), **F32)
    assert entry.save_artifact(loaded) == data  # a loaded program saves to the same bytes


def test_onnxrt_eager_signature_is_remembered():
    gm, make_inputs, compiled = _compiled("onnxrt")
    (sig,) = compiled.programs
    compiled.programs[sig] = None  # as after a failed build: this signature runs eagerly
    loaded = onnx_persist.load(onnx_persist.save(compiled), gm, None)
    assert list(loaded.programs.items()) == [(sig, None)]
    inputs = make_inputs(5)
    torch.testing.assert_close(loaded(*inputs), gm(*inputs), rtol=0, atol=0)


def test_onnxrt_weights_come_from_the_new_graph_module():
    gm, make_inputs, compiled = _compiled("onnxrt")
    data = onnx_persist.save(compiled)
    other, _, _ = build("onnxrt")
    with torch.no_grad():
        other.linear.weight.mul_(-1.0)
    loaded = onnx_persist.load(data, other, None)
    inputs = make_inputs(6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(*inputs), other(*inputs), **F32)


def test_not_persistable_gives_none():
    gm, make_inputs, _ = build("triton")
    triton_save = registry.entry_for("triton").save_artifact
    assert triton_save(EagerGraph(gm, "test")) is None
    assert triton_save(gm.forward) is None
    assert registry.entry_for("onnxrt").save_artifact(gm.forward) is None


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_damaged_or_mismatched_artifacts_raise_artifact_error(backend):
    gm, make_inputs, compiled = _compiled(backend)
    entry = registry.entry_for(backend)
    data = entry.save_artifact(compiled)
    other_kind = "triton" if backend == "onnxrt" else "onnxrt"
    damaged = [data[: len(data) // 2], b"garbage", data + b"x", artifact.pack(other_kind, {})]
    for bad in damaged:
        with pytest.raises(artifact.ArtifactError):
            entry.load_artifact(bad, gm, make_inputs(0))
    wider = build(backend)[0]
    wider.linear = torch.nn.Linear(8, 16)  # same attribute path, another shape
    with pytest.raises(artifact.ArtifactError, match="linear.weight"):
        entry.load_artifact(data, wider, make_inputs(0))
    with pytest.raises(TypeError, match="data must be bytes"):
        entry.load_artifact("text", gm, make_inputs(0))


def test_registry_exposes_artifact_functions():
    import framejit.backends.onnxrt as onnxrt_module

    for name in BACKENDS:
        entry = registry.entry_for(name)
        assert callable(entry.save_artifact) and callable(entry.load_artifact)
        assert registry.artifact_functions(name) == (entry.save_artifact, entry.load_artifact)
    onnx_pair = registry.artifact_functions("onnxrt")
    assert registry.artifact_functions(onnxrt_module) == onnx_pair
    assert registry.artifact_functions(onnxrt_module.onnxrt) == onnx_pair

    def user_backend(gm, example_inputs):
        return gm.forward

    registry.register_backend("persist_test_user_backend")(user_backend)
    try:
        assert registry.entry_for("persist_test_user_backend").save_artifact is None
        assert registry.artifact_functions("persist_test_user_backend") is None
        assert registry.artifact_functions(user_backend) is None
    finally:
        del registry._REGISTRY["persist_test_user_backend"]


class _RefusingStore:
    """A store whose writes are refused (as a read-only or full cache refuses them)."""

    def __init__(self) -> None:
        self.puts = 0

    def get(self, key):
        return None

    def put(self, key, files, meta=None) -> bool:
        self.puts += 1
        return False


def test_onnxrt_does_not_claim_a_refused_write_was_stored(monkeypatch, caplog):
    store = _RefusingStore()
    monkeypatch.setattr(framejit.cache, "default_store", lambda: store)
    logs.set_logs("cache")
    caplog.set_level(logging.INFO, logger="framejit.cache")
    try:
        _compiled("onnxrt")
    finally:
        logs.set_logs("")
    messages = [r.getMessage() for r in caplog.records if r.name == "framejit.cache"]
    assert store.puts >= 1
    assert any("was not stored" in m for m in messages), messages
    assert not any("onnxrt: stored" in m for m in messages), messages


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(self.a(x).relu()).tanh()


def test_onnxrt_restored_whole_graph_programs_keep_the_one_part_path():
    """NOTE [Restored graphs keep the one-part path]: a program whose top graph is one ORT part called on
    its inputs is called through that part directly after a save and load too (the restored graph has no FX
    graph to read the layout from), with eager's values on fresh inputs and after a weight changes."""
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(_Mlp().requires_grad_(False))
    weights = [gm.a.weight, gm.a.bias, gm.b.weight, gm.b.bias]
    graph = torch.fx.symbolic_trace(lambda a_w, a_b, b_w, b_b, x: torch.tanh(torch.nn.functional.linear(
        torch.nn.functional.linear(x, a_w, a_b).relu(), b_w, b_b)))
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled = compile_with("onnxrt", graph, [*weights, x], None)
        (program,) = compiled.programs.values()
        assert program._one_part is not None  # the whole graph is one part
        loaded = onnx_persist.load(onnx_persist.save(compiled), graph, None)
        (restored,) = loaded.programs.values()
        assert isinstance(restored.graph_module, onnx_persist.RestoredGraph)
        assert restored._one_part is not None
        for seed in (1, 2):
            x = torch.randn(3, 8, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(loaded(*weights, x), gm(x), **F32)
        gm.a.weight.mul_(-1.0)
        torch.testing.assert_close(loaded(*weights, x), gm(x), **F32)
