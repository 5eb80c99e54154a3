"""Dynamic shapes, issue 13 (second round of gaps): differential tests, eager vs compiled over several sizes,
with the number of compilations asserted.

- Frames that run a loop over a symbolic range as Python (NOTE [Loops over symbolic ranges]) persist their
  transformed code and tail function (NOTE [Persisted loops run as Python] in persisted_code.py): a warm
  process traces nothing. Before, such an entry was "kept in memory only" and every warm process traced it.
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
