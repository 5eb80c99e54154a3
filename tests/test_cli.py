"""The `framejit` command line, run as `python -m framejit ...` subprocesses (and a few in-process
checks where a subprocess cannot stand in for the frontend)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import framejit
from framejit import cli
from framejit.backends import registry
from framejit.cache import Store, cache_key

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args: str, cache_dir, cwd=None, env=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(cache_dir), PYTHONPATH=REPO, **(env or {}))
    full_env.pop("FRAMEJIT_LOGS", None)
    return subprocess.run([sys.executable, "-m", "framejit", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=60)


def assert_one_line_error(result, status: int, fragment: str) -> None:
    assert result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("framejit: error: ") and fragment in lines[0], result.stderr


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def filled(cache_dir):
    """A store with two entries: (store, eager key, onnxrt key)."""
    store = Store(cache_dir)
    eager, onnx = cache_key(kind="t", n="eager"), cache_key(kind="t", n="onnx")
    store.put(eager, {"code": b"x" * 100}, {"backend": "eager", "function": "forward", "location": "model.py:12"})
    store.put(onnx, {"model.onnx": b"y" * 3000}, {"backend": "onnxrt", "function": "step", "location": "train.py:40"})
    store.get(onnx)
    return store, eager, onnx


# -- cache ----------------------------------------------------------------------------------------
def test_cache_ls_empty(cache_dir):
    result = run_cli("cache", "ls", cache_dir=cache_dir)
    assert result.returncode == 0 and "no entries" in result.stdout


def test_cache_ls_lists_entries(filled, cache_dir):
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


def test_cache_stats(filled, cache_dir):
    result = run_cli("cache", "stats", cache_dir=cache_dir)
    assert result.returncode == 0, result.stderr
    rows = {line.split("  ")[0]: line.split()[-1] for line in result.stdout.splitlines() if line.strip()}
    assert rows["entries"] == "2" and rows["hits"] == "1" and rows["writes"] == "2"
    assert rows["hit rate"] == "100.0%"
    assert "onnxrt" in rows and "eager" in rows


def test_cache_verify_ok_then_corrupt(filled, cache_dir):
    store, eager, onnx = filled
    result = run_cli("cache", "verify", cache_dir=cache_dir)
    assert result.returncode == 0 and result.stdout.startswith("ok: 2 entries")
    with open(store.entry_path(onnx), "r+b") as f:
        f.truncate(100)
    result = run_cli("cache", "verify", cache_dir=cache_dir)
    assert result.returncode == 1
    assert store.entry_path(onnx) in result.stdout and "1 problems" in result.stdout
    assert store.entry_path(eager) not in result.stdout


def test_cache_clear(filled, cache_dir):
    store, eager, onnx = filled
    assert_one_line_error(run_cli("cache", "clear", cache_dir=cache_dir), 2, "--all")
    assert_one_line_error(run_cli("cache", "clear", "--all", "--backend", "x", cache_dir=cache_dir), 2, "--all")
    result = run_cli("cache", "clear", "--backend", "onnxrt", cache_dir=cache_dir)
    assert result.returncode == 0 and "removed 1 entries" in result.stdout
    assert [info.key for info in store.ls()] == [eager]
    three_days_ago = time.time() - 3 * 86400
    os.utime(store.entry_path(eager), (three_days_ago, three_days_ago))
    assert "removed 0 entries" in run_cli("cache", "clear", "--older-than", "4", cache_dir=cache_dir).stdout
    assert "removed 1 entries" in run_cli("cache", "clear", "--older-than", "2.5", cache_dir=cache_dir).stdout
    store.put(onnx, {"m": b"1"}, {})
    assert "removed 1 entries" in run_cli("cache", "clear", "--all", cache_dir=cache_dir).stdout
    assert store.ls() == []
    result = run_cli("cache", "clear", "--older-than", "-1", cache_dir=cache_dir)
    assert result.returncode == 2 and "DAYS must not be negative" in result.stderr


@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "stats"], ["cache", "verify"],
                                     ["cache", "clear", "--all"], ["warm", "x.py"]])
def test_unusable_cache_dir_is_one_line(tmp_path, command):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert_one_line_error(run_cli(*command, cache_dir=not_a_dir), 1, "not a directory")


def test_cache_dir_writable_by_others_is_refused(filled, cache_dir):
    os.chmod(cache_dir, 0o777)
    assert_one_line_error(run_cli("cache", "ls", cache_dir=cache_dir), 1, "writable by group or others")


# -- backends -------------------------------------------------------------------------------------
def test_backends_lists_each_with_its_requirements(cache_dir):
    result = run_cli("backends", cache_dir=cache_dir)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(rows) == set(registry.list_backends())
    for name, line in rows.items():
        missing = registry.entry_for(name).missing_requirements()
        assert line.split()[1] == ("ok" if not missing else "missing:"), line


def test_backends_names_missing_requirements(monkeypatch, capsys):
    entry = registry.BackendEntry("needs_nothing_here", "x:y", None, ("framejit_no_such_module",), "test only")
    monkeypatch.setitem(registry._REGISTRY, entry.name, entry)
    assert cli.main(["backends"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(entry.name))
    assert "missing: framejit_no_such_module" in line and "pip install framejit_no_such_module" in line


# -- warm -----------------------------------------------------------------------------------------
WARM_SCRIPT = """
import sys
from framejit.cache import cache_key, default_store
store = default_store()
assert store is not None, "warm must turn the cache on"
store.put(cache_key(kind="warm", args=sys.argv[1:]), {"blob": b"z" * 5000}, {"backend": "eager"})
print("script ran with", sys.argv[1:])
"""


def test_warm_runs_a_script_with_the_cache_on(tmp_path, cache_dir):
    script = tmp_path / "warm_me.py"
    script.write_text(WARM_SCRIPT)
    result = run_cli("warm", str(script), "--", "--shape", "4", cache_dir=cache_dir, env={"FRAMEJIT_CACHE": "0"})
    assert result.returncode == 0, result.stderr
    assert "script ran with ['--shape', '4']" in result.stdout
    [info] = Store(cache_dir).ls()
    assert f"framejit warm: {script} (exit 0" in result.stdout
    written = next(line for line in result.stdout.splitlines() if line.startswith("cache bytes written"))
    assert written.split(None, 3)[-1] == cli.human_bytes(info.size)
    assert next(line for line in result.stdout.splitlines() if line.startswith("graphs")).split()[-1] == "-"


def test_warm_runs_an_entry_point_and_uses_its_return_value(tmp_path, cache_dir):
    (tmp_path / "my_entry.py").write_text("import sys\ndef main():\n    print('entry', sys.argv[1:])\n    return 3\n")
    result = run_cli("warm", "my_entry:main", "--", "a", cache_dir=cache_dir, cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "entry ['a']" in result.stdout and "framejit warm: my_entry:main (exit 3" in result.stdout


def test_warm_reports_a_failing_target_and_still_prints_the_table(tmp_path, cache_dir):
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('user bug')\n")
    result = run_cli("warm", str(script), cache_dir=cache_dir)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "RuntimeError: user bug" in result.stderr
    assert "framejit warm:" in result.stdout and "(exit 1" in result.stdout


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
def test_warm_target_errors_are_one_line(cache_dir, target, fragment):
    assert_one_line_error(run_cli("warm", target, cache_dir=cache_dir), 1, fragment)


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
    assert totals["frames compiled"] == "2" and totals["traces"] == "-"
    assert totals["cache bytes written"] == "2.0 KiB" and totals["cache misses"] == "2"
    assert totals["compile time"] == "1.500 s"


# -- explain and usage ------------------------------------------------------------------------------
def test_explain_not_available_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    def unavailable(fn):
        raise NotImplementedError

    monkeypatch.setattr(framejit, "explain", unavailable)
    script = tmp_path / "never_run.py"
    script.write_text("raise SystemExit('the target must not run')\n")
    assert cli.main(["explain", str(script)]) == 2
    assert capsys.readouterr().err == "framejit: error: explain is not available yet\n"


def test_explain_prints_the_report_of_an_entry_point(monkeypatch, capsys, tmp_path):
    def fake_explain(fn):
        return lambda: f"report for {fn.__name__}: {fn()}"

    monkeypatch.setattr(framejit, "explain", fake_explain)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setitem(sys.modules, "explain_entry", None)
    monkeypatch.delitem(sys.modules, "explain_entry")
    (tmp_path / "explain_entry.py").write_text("def go():\n    return 42\n")
    assert cli.main(["explain", "explain_entry:go"]) == 0
    assert "report for go: 42" in capsys.readouterr().out


def test_no_command_is_a_usage_error(cache_dir):
    result = run_cli(cache_dir=cache_dir)
    assert result.returncode == 2 and "usage: framejit" in result.stderr
