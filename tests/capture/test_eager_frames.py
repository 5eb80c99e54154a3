"""Frames framejit runs wholly eagerly are counted, listed with their reason, logged and explained
(NOTE [Eager frames]): stats()["eager_frames"], stats()["eager_frame_reasons"], explain(), graph_breaks."""
from __future__ import annotations

import logging

import pytest
import torch

import framejit
from framejit import config, logs
from tests.helpers import CountingBackend, run_differential


def _eager_delta(call):
    before = framejit.stats()["eager_frames"]
    result = call()
    stats = framejit.stats()
    return result, stats["eager_frames"] - before, stats["eager_frame_reasons"][before:]


def _late_variable():
    def reads_late(x):
        # a root read of a free variable that is empty at the call has no break form (a closure made before
        # a break over a variable set later has one since NOTE [Closures over cells not set yet])
        y = x * 2
        return y * k
    return reads_late
    k = 1  # noqa: F841 - never runs: `k` is a cell that stays empty


_reads_late = _late_variable()


def unresumable(x):
    try:
        return _reads_late(x)  # a break: reads_late runs through its hook, as an eager frame
    except NameError as e:
        return str(e)


def test_unresumable_break_is_an_eager_frame_with_its_reason(caplog):
    backend = CountingBackend()
    compiled = framejit.compile(unresumable, backend=backend)
    x = torch.randn(3)
    logs.set_logs("graph_breaks")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            out, delta, reasons = _eager_delta(lambda: compiled(x))
    finally:
        logs.set_logs(config.logs)
    assert any("runs wholly eagerly" in r.getMessage() and "reads_late" in r.getMessage()
               for r in caplog.records)
    assert out == unresumable(x)
    assert delta == 1 and backend.graph_count == 0
    assert reasons[0]["function"].endswith("reads_late")
    assert reasons[0]["location"].endswith(f"test_eager_frames.py:{_reads_late.__code__.co_firstlineno + 4}")
    assert "not bound yet" in reasons[0]["reason"] and "no graph break could be taken" in reasons[0]["reason"]
    _, delta, _ = _eager_delta(lambda: compiled(x))  # the same entry again: no new decision
    assert delta == 0


def test_frame_that_raises_breaks_before_the_raising_instruction():
    # NOTE [Exceptions raised by the traced code] in convert.py: not an eager frame any more; the code before
    # the instruction that raises is a graph, the instruction raises in plain Python
    def fn(x):
        y = x.sin()
        return {}["missing"] + y

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = framejit.stats()["eager_frames"]
    for _ in range(2):
        with pytest.raises(KeyError):
            compiled(torch.randn(2))
    assert framejit.stats()["eager_frames"] == before
    assert backend.graph_count == 1


def test_recompile_limit_is_an_eager_frame(monkeypatch):
    monkeypatch.setattr(config, "recompile_limit", 1)

    def fn(x):
        return x + 1

    compiled = framejit.compile(fn, backend=CountingBackend())
    compiled(torch.randn(2))
    _, delta, reasons = _eager_delta(lambda: compiled(torch.randn(3)))
    assert delta == 1 and "recompile limit" in reasons[0]["reason"]


def test_explain_lists_eager_frames_and_captured_frames_have_none():
    report = framejit.explain(unresumable)(torch.randn(2))
    assert report.graph_count == 0 and len(report.eager_frames) == 1
    assert "Eager frames: 1" in str(report)
    _, delta, _ = _eager_delta(lambda: run_differential(lambda x: x * 2, lambda s: (torch.randn(2),)))
    assert delta == 0
