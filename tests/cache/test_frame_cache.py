"""The frame cache across processes: a warm second process runs compiled frames with zero traces and zero
backend compiles and returns identical results; source, global, dtype, shape, backend-option and version
changes are misses; concurrent warmers leave a consistent cache; corrupt entries are rebuilt. Each process is a
forked child of a clean program server (NOTE [Programs in forked children] in tests/helpers.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import BACKEND_MODULES, run_program, run_programs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent('''
    import json, os, sys
    import torch
    import framejit

    if os.environ.get("FAKE_TORCH_VERSION"):  # stands for a torch upgrade between the two processes
        torch.__version__ = os.environ["FAKE_TORCH_VERSION"]

    SCALE = {scale}

    def helper(x):
        return x.cos() * SCALE

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x)) + helper(x)

    def f(x, y):
        return (x * y).sin() + helper(x){extra}

    torch.manual_seed(0)
    net = Net().to(getattr(torch, sys.argv[3]))
    backend, options = sys.argv[1], json.loads(sys.argv[2])
    compiled_net = framejit.compile(net, backend=backend, options=options or None)
    compiled_f = framejit.compile(f, backend=backend, options=options or None)
    x = torch.arange(8, dtype=getattr(torch, sys.argv[3])).reshape(2, 4) / 8 + {shift}
    out = [compiled_net(x).tolist(), compiled_f(x, x).tolist()]
    ref = [net(x).tolist(), f(x, x).tolist()]
    stats = framejit.stats()
    print(json.dumps({{"out": out, "ref": ref, "traced": stats["frames_traced"],
                       "backend_compiles": stats["backend_compiles"], "loaded": stats["frames_loaded"]}}))
''')


def run(tmp_path, cache_dir, *, scale=2.0, extra="", dtype="float32", shift=0.0, backend="eager", options=None,
        env=None, tag=""):
    return runs(tmp_path, cache_dir, [tag], scale=scale, extra=extra, dtype=dtype, shift=shift, backend=backend,
                options=options, env=env)[0]


def runs(tmp_path, cache_dir, tags, *, scale=2.0, extra="", dtype="float32", shift=0.0, backend="eager",
         options=None, env=None) -> list[dict]:
    """The program run once per tag, all at once, each in a new process (NOTE [Programs in forked children])."""
    scripts = []
    for tag in tags:
        script = tmp_path / f"prog_{abs(hash((scale, extra, dtype, shift)))}{tag}.py"
        script.write_text(PROGRAM.format(scale=scale, extra=extra, shift=shift))
        scripts.append((script, (backend, json.dumps(options or {}), dtype)))
    full_env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(cache_dir), FRAMEJIT_CACHE="1", FRAMEJIT_LOGS="cache")
    full_env.update(env or {})
    results = []
    for rc, out, err in run_programs(tmp_path, scripts, env=full_env, preload=BACKEND_MODULES[backend]):
        assert rc == 0, err
        data = json.loads(out.strip().splitlines()[-1])
        if backend == "eager":
            assert data["out"] == data["ref"]  # bit-identical to eager, cold or warm
        else:
            import torch
            for got, ref in zip(data["out"], data["ref"]):
                torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
        data["log"] = err
        results.append(data)
    return results


def run_script(tmp_path, script, *argv, **env) -> tuple[dict, str]:
    """(the JSON line `script` prints last, its stderr), run in a new process with the frame cache on."""
    rc, out, err = run_program(tmp_path, script, *argv, env=dict(os.environ, FRAMEJIT_CACHE="1", **env))
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


# NOTE [One cold process per module]: most tests below start from the cache a cold process of the base
# program leaves. That process runs once per module (each process pays ~3 s of CPU importing torch, and CI
# runs the suite on several CPython versions on 2 cores); each test gets its own copy of the cache, and the
# scripts live in one folder so every test runs the same script paths as the cold process did.
@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    root = tmp_path_factory.mktemp("frame_cache_programs")
    data = run(root, root / "cold_cache")
    return root, root / "cold_cache", data


@pytest.fixture
def after_cold(cold, tmp_path):
    """(script folder, a copy of the cold process's cache)."""
    root, cold_cache, _ = cold
    cache_copy = tmp_path / "cache"
    shutil.copytree(cold_cache, cache_copy)
    return root, cache_copy


def test_warm_process_does_not_trace_or_compile(cold, after_cold):
    cold = cold[2]
    assert cold["traced"] == 2 and cold["backend_compiles"] == 2 and cold["loaded"] == 0
    warm = run(*after_cold)
    assert warm["traced"] == 0 and warm["backend_compiles"] == 0 and warm["loaded"] == 2
    assert warm["out"] == cold["out"]


@pytest.mark.parametrize("change", [
    {"extra": " + 1"},            # the function's source changed
    {"scale": 3.0},               # a global it reads changed (guarded value)
    {"dtype": "float64"},         # input dtype
    {"options": {"allow_spinning": False}, "backend": "onnxrt"},  # another backend / options
], ids=["source", "global_value", "dtype", "onnxrt_options"])
def test_changes_are_misses(after_cold, change):
    changed = run(*after_cold, **change)
    assert changed["traced"] >= 1


def test_input_shape_change_traces_only_the_new_shape(after_cold):
    tmp_path, cache_dir = after_cold
    program = PROGRAM.replace("reshape(2, 4)", "reshape(2, 4).repeat(2, 1)")
    script = tmp_path / "shape.py"
    script.write_text(program.format(scale=2.0, extra="", shift=0.0))
    data, _ = run_script(tmp_path, script, "eager", "{}", "float32", FRAMEJIT_CACHE_DIR=str(cache_dir))
    assert data["out"] == data["ref"] and data["traced"] == 2 and data["loaded"] == 2


def test_callee_source_change_is_a_miss(after_cold):
    tmp_path, cache_dir = after_cold
    program = PROGRAM.replace("return x.cos() * SCALE", "return x.cos() * SCALE - 1")
    script = tmp_path / "callee.py"
    script.write_text(program.format(scale=2.0, extra="", shift=0.0))
    data, log = run_script(tmp_path, script, "eager", "{}", "float32", FRAMEJIT_CACHE_DIR=str(cache_dir),
                           FRAMEJIT_LOGS="cache")
    assert data["out"] == data["ref"] and data["traced"] == 2
    assert "changed since it was cached" in log


def test_torch_version_key_change_is_a_miss(after_cold):
    # a different runtime (as a torch upgrade would give) changes every key
    changed = run(*after_cold, env={"FAKE_TORCH_VERSION": "2.99.0+other"})
    assert changed["traced"] == 2


def test_disabled_cache_never_loads(after_cold):
    off = run(*after_cold, env={"FRAMEJIT_CACHE": "0"})
    assert off["traced"] == 2 and off["loaded"] == 0


def test_corrupt_entries_are_rebuilt(after_cold):
    tmp_path, cache_dir = after_cold
    entries = list(cache_dir.rglob("*.entry"))
    assert entries
    for path in entries:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])  # truncated
    rebuilt = run(tmp_path, cache_dir)
    assert rebuilt["traced"] == 2
    assert "rejected" in rebuilt["log"]
    warm = run(tmp_path, cache_dir)
    assert warm["traced"] == 0


def test_eight_concurrent_warmers_leave_a_consistent_cache(tmp_path, cache_dir):
    results = runs(tmp_path, cache_dir, [f"_{i}" for i in range(8)])  # eight processes at once
    assert all(r["out"] == results[0]["out"] for r in results)
    verify = subprocess.run([sys.executable, "-m", "framejit", "cache", "verify"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO, FRAMEJIT_CACHE_DIR=str(cache_dir)), timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    warm = run(tmp_path, cache_dir)
    assert warm["traced"] == 0


STATE_PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def f(x):
        with torch.no_grad():
            y = x * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = x @ x
        return y, z, x * 3

    compiled = framejit.compile(f, backend="eager")
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4).div(16).requires_grad_()
    described = lambda outs: [[t.dtype.__repr__(), t.requires_grad, t.tolist()] for t in outs]
    stats = framejit.stats()
    print(json.dumps({"out": described(compiled(x)), "ref": described(f(x)), "traced": framejit.stats()["frames_traced"],
                      "loaded": framejit.stats()["frames_loaded"]}))
''')


def test_state_changes_inside_a_graph_survive_the_cache(tmp_path, cache_dir):
    """NOTE [Persisted graphs]: grad-mode and autocast nodes are kept when a graph is saved and loaded (a
    GraphModule's own pickling would run them while re-tracing its code and drop them)."""
    script = tmp_path / "state_prog.py"
    script.write_text(STATE_PROGRAM)
    runs_ = [run_script(tmp_path, script, FRAMEJIT_CACHE_DIR=str(cache_dir))[0] for _ in range(2)]
    cold, warm = runs_
    assert cold["traced"] == 1 and cold["loaded"] == 0
    assert warm["traced"] == 0 and warm["loaded"] == 1
    for run_ in runs_:
        assert run_["out"] == run_["ref"]
    assert [o[:2] for o in warm["out"]] == [["torch.float32", False], ["torch.bfloat16", True], ["torch.float32", True]]


PROPERTY_PROGRAM = textwrap.dedent('''
    import json
    import torch
    import framejit

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        @property
        def dtype(self):  # as the zoo's bert (and transformers' models) read their parameters' dtype
            return self.lin.weight.dtype

        def forward(self, x):
            return self.lin(x.to(self.dtype)).relu()

    torch.manual_seed(0)
    net = Net()
    compiled = framejit.compile(net)
    xs = [torch.arange(8, dtype=torch.float64).reshape(2, 4) / 8, torch.linspace(-1, 1, 12).reshape(3, 4)]
    out = [compiled(x).tolist() for x in xs]
    ref = [net(x).tolist() for x in xs]
    print(json.dumps({"out": out, "ref": ref, "traced": framejit.stats()["frames_traced"],
                      "loaded": framejit.stats()["frames_loaded"]}))
''')


def test_entry_guarding_a_class_property_is_persisted(tmp_path, cache_dir):
    """NOTE [Properties by name]: an entry whose guards pin a property of the module's class is stored and
    loaded (it was kept in memory only, so every warm process traced again)."""
    script = tmp_path / "property_prog.py"
    script.write_text(PROPERTY_PROGRAM)
    runs_ = []
    for _ in range(2):
        data, log = run_script(tmp_path, script, FRAMEJIT_CACHE_DIR=str(cache_dir), FRAMEJIT_LOGS="cache")
        assert "kept in memory only" not in log, log
        runs_.append(data)
    cold, warm = runs_
    assert cold["traced"] >= 1 and cold["loaded"] == 0
    assert warm["traced"] == 0 and warm["loaded"] == cold["traced"]
    for run_ in runs_:
        assert run_["out"] == run_["ref"]


CLASS_SCALAR_PROGRAM = textwrap.dedent('''
    import dataclasses, json, sys
    import torch
    import framejit

    @dataclasses.dataclass
    class Config:  # as the zoo's moe: instance fields whose class defaults the lookup facts pin
        scale: float = 0.01  # a float: another object in every process
        name: str = "a-string-class-constant-longer-than-an-interned-one"

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) * self.config.scale + len(self.config.name)

    torch.manual_seed(0)
    net = Net()
    if sys.argv[1] == "changed":
        net.config.scale = 0.5
    compiled = framejit.compile(net)
    x = torch.linspace(-1, 1, 8).reshape(2, 4)
    print(json.dumps({"out": compiled(x).tolist(), "ref": net(x).tolist(), "traced": framejit.stats()["frames_traced"],
                      "loaded": framejit.stats()["frames_loaded"]}))
''')


def test_entry_reading_a_scalar_class_constant_is_used_warm(tmp_path, cache_dir):
    """NOTE [Scalar class entries by value]: an entry whose trace read a dataclass field (the class default a
    float) is used by the next process (the default pinned by identity failed there: a float is another
    object in each process), and a changed value is still a miss."""
    script = tmp_path / "class_scalar_prog.py"
    script.write_text(CLASS_SCALAR_PROGRAM)
    runs_ = [run_script(tmp_path, script, mode, FRAMEJIT_CACHE_DIR=str(cache_dir))[0]
             for mode in ("same", "same", "changed")]
    cold, warm, changed = runs_
    for run_ in runs_:
        assert run_["out"] == run_["ref"]
    assert cold["traced"] == 1 and warm["traced"] == 0 and warm["loaded"] == 1
    assert changed["traced"] == 1 and changed["out"] != cold["out"]
