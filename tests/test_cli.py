"""The `framejit` command line. A few tests run `python -m framejit ...` as subprocesses (the real entry
point, environment variables, exit statuses); the rest call `cli.main([...])` in-process, because
every subprocess pays for `import torch`."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import framejit
from framejit import cli, config
from framejit.backends import registry
from framejit.cache import Store, cache_key

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args: str, cache_dir, cwd=None, env=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=REPO, **(env or {}))
    full_env.pop("FRAMEJIT_LOGS", None)
    return subprocess.run([sys.executable, "-m", "framejit", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The cache directory, for in-process calls (config) and subprocesses (FRAMEJIT_CACHE_DIR)."""
    path = tmp_path / "cache"
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(config, "cache_enabled", config.cache_enabled)  # `warm` turns it on
    monkeypatch.setenv("FRAMEJIT_CACHE", os.environ.get("FRAMEJIT_CACHE", "1"))
    return path


@pytest.fixture
def call(capsys):
    """cli.main in-process: returns (status, stdout, stderr)."""

    def call(*args: str):
        status = cli.main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return call


def assert_one_line_error(status, err, expected_status: int, fragment: str) -> None:
    assert status == expected_status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("framejit: error: ") and fragment in lines[0], err


@pytest.fixture
def filled(cache_dir):
    """A store with two entries: (store, eager key, onnxrt key); the onnxrt entry was hit once."""
    store = Store(cache_dir)
    eager, onnx = cache_key(kind="t", n="eager"), cache_key(kind="t", n="onnx")
    store.put(eager, {"code": b"x" * 100}, {"backend": "eager", "function": "forward", "location": "model.py:12"})
    store.put(onnx, {"model.onnx": b"y" * 3000}, {"backend": "onnxrt", "function": "step", "location": "train.py:40"})
    store.get(onnx)
    return store, eager, onnx


# -- subprocesses: the real entry point ---------------------------------------------------------------
def test_subprocess_cache_ls_and_verify(filled, cache_dir):
    store, eager, onnx = filled
    result = run_cli("cache", "ls", cache_dir=cache_dir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["key", "backend", "function", "location"]
    onnx_row = next(line for line in lines if line.startswith(onnx[:12])).split()
    eager_row = next(line for line in lines if line.startswith(eager[:12])).split()
    assert onnx_row[1:4] == ["onnxrt", "step", "train.py:40"] and onnx_row[-1] == "1"
    assert eager_row[1:4] == ["eager", "forward", "model.py:12"] and eager_row[-1] == "0"
    assert "2 entries" in lines[-1]
    with open(store.entry_path(onnx), "r+b") as f:
        f.truncate(100)
    result = run_cli("cache", "verify", cache_dir=cache_dir)
    assert result.returncode == 1
    assert store.entry_path(onnx) in result.stdout and store.entry_path(eager) not in result.stdout


def test_subprocess_unusable_cache_dir_is_one_line(tmp_path):
    os.chmod(tmp_path, 0o777)
    result = run_cli("cache", "stats", cache_dir=tmp_path)
    assert_one_line_error(result.returncode, result.stderr, 1, "writable by group or others")


def test_subprocess_backends(cache_dir):
    result = run_cli("backends", cache_dir=cache_dir)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    # other tests of this process may register extra backends; a fresh process lists the built-ins
    assert {"eager", "onnxrt", "triton"} <= set(rows) <= set(registry.list_backends())
    for name, line in rows.items():
        missing = registry.entry_for(name).missing_requirements()
        assert line.split()[1] == ("ok" if not missing else "missing:"), line


WARM_SCRIPT = """
import sys
from framejit.cache import cache_key, default_store
store = default_store()
assert store is not None, "warm must turn the cache on"
store.put(cache_key(kind="warm", args=sys.argv[1:]), {"blob": b"z" * 5000}, {"backend": "eager"})
print("script ran with", sys.argv[1:])
"""


def test_subprocess_warm_script_turns_the_cache_on(tmp_path, cache_dir):
    script = tmp_path / "warm_me.py"
    script.write_text(WARM_SCRIPT)
    result = run_cli("warm", str(script), "--", "--shape", "4", cache_dir=cache_dir, env={"FRAMEJIT_CACHE": "0"})
    assert result.returncode == 0, result.stderr
    assert "script ran with ['--shape', '4']" in result.stdout
    [info] = Store(cache_dir).ls()
    assert f"framejit warm: {script} (exit 0" in result.stdout
    written = next(line for line in result.stdout.splitlines() if line.startswith("cache bytes written"))
    assert written.split(None, 3)[-1] == cli.human_bytes(info.size)
    graphs = next(line for line in result.stdout.splitlines() if line.startswith("graphs "))
    assert graphs.split()[-1] in ("0", "-")  # the script compiles nothing


def test_subprocess_warm_entry_point_exit_status(tmp_path, cache_dir):
    (tmp_path / "my_entry.py").write_text("import sys\ndef main():\n    print('entry', sys.argv[1:])\n    return 3\n")
    result = run_cli("warm", "my_entry:main", "--", "a", cache_dir=cache_dir, cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "entry ['a']" in result.stdout and "framejit warm: my_entry:main (exit 3" in result.stdout


def test_subprocess_no_command_is_a_usage_error(cache_dir):
    result = run_cli(cache_dir=cache_dir)
    assert result.returncode == 2 and "usage: framejit" in result.stderr


# -- cache, in-process --------------------------------------------------------------------------------
def test_cache_ls_empty(cache_dir, call):
    status, out, _ = call("cache", "ls")
    assert status == 0 and "no entries" in out


def test_cache_stats(filled, call):
    status, out, _ = call("cache", "stats")
    assert status == 0
    rows = {line.split("  ")[0]: line.split()[-1] for line in out.splitlines() if line.strip()}
    assert rows["entries"] == "2" and rows["hits"] == "1" and rows["writes"] == "2"
    assert rows["hit rate"] == "100.0%"
    assert "onnxrt" in rows and "eager" in rows


def test_cache_verify_ok(filled, call):
    status, out, _ = call("cache", "verify")
    assert status == 0 and out.startswith("ok: 2 entries")


def test_cache_clear(filled, call):
    store, eager, onnx = filled
    assert_one_line_error(*call("cache", "clear")[::2], 2, "--all")
    assert_one_line_error(*call("cache", "clear", "--all", "--backend", "x")[::2], 2, "--all")
    status, out, _ = call("cache", "clear", "--backend", "onnxrt")
    assert status == 0 and "removed 1 entries" in out
    assert [info.key for info in store.ls()] == [eager]
    three_days_ago = time.time() - 3 * 86400
    os.utime(store.entry_path(eager), (three_days_ago, three_days_ago))
    assert "removed 0 entries" in call("cache", "clear", "--older-than", "4")[1]
    assert "removed 1 entries" in call("cache", "clear", "--older-than", "2.5")[1]
    store.put(onnx, {"m": b"1"}, {})
    assert "removed 1 entries" in call("cache", "clear", "--all")[1]
    assert store.ls() == []
    with pytest.raises(SystemExit) as exc:
        call("cache", "clear", "--older-than", "-1")
    assert exc.value.code == 2


@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "stats"], ["cache", "verify"],
                                     ["cache", "clear", "--all"], ["warm", "x.py"]])
def test_unusable_cache_dir_is_one_line(tmp_path, monkeypatch, call, command):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    monkeypatch.setattr(config, "cache_dir", str(not_a_dir))
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setenv("FRAMEJIT_CACHE", "1")
    assert_one_line_error(*call(*command)[::2], 1, "not a directory")


# -- backends and warm, in-process ---------------------------------------------------------------------
def test_backends_names_missing_requirements(monkeypatch, call):
    entry = registry.BackendEntry("needs_nothing_here", "x:y", None, ("framejit_no_such_module",), "test only")
    monkeypatch.setitem(registry._REGISTRY, entry.name, entry)
    status, out, _ = call("backends")
    line = next(line for line in out.splitlines() if line.startswith(entry.name))
    assert status == 0
    assert "missing: framejit_no_such_module" in line and "pip install framejit_no_such_module" in line


def test_warm_reports_a_failing_target_and_still_prints_the_table(tmp_path, cache_dir, call):
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('user bug')\n")
    argv, path = list(sys.argv), list(sys.path)
    status, out, err = call("warm", str(script))
    assert status == 1
    assert "Traceback" in err and "RuntimeError: user bug" in err
    assert "framejit warm:" in out and "(exit 1" in out
    assert (sys.argv, sys.path) == (argv, path)  # the target's process state was restored


@pytest.mark.parametrize(
    "target, fragment",
    [
        ("missing_script.py", "no such script"),
        ("no_such_module_xyz:main", "no module named 'no_such_module_xyz'"),
        ("os:no_such_function", "has no attribute"),
        ("os:sep", "not callable"),
        ("os:", "expected module:function"),
        ("a:b:c", "expected module:function"),
        ("plainword", "expected a script path or module:function"),
    ],
)
def test_warm_target_errors_are_one_line(cache_dir, call, target, fragment):
    assert_one_line_error(*call("warm", target)[::2], 1, fragment)


def test_warm_report_shows_frames_and_totals():
    stats = {
        "frames_compiled": 2, "graphs": 3, "backend_compiles": 3, "compile_time_s": 1.5,
        "frames": [
            {"function": "forward", "location": "m.py:10", "backend": "onnxrt", "graphs": 2,
             "compile_time_s": 1.25, "cache": "miss"},
            {"function": "loss", "location": "m.py:30", "backend": "onnxrt", "graphs": 1, "cache": "hit"},
        ],
    }
    report = cli.warm_report(stats, {"bytes_written": 2048, "hits": 1, "misses": 2}, "t.py", 0, 2.0, "/c")
    lines = report.splitlines()
    forward = next(line for line in lines if line.startswith("forward")).split()
    assert forward == ["forward", "m.py:10", "onnxrt", "2", "1.250", "miss"]
    assert next(line for line in lines if line.startswith("loss")).split()[-2:] == ["-", "hit"]
    totals = {label: line[len(label):].strip() for line in lines
              for label, _ in cli._TOTALS if line.startswith(label + " ")}
    assert totals["frames compiled"] == "2" and totals["frames traced"] == "-"
    assert totals["cache bytes written"] == "2.0 KiB" and totals["cache misses"] == "2"
    assert totals["compile time"] == "1.500 s"


# -- explain ------------------------------------------------------------------------------------------
def test_explain_script_reports_each_compiled_function(call, tmp_path):
    script = tmp_path / "breaks.py"
    script.write_text(
        "import torch, framejit\n"
        "def f(x):\n"
        "    y = x * 2\n"
        "    print('inside f')\n"
        "    return y + 1\n"
        "framejit.compile(f)(torch.randn(3))\n"
    )
    status, out, _ = call("explain", str(script))
    assert status == 0
    assert f"== f ({script}:2)" in out
    assert "Graph count: 2" in out and "Graph break count: 1" in out
    assert f"at {script}:4 in f: print('inside f')" in out


def test_explain_prints_the_report_of_an_entry_point(monkeypatch, call, tmp_path):
    def fake_explain(fn):
        return lambda: f"report for {fn.__name__}: {fn()}"

    monkeypatch.setattr(framejit, "explain", fake_explain)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "explain_entry", None)
    monkeypatch.delitem(sys.modules, "explain_entry")  # removed again when the test ends
    (tmp_path / "explain_entry.py").write_text("def go():\n    return 42\n")
    status, out, _ = call("explain", "explain_entry:go")
    assert status == 0 and "report for go: 42" in out


def test_live_progress_writes_a_line_and_clears_it(monkeypatch):
    import io

    monkeypatch.setattr(framejit, "stats", lambda: {"frames_compiled": 4, "graphs": 5})
    stream = io.StringIO()
    with cli.LiveProgress(stream, interval_s=0.001) as live:
        deadline = time.monotonic() + 10
        while "graphs" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.005)
    assert live.line() == "[framejit warm] frames compiled: 4  graphs: 5  backend compiles: -"
    assert "\r" + live.line() in stream.getvalue()
    assert stream.getvalue().endswith("\r\033[K")
