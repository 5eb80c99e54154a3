"""Dynamic shapes, issue 13 (second round of gaps): differential tests, eager vs compiled over several sizes,
with the number of compilations asserted.

- Frames that run a loop over a symbolic range as Python (NOTE [Loops over symbolic ranges]) persist their
  transformed code and tail function (NOTE [Persisted loops run as Python] in persisted_code.py): a warm
  process traces nothing. Before, such an entry was "kept in memory only" and every warm process traced it.
- The `recompiles` log names the dimension and the value that broke a relation, and every entry's failure.
- A list or tuple built by a loop over a symbolic size reaches the resume function after the loop with a
  changing length: it becomes opaque after one recompile (NOTE [Sequences of changing length carried across
  breaks] in carried_loops.py), so that resume function compiles twice, not once per length (stock
  torch.compile: once per length until its recompile limit, then eager).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same


# ---- loops run as Python persist (NOTE [Persisted loops run as Python]) ------------------------------------
def sum_rows(x):
    acc = x.sum(0) * 0
    for i in range(x.size(0)):
        acc = acc + x[i] * i
    return acc.relu()


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Layers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = Layer()

    def forward(self, x, n):
        for i in range(n):
            x = self.layer(x) + i
        return x.sum(-1), n


torch.manual_seed(0)
LAYERS = Layers()


def layers_n(x, n):
    return LAYERS(x, n)


@pytest.mark.parametrize("fn, make", [(sum_rows, lambda n: (torch.randn(n, 3),)),
                                      (layers_n, lambda n: (torch.randn(2, 4), n))],
                         ids=["size", "int"])
def test_frames_running_a_loop_as_python_start_warm_with_zero_traces(fn, make, tmp_path, monkeypatch):
    from framejit import config
    from framejit.capture.requests import STATS

    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torch.manual_seed(1)
    inputs = [make(n) for n in (3, 5, 0, 1, 7, 4)]
    expected = [fn(*args) for args in inputs]
    traced = {}
    for round_ in ("cold", "warm"):
        framejit.reset()  # forget every compiled entry: the warm round can only load from the cache
        before, eager = STATS["frames_traced"], framejit.stats()["eager_frames"]
        compiled = framejit.compile(fn, backend="eager")
        for args, want in zip(inputs, expected):
            assert_same(compiled(*args), want)
        traced[round_] = STATS["frames_traced"] - before
        assert framejit.stats()["eager_frames"] == eager
    # before: the frame that owns the loop was kept in memory only, traced again by the warm round
    assert traced["cold"] > 0 and traced["warm"] == 0, traced


# ---- the recompile log names the dimension and the relation that failed -----------------------------------
def _branch_on_size(x):
    if x.size(0) > 4:
        return x * 2
    return x + 1


def _add(x, y):
    return x + y


def _recompile_lines(caplog, fn, calls, dynamic=None) -> list[str]:
    import logging
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            for args in calls:
                assert_same(compiled(*args), fn(*args))
    finally:
        framejit.set_logs("")
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("recompiling")]


def test_the_recompile_log_names_the_value_that_broke_a_relation(caplog):
    lines = _recompile_lines(caplog, _branch_on_size, [(torch.randn(n),) for n in (2, 3, 6, 7, 3)])
    # static (2), symbolic with x.size(0) <= 4 (3), then 6 breaks the relation: before, "got a different value"
    assert len(lines) == 2, lines
    assert "size of dim 0: 2 -> 3" in lines[0], lines[0]
    assert "expected x.size(0) <= 4, got {'x.size(0)': 6}" in lines[1], lines[1]


def test_the_recompile_log_names_every_entry_that_failed(caplog):
    calls = [(torch.randn(n), torch.randn(m)) for n, m in ((2, 2), (3, 3), (1, 1), (3, 1))]
    lines = _recompile_lines(caplog, _add, calls, dynamic=True)
    assert len(lines) == 2, lines
    assert "expected x.size(0) >= 2, got 1" in lines[0], lines[0]
    # (3, 1): the newest entry (sizes 1) fails on x's dim 0; the symbolic one on its relation between x and y
    # (before, only the newest entry's shape was named)
    assert "size of dim 0: 1 -> 3" in lines[1], lines[1]
    assert "expected size of dim 0 of L['y'] == x.size(0), got 1" in lines[1], lines[1]


# ---- lists built by a loop over a symbolic size (NOTE [Sequences of changing length carried across breaks])
def _stack_appended(x):
    outs = []
    for i in range(x.size(0)):
        outs.append(x[i] * 2)
    return torch.stack(outs) + 1


def _tuple_built(x):
    t = ()
    for i in range(x.size(0)):
        t = t + (x[i].sum(),)
    return torch.stack(t).relu() if t else x.sum(), len(t)


def _list_used_many_ways(x):
    outs = []
    for i in range(x.size(0)):
        outs.append(x[i] - i)
    n = len(outs)
    total = sum(outs, x.sum(0) * 0)
    return total * n, outs[-1] if outs else None, outs


LENGTHS = [3, 5, 7, 4, 9, 6, 11, 8, 10, 12]


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn, lengths", [(_stack_appended, LENGTHS + [1, 2]),
                                         (_tuple_built, LENGTHS + [1, 0, 2]),
                                         (_list_used_many_ways, LENGTHS + [1, 0, 2])],
                         ids=lambda v: getattr(v, "__name__", "sizes"))
def test_a_list_built_over_a_symbolic_size_does_not_recompile_per_length(fn, lengths, dynamic):
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for n in lengths:
        torch.manual_seed(n)
        x = torch.randn(n, 3)
        assert_same(compiled(x), fn(x))
    frames = [r["function"] for r in framejit.stats()["frames"][before:]]
    # before: the resume function after the loop (its list guarded by length) compiled once per length until
    # the recompile limit ran it eagerly: 10 frames + an eager frame over the first 10 lengths (stock
    # torch.compile: 8 graphs, then eager). Now the owner, the resume function (static length, then opaque)
    # and the one after the list's first use, each at most twice, plus 0/1 where they specialise
    assert framejit.stats()["eager_frames"] == eager, framejit.stats()["eager_frame_reasons"][-1:]
    assert max(frames.count(name) for name in set(frames)) <= 4, frames


# ---- opaque values are never read by the trace (NOTE [Strings carried across breaks]) ----------------------
def _branch_on_a_name(x, name):
    print("at the break", end="")
    y = x * 2
    if name:
        return y + 1
    return y - 1


def test_the_truth_of_a_string_that_changes_across_a_break_is_read_in_python(capsys):
    compiled = framejit.compile(_branch_on_a_name, backend="eager")
    for name in ["a", "b", "c", "", "d", ""]:
        x = torch.ones(2)
        # before: the opaque string (after 'a' -> 'b') was truthy for the trace, so '' returned y + 1
        assert_same(compiled(x, name), _branch_on_a_name(x, name))
    assert capsys.readouterr().out == "at the break" * 12
