"""Gaps found measuring framejit against PyTorch's Dynamo test files (test_functions.py, test_ctx_manager.py):
programs written here in our own words, compared with eager."""
from __future__ import annotations

import torch

import framejit
from framejit import config


def _scaled_by(factor: str):
    """A factory: every call makes a new function object of one code, closing over another constant."""
    def scaled(x):
        if factor == "twice":
            return x * 2
        if factor == "shifted":
            return x + 3
        if factor == "negated":
            return -x
        return x.abs()
    return scaled


def test_entries_of_other_closures_loaded_from_the_cache_do_not_fill_the_recompile_limit(tmp_path, monkeypatch):
    # NOTE [Loaded entries and the limit]: each closure is traced for three dtypes (three entries each),
    # and every entry is persisted; the fourth closure's first miss loads the nine entries of the other
    # three (their guards fail on the closure constant). Counted against the limit of 8, the fourth ran
    # eagerly from its first call.
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "recompile_limit", 8)
    eager_before, traced_before = framejit.stats()["eager_frames"], framejit.stats()["frames_traced"]
    for factor in ("twice", "shifted", "negated", "absolute"):
        fn = _scaled_by(factor)
        compiled = framejit.compile(fn, backend="eager")  # a named backend: its entries are persisted
        for call in range(2):
            for dtype in (torch.float32, torch.float64, torch.int64):
                x = (torch.arange(6) - 2 * call).to(dtype).reshape(2, 3)
                got, want = compiled(x), fn(x)
                assert got.dtype == want.dtype and torch.equal(got, want), (factor, dtype)
    assert framejit.stats()["eager_frames"] == eager_before
    # one trace per closure and dtype, none for the second round of calls
    assert framejit.stats()["frames_traced"] - traced_before == 12


def test_a_closure_past_the_limit_of_its_own_traces_still_runs_eagerly(tmp_path, monkeypatch):
    # the twin: entries this hook traced itself still count, with or without the cache
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "recompile_limit", 2)
    eager_before = framejit.stats()["eager_frames"]
    fn = _scaled_by("twice")
    compiled = framejit.compile(fn, backend="eager")
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        x = torch.arange(4).to(dtype)
        assert torch.equal(compiled(x), fn(x))
    assert framejit.stats()["eager_frames"] == eager_before + 1
