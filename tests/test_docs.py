"""docs/graph_breaks.md: the committed file is what tools/gen_graph_break_docs.py generates, it covers
every BreakKind, and every example in it raises framejit.Unsupported of its kind under fullgraph=True."""
from __future__ import annotations

import importlib.util
import linecache
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import framejit
from framejit.capture.breaks import KIND_DOCS, BreakKind

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "tools" / "gen_graph_break_docs.py"

# Kinds that have no example, and why. Each must be documented as such by the generator (NO_EXAMPLE).
NOT_TRIGGERABLE = {
    BreakKind.DYNAMIC_CONTROL_FLOW: "raised only in resume functions (a loop whose body broke at several "
                                    "steps), and fullgraph=True allows no break: shown by explain() below",
    BreakKind.INTERNAL_ERROR: "raised only when framejit itself is broken; no correct user program can "
                              "trigger it on purpose",
}


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_graph_break_docs", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_committed_doc_is_what_the_generator_writes():
    committed = (ROOT / "docs" / "graph_breaks.md").read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/graph_breaks.md is stale: run python tools/gen_graph_break_docs.py"


def test_check_flag_reports_stale_and_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "DOC_PATH", tmp_path / "graph_breaks.md")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1  # missing
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    (tmp_path / "graph_breaks.md").write_text(gen.render() + "edited by hand\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1


def test_check_runs_as_a_script():
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_kind_is_documented_with_cause_hint_and_example_or_reason():
    text = gen.render()
    for kind in BreakKind:
        cause, hint = KIND_DOCS[kind]
        section = text.split(f"\n## {kind.value}\n", 1)[1].split("\n## ", 1)[0]
        assert f"`BreakKind.{kind.name}`" in section
        assert gen._markdown(cause) in section and gen._markdown(hint) in section
        if kind in gen.EXAMPLES:
            assert gen.EXAMPLES[kind].rstrip("\n") in section
        else:
            assert gen.NO_EXAMPLE[kind] in section


def test_kinds_without_an_example_are_exactly_the_allow_list():
    assert set(gen.EXAMPLES) | set(gen.NO_EXAMPLE) == set(BreakKind)
    assert not set(gen.EXAMPLES) & set(gen.NO_EXAMPLE)
    assert set(gen.NO_EXAMPLE) == set(NOT_TRIGGERABLE)


def test_dynamic_control_flow_is_reported_for_a_loop_breaking_at_every_step(capsys):
    """The kind without an example is real: explain() names it for a loop whose body breaks at each step."""
    def rows_with_print(x, rows):
        for r in rows:
            x = x * 2 + r
            print("step", r.shape[0])
        return x.sum()

    framejit.reset()
    compiled = framejit.compile(rows_with_print, backend="eager")
    for seed in range(2):
        x, rows = torch.randn(4), torch.randn(12, 4)
        assert torch.equal(compiled(x, rows), rows_with_print(x, rows))
    out = framejit.explain(rows_with_print)(torch.randn(4), torch.randn(12, 4))
    assert BreakKind.DYNAMIC_CONTROL_FLOW in [b.kind for b in out.break_reasons]
    framejit.reset()


def test_markdown_puts_code_like_words_in_backticks():
    assert gen._markdown("a value (.item(), bool(t), if t.sum() > 0)") == \
        "a value (`.item()`, `bool(t)`, if `t.sum()` > 0)"
    assert gen._markdown("raise config.inline_depth_limit.") == "raise `config.inline_depth_limit`."
    assert gen._markdown("plain words, nothing else") == "plain words, nothing else"


@pytest.mark.parametrize("kind", list(gen.EXAMPLES), ids=lambda k: k.value)
def test_example_raises_unsupported_of_its_kind(kind):
    source = gen.EXAMPLES[kind]
    filename = f"<graph_breaks.md example {kind.value}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        with pytest.raises(framejit.Unsupported) as info:
            exec(compile(source, filename, "exec"), {"__name__": "example"})
    finally:
        linecache.cache.pop(filename, None)
    assert info.value.kind is kind, str(info.value)
    stack = info.value.graph_break.user_stack
    assert stack and stack[-1].filename == filename  # the break points into the example's own code
    last_line = source.rstrip("\n").splitlines()[-1]
    assert stack[-1].line.strip() and stack[-1].line.strip() != last_line  # inside fn, not at the call
