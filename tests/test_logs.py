"""framejit.logs: FRAMEJIT_LOGS / set_logs parsing (TORCH_LOGS syntax), records through the standard
`logging` module under `framejit.<artifact>` loggers, and an end-to-end run of a user script with
FRAMEJIT_LOGS set, checking that each artifact names the user's file and line."""
from __future__ import annotations

import inspect
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import framejit
from framejit import config, logs
from tests.helpers import run_program

ROOT = Path(__file__).resolve().parents[1]


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, artifact: str | None = None) -> list[str]:
        return [r.getMessage() for r in self.records if artifact is None or r.name == f"framejit.{artifact}"]


@pytest.fixture(autouse=True)
def _restore_logs():
    yield
    logs.set_logs(config.logs)


@pytest.fixture
def handler():
    h = ListHandler()
    logging.getLogger("framejit").addHandler(h)
    yield h
    logging.getLogger("framejit").removeHandler(h)


def _selected() -> set[str]:
    return {name for name in logs.ARTIFACTS if logs.enabled(name)}


# ---- parsing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,expected", [
    ("", set()),
    ("graph_breaks", {"graph_breaks"}),
    ("graph_breaks,recompiles", {"graph_breaks", "recompiles"}),
    (" graph_breaks , ,recompiles ", {"graph_breaks", "recompiles"}),
    ("+guards", {"guards"}),
    ("all", set(logs.ARTIFACTS)),
    ("+all", set(logs.ARTIFACTS)),
    ("all,-cache,-fusion", set(logs.ARTIFACTS) - {"cache", "fusion"}),
    ("-graph_breaks", set()),
    ("graph_breaks,-graph_breaks", set()),
    ("-graph_breaks,graph_breaks", {"graph_breaks"}),
])
def test_spec_selects_artifacts(spec, expected):
    logs.set_logs(spec)
    assert _selected() == expected


def test_plus_name_enables_debug_records(handler):
    logs.set_logs("+graph_breaks,recompiles")
    assert logging.getLogger("framejit.graph_breaks").getEffectiveLevel() == logging.DEBUG
    logs.log("graph_breaks", "detail %d", 1, debug=True)
    logs.log("recompiles", "detail %d", 2, debug=True)  # enabled at INFO only: no debug records
    logs.log("recompiles", "summary %d", 3)
    assert handler.messages("graph_breaks") == ["detail 1"]
    assert handler.messages("recompiles") == ["summary 3"]
    assert [r.levelno for r in handler.records] == [logging.DEBUG, logging.INFO]


def test_help_lists_every_name_on_stderr(capsys):
    logs.set_logs("help,guards")
    err = capsys.readouterr().err
    for name in logs.ARTIFACTS:
        assert re.search(rf"^\s+{name}\s", err, re.MULTILINE), name
    assert "+" in err and "all" in err
    assert _selected() == {"guards"}  # help selects nothing itself


def test_unknown_name_raises_naming_accepted_values_and_keeps_selection():
    logs.set_logs("graph_breaks")
    with pytest.raises(ValueError) as info:
        logs.set_logs("graph_breaks,graph_brakes")
    message = str(info.value)
    assert "'graph_brakes'" in message and "accepted" in message
    for name in ("all", "help", *logs.ARTIFACTS):
        assert name in message
    assert _selected() == {"graph_breaks"}  # a bad spec changes nothing


def test_set_logs_keyword_flags_and_errors():
    assert framejit.set_logs is logs.set_logs
    framejit.set_logs(graph_breaks=True, recompiles=False)
    assert _selected() == {"graph_breaks"}
    framejit.set_logs("guards", bytecode=True)
    assert _selected() == {"guards", "bytecode"}
    with pytest.raises(ValueError, match="accepted: graph_breaks"):
        framejit.set_logs(graph_brakes=True)
    with pytest.raises(TypeError, match="spec"):
        framejit.set_logs(42)
    framejit.set_logs()
    assert _selected() == set()


def test_every_artifact_framejit_uses_is_declared():
    pattern = re.compile(r"logs\.(?:log|enabled|getLogger)\(\s*[\"'](\w+)[\"']")
    used = {}
    for path in (ROOT / "framejit").rglob("*.py"):
        for name in pattern.findall(path.read_text(encoding="utf-8")):
            used.setdefault(name, path.relative_to(ROOT).as_posix())
    assert {"graph_breaks", "recompiles", "guards"} <= set(used)  # the scan finds the real call sites
    assert {n: p for n, p in used.items() if n not in logs.ARTIFACTS} == {}


# ---- routing through `logging` -----------------------------------------------------------------------
def test_records_go_through_framejit_artifact_loggers():
    own = ListHandler()
    artifact_logger = logging.getLogger("framejit.recompiles")
    artifact_logger.addHandler(own)
    try:
        logs.log("recompiles", "not enabled yet")
        logs.set_logs("recompiles")
        logs.log("recompiles", "recompiling %s: %s", "f", "TENSOR_DTYPE")
        logs.log("guards", "not selected")
    finally:
        artifact_logger.removeHandler(own)
    assert [(r.name, r.levelno, r.getMessage()) for r in own.records] == [
        ("framejit.recompiles", logging.INFO, "recompiling f: TENSOR_DTYPE")]


def test_user_logger_level_cannot_enable_an_unselected_artifact(handler):
    logs.set_logs("")
    logging.getLogger("framejit.graph_breaks").setLevel(logging.DEBUG)
    logs.log("graph_breaks", "hidden")
    assert handler.records == []


def _breaks_at_print(x):
    y = x * 2
    print("scaling")
    return y + 1


def _plain(x):
    return x.sin() + 1


def _line_of(fn, needle: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if needle in line)


def test_graph_break_and_recompile_records_name_the_user_code(handler, capsys):
    logs.set_logs("graph_breaks,recompiles")
    framejit.compile(_breaks_at_print)(torch.randn(3))
    assert capsys.readouterr().out == "scaling\n"
    plain = framejit.compile(_plain)
    plain(torch.randn(3))
    plain(torch.randn(3, dtype=torch.float64))
    [brk] = handler.messages("graph_breaks")
    print_line = _line_of(_breaks_at_print, 'print("scaling")')
    assert f"{__file__}:{print_line}" in brk and 'print("scaling")' in brk
    assert "hint:" in brk
    [recompile] = handler.messages("recompiles")
    assert f"_plain ({__file__}:{_plain.__code__.co_firstlineno})" in recompile
    assert "TENSOR_DTYPE" in recompile and "torch.float32" in recompile and "torch.float64" in recompile
    assert f"{__file__}:{_line_of(_plain, 'return')}" in recompile


# ---- environment variable, in fresh processes ------------------------------------------------------
def _run(code: str, logs_spec: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`python user_script.py` with FRAMEJIT_LOGS=`logs_spec`: a forked child of the program server, which
    imports framejit (and reads FRAMEJIT_LOGS) as a new interpreter would (NOTE [Programs in forked children]
    in tests/helpers.py)."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    # a cold cache of its own: a frame loaded from another test's warm cache is not traced, so it logs nothing
    env = dict(os.environ, FRAMEJIT_LOGS=logs_spec, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"))
    rc, out, err = run_program(tmp_path, script, env=env)
    return subprocess.CompletedProcess([sys.executable, str(script)], rc, out, err)


def test_env_help_and_unknown_name(tmp_path):
    shown = _run("import framejit\nprint('imported')\n", "help", tmp_path)
    assert shown.returncode == 0 and shown.stdout == "imported\n"
    assert all(name in shown.stderr for name in logs.ARTIFACTS)
    bad = _run("import framejit\n", "graph_breaks,nope", tmp_path)
    assert bad.returncode == 1
    assert issubclass(logs.UnknownLogName, ValueError)
    assert "UnknownLogName: unknown log name 'nope'" in bad.stderr and "accepted: all, help, graph_breaks" in bad.stderr


USER_SCRIPT = """\
import torch
import framejit

def scaled(x):
    y = x * 2
    print("scaling")
    return y + 1

def plain(x):
    return x.sin() + 1

x = torch.randn(3)
assert torch.equal(framejit.compile(scaled)(x), scaled(x))
fast = framejit.compile(plain)
assert torch.equal(fast(x), plain(x))
x64 = x.double()
assert torch.equal(fast(x64), plain(x64))
print("done")
"""
# line numbers in USER_SCRIPT
DEF_SCALED, LINE_MUL, LINE_PRINT, DEF_PLAIN, LINE_SIN = 4, 5, 6, 9, 10


def _records(stderr: str) -> dict[str, list[str]]:
    """Split stderr into records by their `[framejit.<artifact>]` prefix."""
    records: dict[str, list[str]] = {}
    for chunk in re.split(r"^\[framejit\.", stderr, flags=re.MULTILINE)[1:]:
        artifact, _, text = chunk.partition("] ")
        records.setdefault(artifact, []).append(text)
    return records


def test_env_logs_end_to_end_name_the_user_file_and_line(tmp_path):
    result = _run(USER_SCRIPT, "graph_breaks,recompiles,guards,graph_code,bytecode", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "scaling\nscaling\ndone\n"  # eager once, compiled once; logs never on stdout
    script = str(tmp_path / "user_script.py")
    records = _records(result.stderr)
    assert set(records) == {"graph_breaks", "recompiles", "guards", "graph_code", "bytecode"}

    [brk] = records["graph_breaks"]
    assert f"{script}:{LINE_PRINT}" in brk and 'print("scaling")' in brk and "print" in brk and "hint:" in brk

    [recompile] = records["recompiles"]
    assert f"plain ({script}:{DEF_PLAIN})" in recompile
    assert "TENSOR_DTYPE" in recompile and "expected torch.float32, got torch.float64" in recompile
    assert f"{script}:{LINE_SIN}: return x.sin() + 1" in recompile

    guards = records["guards"]
    assert any(f"scaled ({script}:{DEF_SCALED})" in g and f"{script}:{LINE_MUL}: y = x * 2" in g for g in guards)
    assert sum(f"plain ({script}:{DEF_PLAIN})" in g for g in guards) == 2  # compiled, then recompiled

    assert any("def forward" in g and ".sin()" in g for g in records["graph_code"])
    plain_bytecode = [b for b in records["bytecode"] if b.startswith("original bytecode of plain:")]
    assert len(plain_bytecode) == 2
    original, transformed = plain_bytecode[0].split("\ntransformed:\n")
    assert re.search(rf"^\s*{LINE_SIN}\s+\d+\s+LOAD_FAST\s+\d+ \(x\)", original, re.MULTILINE)  # line, offset
    assert "LOAD_CONST" in transformed and "CALL" in transformed


def test_records_print_once_when_the_user_configured_logging(tmp_path):
    code = "import logging\nlogging.basicConfig(format='ROOT %(name)s: %(message)s')\n" + USER_SCRIPT
    result = _run(code, "graph_breaks", tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "graph break in scaled" in line]
    assert lines == ["ROOT framejit.graph_breaks: graph break in scaled at "
                     f"{tmp_path / 'user_script.py'}:{LINE_PRINT + 2}"]


def test_a_guard_check_that_raises_says_so_in_the_recompile_log(handler):
    # a raising check counts as a miss; the log line must say it raised (a guard that can never pass,
    # like 3dddcb2's unbound `torch`, otherwise reads like a value that changed)
    def f(x, d):
        return x * d["s"]

    logs.set_logs("recompiles")
    cf = framejit.compile(f, backend="eager")
    cf(torch.ones(2), {"s": 2.0})
    with pytest.raises(KeyError):
        cf(torch.ones(2), {"t": 2.0})  # the guard reading d['s'] raises KeyError
    lines = [r.getMessage() for r in handler.records if r.name.endswith("recompiles")]
    assert any("the check raised KeyError" in line for line in lines), lines


def test_a_traced_raise_that_becomes_a_break_is_logged_as_a_break_not_an_eager_frame(handler):
    # the traced code raises at `d[k]` (KeyError): framejit breaks before that instruction, the code before it
    # stays captured, and the log says so under graph_breaks; "runs eagerly" under eager_fallback is only for a
    # frame that really runs wholly eagerly (hhuntHF4: the old line claimed it for a break entry)
    def f(x, d, k):
        y = torch.sin(x) * 2
        return y + d[k]

    logs.set_logs("graph_breaks,eager_fallback")
    cf = framejit.compile(f, backend="eager")
    before = framejit.stats()["eager_frames"]
    for _ in range(2):
        with pytest.raises(KeyError) as raised:
            cf(torch.ones(2), {"a": 1.0}, "b")
        assert raised.value.args == ("b",)
    assert cf(torch.ones(3), {"b": 1.0}, "b").tolist() == (torch.sin(torch.ones(3)) * 2 + 1.0).tolist()
    assert framejit.stats()["eager_frames"] == before
    assert not [m for m in handler.messages("eager_fallback") if "runs eagerly" in m], handler.messages()
    assert any("raised KeyError" in m and "break before the raising instruction" in m
               for m in handler.messages("graph_breaks")), handler.messages()
