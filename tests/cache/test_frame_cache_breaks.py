"""Warm starts for real code (NOTE [Persisted break code]): frames that graph-break (a data-dependent branch,
a print between tensor ops, nn.MultiheadAttention's module call) and frames that replay side effects are
persisted with their transformed code, so a second process traces nothing and returns what eager returns.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit
    from torch import nn

    LOG = []

    class Block(nn.Module):
        def __init__(self, d=16):
            super().__init__()
            self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
            self.norm = nn.LayerNorm(d)
            self.ff = nn.Linear(d, d)

        def forward(self, x):
            y, _ = self.attn(x, x, x, need_weights=False)
            x = self.norm(x + y)
            if x.mean() > 0:          # data-dependent branch: a graph break
                x = x * 2
            else:
                x = x - 1
            return x + self.ff(x)

    def noisy(x):
        y = x.sin()
        print("between", y.shape[0])  # a break at a call framejit does not trace
        LOG.append(y.shape[0])        # a side effect after the break
        return y.cos() + 1

    def branchy(x, t):
        h = x * t
        if h.sum() > 0:
            return h.relu()
        return -h

    torch.manual_seed(0)
    block = Block().eval()
    cb = framejit.compile(block, backend="eager")
    cn = framejit.compile(noisy, backend="eager")
    cbr = framejit.compile(branchy, backend="eager")
    results = []
    with torch.no_grad():
        for seed, shift in ((1, 3.0), (2, -3.0), (3, 3.0)):   # both directions of every branch
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(2, 5, 16, generator=g) + shift
            v = torch.randn(4, generator=g) + shift
            got = [cb(x), cn(v), cbr(v, 2.0), cbr(v, -2.0)]
            want = [block(x), noisy(v), branchy(v, 2.0), branchy(v, -2.0)]
            results.append(all(torch.equal(a, b) for a, b in zip(got, want)))
    stats = framejit.stats()
    print(json.dumps({"equal": results, "log": LOG, "traced": stats["frames_traced"],
                      "loaded": stats["frames_loaded"], "compiles": stats["backend_compiles"]}))
''')


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> str:
    """A copy of framejit for the child processes (a shared checkout may change between two processes,
    and framejit's source digest is part of every key)."""
    root = tmp_path_factory.mktemp("framejit_install")
    shutil.copytree(os.path.join(REPO, "framejit"), root / "framejit", ignore=shutil.ignore_patterns("__pycache__"))
    return str(root)


def run(tmp_path, snapshot) -> dict:
    script = tmp_path / "real_code.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=snapshot, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1",
               FRAMEJIT_LOGS="cache")
    env.pop("FRAMEJIT_REMOTE_CACHE", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    data = json.loads(lines[-1])
    data["printed"] = lines[:-1]
    data["stderr"] = result.stderr
    assert all(data["equal"]), data  # every compiled result equals eager's, cold or warm
    return data


def test_real_code_with_breaks_starts_warm_with_zero_traces(tmp_path, snapshot):
    cold = run(tmp_path, snapshot)
    assert cold["traced"] > 0 and cold["loaded"] == 0
    assert "kept in memory only" not in cold["stderr"], cold["stderr"]
    warm = run(tmp_path, snapshot)
    assert warm["traced"] == 0 and warm["compiles"] == 0, warm["stderr"]
    assert warm["loaded"] == cold["traced"]
    # side effects and prints happen in eager's order and number, compiled and eager calls alike
    assert warm["printed"] == cold["printed"] and warm["log"] == cold["log"]
    assert warm["printed"] == ["between 4"] * 6 and warm["log"] == [4] * 6


# ---- one process: persist, forget everything compiled (framejit.reset), load ------------------------------
CALLS = []


def helper_called_at_break(y):
    CALLS.append(int(y.shape[0]))
    return y * 3


def break_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
    return y.cos()


def break_in_loop(x):
    for i in range(3):
        x = x + i
        if x.mean() > 1:
            x = x / 2
    return x


def break_at_user_call(x):
    y = x.sin()
    print("at the call")
    return helper_called_at_break(y) + 1


def break_with_closure(x):
    scale = x.shape[0]

    def inner(t):
        return t * scale

    if x.max() > 0:
        x = inner(x)
    return inner(x) - 1


# warm_traced: frames traced on a warm cache. Not yet persisted (kept in memory, traced again, still correct): a
# resume function whose loop iterator is a constant (break_in_loop's resume functions), a function made while
# tracing (break_with_closure's `inner`).
@pytest.mark.parametrize("fn, warm_traced", [(break_in_no_grad, 0), (break_at_user_call, 0), (break_in_loop, None),
                                             (break_with_closure, None)])
def test_break_entries_restored_in_process_match_eager(fn, warm_traced, tmp_path, monkeypatch, capsys):
    import framejit
    from framejit import config
    from framejit.capture.requests import STATS

    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    inputs = [torch.randn(4, 3) + 2, torch.randn(4, 3) - 2, torch.randn(6, 3) + 2]
    CALLS.clear()
    expected = [fn(x.clone()) for x in inputs]
    eager_calls = list(CALLS)
    for round_ in ("cold", "warm"):
        framejit.reset()  # forget every compiled entry: the warm round can only load from the cache
        traced_before = STATS["frames_traced"]
        CALLS.clear()
        compiled = framejit.compile(fn, backend="eager")
        got = [compiled(x.clone()) for x in inputs]
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert CALLS == eager_calls
        traced = STATS["frames_traced"] - traced_before
        if round_ == "cold":
            assert traced > 0
        elif warm_traced is not None:
            assert traced == warm_traced, f"{fn.__name__}: {traced} frames traced on a warm cache"
    out = capsys.readouterr().out
    assert out.count("at the call") == (9 if fn is break_at_user_call else 0)


def test_entries_persist_while_unrelated_functions_are_marked_allow_in_graph(tmp_path, monkeypatch):
    """Importing transformers marks functions allow_in_graph; frames that call user functions must still be
    persisted (NOTE [Guarding the marks]): measured, every such frame was "kept in memory only"."""
    import torch._dynamo.trace_rules as rules

    import framejit
    from framejit import config
    from framejit.capture.requests import STATS

    def unrelated(t):
        return t

    torch.compiler.allow_in_graph(unrelated)
    try:
        monkeypatch.setattr(config, "cache_enabled", True)
        monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
        inputs = [torch.randn(4, 3) + 2, torch.randn(5, 3) - 2]
        CALLS.clear()
        expected = [break_at_user_call(x.clone()) for x in inputs]
        for round_ in ("cold", "warm"):
            framejit.reset()
            before = STATS["frames_traced"]
            compiled = framejit.compile(break_at_user_call, backend="eager")
            for x, want in zip(inputs, expected):
                torch.testing.assert_close(compiled(x.clone()), want, rtol=0, atol=0)
            traced = STATS["frames_traced"] - before
            assert traced > 0 if round_ == "cold" else traced == 0, (round_, traced)
    finally:
        rules._allowed_callable_ids.remove(id(unrelated))


class MarkBlock(torch.nn.Module):
    """Defined at module level: its forward is importable by name."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


def test_module_entries_persist_while_marks_exist_and_a_later_mark_recompiles(tmp_path, monkeypatch):
    """A module's forward reached through the module call has no source; it is guarded on its own mark by
    name (NOTE [Guarding the marks]), so the entry is persisted while other functions are marked (CI: the DDP
    split entries were kept in memory only once transformers was imported), and marking that forward later
    still recompiles: the forward then runs as one graph node."""
    import torch._dynamo.trace_rules as rules

    import framejit
    from framejit import config
    from framejit.capture.requests import STATS

    def unrelated(t):
        return t

    torch.manual_seed(0)
    model = MarkBlock()
    inputs = [torch.randn(4, 3), torch.randn(4, 3) - 1]
    expected = [model(x) for x in inputs]
    torch.compiler.allow_in_graph(unrelated)
    try:
        monkeypatch.setattr(config, "cache_enabled", True)
        monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
        for round_ in ("cold", "warm"):
            framejit.reset()
            before = dict(STATS)
            compiled = framejit.compile(model, backend="eager")
            for x, want in zip(inputs, expected):
                torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)
            traced = STATS["frames_traced"] - before["frames_traced"]
            loaded = STATS["frames_loaded"] - before["frames_loaded"]
            assert (traced, loaded) == ((1, 0) if round_ == "cold" else (0, 1)), round_
        torch.compiler.allow_in_graph(MarkBlock.forward)  # the loaded entry inlined it: must not be served
        try:
            before = STATS["frames_traced"]
            torch.testing.assert_close(compiled(inputs[0]), expected[0], rtol=0, atol=0)
            assert STATS["frames_traced"] - before > 0  # the guard on its mark failed
        finally:
            rules._allowed_callable_ids.remove(id(MarkBlock.forward))
    finally:
        rules._allowed_callable_ids.remove(id(unrelated))
