"""Smoke test of benchmarks/recompiles.py at its tiniest setting: the zoo MLP over 2 batch sizes with a
changing float and int, then batch 1. Every result is checked against eager inside the benchmark; here its
table rows are checked: framejit compiled no more graphs than torch.compile, and exactly as many as the
workload needs (the first call, one recompile when batch, float and int change together, one for batch 1)."""
from benchmarks import recompiles


def test_recompiles_benchmark_tiny(capsys):
    (row,) = recompiles.main(["--models", "mlp", "--calls", "2", "--no-latency"])
    assert row["errors"] == []
    assert row["fj"]["graphs"] <= row["tc"]["graphs"]
    assert row["fj"]["graphs"] == row["fj"]["frames"] == 3
    printed = capsys.readouterr().out
    assert "framejit compiled no more graphs than torch.compile on 1 of 1 models" in printed
