"""Smoke test of benchmarks/recompiles.py at its tiniest setting: the zoo MLP over 2 batch sizes with a
changing float and int, then batch 1. Every result is checked against eager inside the benchmark; here its
table rows are checked: framejit compiled no more graphs than torch.compile, and exactly as many as the
workload needs (the first call, one recompile when batch, float and int change together, one for batch 1).

It runs in its own process: the benchmark measures stock torch.compile side by side, whose first use in a
process changes global state for good (torch.distributions validation off, optimizer methods marked
disabled), and it turns the frame cache off through FRAMEJIT_CACHE."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PROGRAM = """
import json
from benchmarks import recompiles
(row,) = recompiles.main(["--models", "mlp", "--calls", "2", "--no-latency"])
print(json.dumps({"errors": row["errors"], "fj": row["fj"], "tc": row["tc"]}))
"""


def test_recompiles_benchmark_tiny():
    done = subprocess.run([sys.executable, "-c", _PROGRAM], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr
    *printed, last = done.stdout.strip().splitlines()
    row = json.loads(last)
    assert row["errors"] == []
    assert row["fj"]["graphs"] <= row["tc"]["graphs"]
    assert row["fj"]["graphs"] == row["fj"]["frames"] == 3
    assert "framejit compiled no more graphs than torch.compile on 1 of 1 models" in "\n".join(printed)
